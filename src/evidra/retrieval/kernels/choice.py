"""Which function scores exact MaxSim: the chunked torch scorer or a fused kernel.

All take the same input (packed ``Block`` s of page vectors) and give the same ``(Q, N)`` float32
scores; they differ in what they write to memory. ``torch`` (``maxsim.score_blocks``) runs on any
device and materialises a block's ``tokens x pages x patches`` similarities, bounded by
``max_elements``; on the CPU it is the reference. ``triton`` (``maxsim_triton``) is one fused CUDA
kernel that keeps the running max per query token in registers and writes only the scores.
``avx512`` (``maxsim_avx512``) does the same on AVX-512 CPUs for fp32 scoring, reading pages
held in 16 bits without widening them into memory; calls it cannot take go to ``torch``. ``amx``
(``maxsim_amx``) does it for bf16 scoring on CPUs with AMX, on the matrix units; calls it cannot
take go to ``avx512``. ``avx512_bf16`` (``maxsim_avx512_bf16``) does it for bf16 scoring on CPUs with
AVX512_BF16, with ``vdpbf16ps``; calls it cannot take go to ``avx512``.

``auto`` picks ``triton`` where the index lives on CUDA and Triton is installed (the ``gpu`` extra);
on the CPU, the first fused kernel of the compute dtype (``CPU_KERNELS``, in order: ``avx512`` for
fp32 on a CPU with AVX-512F, ``amx`` for bf16 on a CPU with AMX tiles and bf16, ``avx512_bf16``
for bf16 on a CPU with AVX512_BF16) where a C compiler built it; else ``torch``. Whether the CPU
has the flags is read from ``compute.cpu_features`` (what a test's CPU profile stands in for);
whether the kernel runs, from this machine's own CPU. Forcing
``triton`` without Triton is an error naming the extra; forcing it off CUDA is an error unless
Triton's interpreter is on (``TRITON_INTERPRET=1``, which runs the kernel on CPU tensors with
numpy, slowly: a way to test the kernel, not to search). Forcing a CPU kernel where it cannot run
is an error saying why. An index reopened with ``auto`` scores with the kernel it recorded where
that one can score its dtype here (``reusable``), so that its scores do not move with the machine's
choice between kernels.

>>> resolve("auto", torch.device("cpu"), torch.float16)  # 16-bit GEMMs stay in torch
'torch'
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from evidra.core.errors import InvalidInputError, MissingDependencyError
from evidra.core.registry import Registry
from evidra.retrieval.kernels import compute_dtype as compute
from evidra.retrieval.kernels import maxsim, maxsim_amx, maxsim_avx512, maxsim_avx512_bf16
from evidra.retrieval.kernels.maxsim import Block
from evidra.retrieval.kernels.native import BlockScorer

logger = logging.getLogger(__name__)

KernelName = Literal["auto", "torch", "triton", "avx512", "amx", "avx512_bf16"]


KERNELS: Registry[BlockScorer] = Registry("MaxSim kernel")


# The chunked torch scorer and the fused C kernels have this signature themselves; Triton's is
# imported only when its kernel runs.
score_torch = maxsim.score_blocks  # one similarity matrix of at most ``max_elements`` entries at a time
score_avx512 = maxsim_avx512.score_blocks  # fp32 scoring; anything else in torch
score_amx = maxsim_amx.score_blocks  # bf16 scoring; anything else to ``avx512``
score_avx512_bf16 = maxsim_avx512_bf16.score_blocks  # bf16 scoring; anything else to ``avx512``
KERNELS.add("torch", score_torch)


@KERNELS.register("triton")
def score_triton(
    queries: Sequence[Tensor],
    blocks: Sequence[Block],
    n_rows: int,
    *,
    max_elements: int = 1 << 25,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """The fused Triton kernel (``maxsim_triton``); ``max_elements`` has nothing to bound there."""
    from evidra.retrieval.kernels import maxsim_triton  # imports triton: only when this kernel runs

    return maxsim_triton.score_blocks(queries, blocks, n_rows, max_elements=max_elements, dtype=dtype)


KERNELS.add("avx512", score_avx512)
KERNELS.add("amx", score_amx)
KERNELS.add("avx512_bf16", score_avx512_bf16)


CHOICES: tuple[str, ...] = ("auto", *KERNELS)


@dataclass(frozen=True)
class CpuKernel:
    """A fused CPU kernel: the compute dtype it scores, the CPU flags it needs, whether it runs on
    this machine (its own CPU and a compiler), how the index holds blocks for it, and its name in
    errors (``"needs a CPU with ..."``)."""

    dtype: torch.dtype
    flags: frozenset[str]
    runs_here: Callable[[], bool]  # this machine's own CPU has the flags (never a test's stand-in)
    available: Callable[[], bool]  # ... and the kernel was built (and, for AMX, enabled)
    hold: Callable[[Sequence[Block], torch.dtype], list[Block]]
    needs: str  # what the CPU lacks where runs_here() is False
    build: str  # what is missing where available() is False


# ``auto`` takes the first that fits, so ``amx`` comes before ``avx512_bf16`` (AMX CPUs have both).
# The lambdas look the modules' functions up at each call, where a test may have stood in for them.
CPU_KERNELS: dict[str, CpuKernel] = {
    "avx512": CpuKernel(
        dtype=torch.float32,
        flags=frozenset({"avx512f"}),
        runs_here=lambda: maxsim_avx512.cpu_has_avx512(),
        available=lambda: maxsim_avx512.available(),
        hold=lambda b, d: maxsim_avx512.hold(b, d),
        needs="a CPU with AVX-512F",
        build="a C compiler (cc, or $CC)",
    ),
    "amx": CpuKernel(
        dtype=torch.bfloat16,
        flags=maxsim_amx.NEEDS,
        runs_here=lambda: maxsim_amx.cpu_has_amx(),
        available=lambda: maxsim_amx.available(),
        hold=lambda b, d: maxsim_amx.hold(b, d),
        needs="a CPU with AMX (amx_tile, amx_bf16)",
        build="a C compiler with AMX support (gcc 11, clang 12 or later) and Linux 5.16 or later",
    ),
    "avx512_bf16": CpuKernel(
        dtype=torch.bfloat16,
        flags=maxsim_avx512_bf16.NEEDS,
        runs_here=lambda: maxsim_avx512_bf16.cpu_has_bf16(),
        available=lambda: maxsim_avx512_bf16.available(),
        hold=lambda b, d: maxsim_avx512_bf16.hold(b, d),
        needs="a CPU with AVX512_BF16",
        build="a C compiler with AVX512_BF16 support (gcc 10, clang 9 or later)",
    ),
}


def check_name(name: str) -> str:
    """``name`` if it is a kernel option, else an error listing the options."""
    if name not in CHOICES:
        raise InvalidInputError(f"MaxSim kernel {name!r}: use one of {', '.join(CHOICES)}")
    return name


def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def resolve(name: str, device: torch.device, dtype: torch.dtype | None = None) -> str:
    """The kernel that scores in ``dtype`` (None: not known yet) on ``device``: ``name`` itself
    (checked), or ``auto``'s choice."""
    if check_name(name) == "auto":
        if device.type == "cpu":
            return next((k for k in CPU_KERNELS if dtype is not None and cpu_ready(k, dtype)), "torch")
        if device.type != "cuda":
            return "torch"
        if triton_installed():
            return "triton"
        logger.info("Triton is not installed: exact MaxSim on %s runs chunked in torch", device)
        return "torch"
    if name == "triton":
        if not triton_installed():
            raise MissingDependencyError(
                "MaxSim kernel 'triton' needs Triton; install it with `pip install 'evidra[gpu]'` "
                "or use kernel 'torch'"
            )
        if device.type != "cuda" and not interpreting():
            raise InvalidInputError(
                f"MaxSim kernel 'triton' runs on CUDA devices, but the index is on {device}; "
                "use kernel 'torch' or 'auto' (or set TRITON_INTERPRET=1 to test it on the CPU)"
            )
    if name in CPU_KERNELS:
        why = cpu_unfit(name, device)
        if why:
            raise InvalidInputError(f"MaxSim kernel {name!r} {why}; use kernel 'torch' or 'auto'")
    return name


