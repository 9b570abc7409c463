"""EVisRAG: observe, per-image evidence, think, answer; rewards scoped to their spans (RS-GRPO)."""

from evidra.methods.evisrag import method  # noqa: F401  (registers the method)
