"""``auto`` devices and dtypes: the GPU (and bfloat16) when one is present, else the CPU (float32).

Every place that picks a device accepts ``auto`` and resolves it here, when the model loads.

>>> resolve_device("cpu"), resolve_dtype("auto", "cpu")
('cpu', 'float32')
"""

from __future__ import annotations

AUTO = "auto"


def resolve_device(device: str) -> str:
    """``auto`` becomes ``cuda`` when a GPU is present, else ``cpu``; anything else is kept."""
    if device != AUTO:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto`` weights: bfloat16 on a GPU, float32 on the CPU; anything else is kept."""
    if dtype != AUTO:
        return dtype
    return "bfloat16" if resolve_device(device).startswith("cuda") else "float32"
