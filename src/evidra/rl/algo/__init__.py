"""RL algorithms as pure tensor functions: advantages, losses, KL, filtering."""
