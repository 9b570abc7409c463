"""Supervised fine-tuning: the cold start, its data files and formats."""
