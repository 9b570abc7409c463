"""VRAG-RL: a multi-turn agent that searches the corpus and crops pages."""

from evidra.methods.vragrl import judge, method  # noqa: F401  (registers the method and its judge prompt)
