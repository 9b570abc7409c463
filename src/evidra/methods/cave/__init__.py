"""CAVE: process credits per turn from teacher-forced log-likelihoods."""

from evidra.methods.cave import method  # noqa: F401  (registers the method)
