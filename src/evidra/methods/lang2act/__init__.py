"""Lang2Act: linguistic tools curated into a toolbox, then RL with a tool-validity reward."""

from evidra.methods.lang2act import judge, method  # noqa: F401  (registers the method and its judge prompt)
