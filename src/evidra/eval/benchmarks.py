"""Benchmark sources of the harness by name: published benchmarks (``evidra.data.loaders``) and
synthetic ones generated on the fly (rendered documents, Tunnel-Vision-style and TRACER-style).

``synthetic_samples("tunnel.chain", out_dir, n=8, seed=0)`` writes the images under
``out_dir`` and returns the samples; the same name, n and seed give the same benchmark. The
registry lives with the generators (``evidra.data.synth.sources``), where training reads it too.
"""

from __future__ import annotations

from evidra.data.synth.sources import SYNTHETIC, SyntheticSource, synthetic_samples

__all__ = ["SYNTHETIC", "SyntheticSource", "synthetic_samples"]
