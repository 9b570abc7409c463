"""CAVE: process credits per turn from teacher-forced log-likelihoods."""

from evidra.methods.cave import judge, method  # noqa: F401  (registers the method and its judge prompt)
