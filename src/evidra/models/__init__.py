"""Vision-language models: loading, chat inputs, generation, log-probs, tiny offline models."""
