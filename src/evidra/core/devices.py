"""``auto`` devices and dtypes: the GPU (and bfloat16) when one is present, else the CPU (float32).

Every place that picks a device accepts ``auto`` and resolves it here, when the model loads.

>>> resolve_device("cpu"), resolve_dtype("auto", "cpu")
('cpu', 'float32')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

AUTO = "auto"


def resolve_device(device: str) -> str:
    """``auto`` becomes ``cuda`` when a GPU is present, else ``cpu``; anything else is kept, but
    ``cuda`` where torch sees no GPU is an error saying why (not a traceback at the first tensor)."""
    if device != AUTO and not device.startswith("cuda"):
        return device
    import torch

    if device == AUTO:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        from evidra.core.errors import InvalidInputError

        why = "this torch is a CPU-only build" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise InvalidInputError(f"device {device!r} asked for, but {why}; use --device cpu (or auto)")
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto`` weights: bfloat16 on a GPU, float32 on the CPU; anything else is kept."""
    if dtype != AUTO:
        return dtype
    return "bfloat16" if resolve_device(device).startswith("cuda") else "float32"


def peak_memory_gb(device: torch.device | str, *, reset: bool = True) -> float | None:
    """The most memory torch held allocated on ``device`` (a CUDA device) since the last reset, in
    GB, then reset; None elsewhere (a CPU process's peak is its resident set, not torch's)."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return None
    peak = torch.cuda.max_memory_allocated(dev) / 1e9
    if reset:
        torch.cuda.reset_peak_memory_stats(dev)
    return peak
