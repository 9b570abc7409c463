"""Evaluation: benchmark metrics (``metrics``), runners and reports."""

from __future__ import annotations

from evidra.eval.metrics import METRICS, Metric

__all__ = ["METRICS", "Metric"]