def cpu_ready(name: str, dtype: torch.dtype) -> bool:
    """Whether ``auto`` may pick CPU kernel ``name`` for scoring in ``dtype``: the CPU ``auto``
    decides for (``compute.cpu_features``, which a test may stand in for) has its flags, and the
    kernel runs here."""
    kernel = CPU_KERNELS[name]
    return dtype == kernel.dtype and kernel.flags <= compute.cpu_features().flags and kernel.available()


def reusable(name: str, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``auto`` may score in ``dtype`` on ``device`` with kernel ``name``, the one an index
    recorded (read from its metadata: any string): ``torch`` always; ``triton`` on CUDA with Triton
    installed; a CPU kernel where ``auto`` could pick it (``cpu_ready``)."""
    if name in CPU_KERNELS:
        return device.type == "cpu" and cpu_ready(name, dtype)
    if name == "triton":
        return device.type == "cuda" and triton_installed()
    return name == "torch"


def cpu_unfit(name: str, device: torch.device) -> str:
    """Why CPU kernel ``name`` cannot score on ``device`` here ("" when it can)."""
    kernel = CPU_KERNELS[name]
    if device.type != "cpu":
        return f"runs on the CPU, but the index is on {device}"
    if not kernel.runs_here():
        return f"needs {kernel.needs}, which this one lacks"
    if not kernel.available():
        return f"could not be built: it needs {kernel.build}"
    return ""


def score_in_place(
    name: str,
    queries: Sequence[Tensor],
    pages: Sequence[Tensor],
    rows: Sequence[int],
    n_rows: int,
    dtype: torch.dtype,
) -> Tensor | None:
    """``(Q, n_rows)`` scores of ``pages`` (``(L_i, D)`` each, e.g. views of the shards) read where
    they are, where kernel ``name`` can (fp32 on the AVX-512 kernel, which the AMX kernel passes
    fp32 to); None elsewhere, and the caller copies the pages into blocks."""
    if name not in CPU_KERNELS:
        return None
    return maxsim_avx512.score_pages(queries, pages, rows, n_rows, dtype)


def score_each_in_place(
    name: str, queries: Sequence[Tensor], pages: Sequence[Sequence[Tensor]], dtype: torch.dtype
) -> list[Tensor] | None:
    """Each query's ``(C_i,)`` scores against its own ``pages``, read where they are, where kernel
    ``name`` can (as ``score_in_place``); None elsewhere."""
    if name not in CPU_KERNELS:
        return None
    return maxsim_avx512.score_each(queries, pages, dtype)


def hold(name: str, blocks: Sequence[Block], dtype: torch.dtype) -> list[Block]:
    """``blocks`` in the layout kernel ``name`` reads fastest when it scores them in ``dtype`` (the
    blocks themselves for a kernel without one)."""
    kernel = CPU_KERNELS.get(name)
    return kernel.hold(blocks, dtype) if kernel else list(blocks)


def interpreting() -> bool:
    """Whether Triton's interpreter is on, read as Triton reads it (``triton.knobs``, 3.4 and
    later; the ``TRITON_INTERPRET`` variable itself before that). Imports Triton."""
    import triton

    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0") == "1"
