"""A run on disk: its folder, checkpoints, export and model card."""
