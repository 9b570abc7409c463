"""Which dtype exact MaxSim scores in on this machine.

Shards hold fp16 vectors; what the scoring GEMM runs in is a separate choice, and the fastest one
differs by an order of magnitude between machines. On a 2-core AMD EPYC with AVX-512 bf16 (no
AVX-512 FP16, no AMX), one scoring block's matmul (16384x128 @ 128x640) ran at up to 390 GFLOP/s
in bf16, 120-190 in fp32 and 7-20 in fp16 (fp16 has no hardware path there); a Xeon with AMX runs
bf16 fast; a GPU runs both half types on its tensor cores. So ``auto`` times a small GEMM in each
candidate dtype once per process (``probe_rates``) and takes the fastest, preferring the more
precise dtype unless a less precise one is clearly faster (``choose``). On x86 a half dtype is
only a candidate where the CPU flags show a hardware path for it (``candidates``), so a probe
taken while the machine is busy cannot pick a software-emulated one.

The candidates are the dtypes that keep exact search exact: fp16 and fp32 rank like fp32; bf16
GEMMs accumulate in fp32 but keep 8 significant bits of inputs and similarities, which alone
ranked the benchmark's top 10 like fp32 for 98% of the pages, so the index re-scores bf16's best
pages in fp32 (``MaxSimOptions.rescore``) and excludes bf16 when that is switched off
(``benchmarks/maxsim.py`` prints the agreement of every dtype, with and without re-scoring).

>>> choose({"float32": 180.0, "bfloat16": 1000.0, "float16": 7.0}, ("float32", "float16", "bfloat16"))
'bfloat16'
>>> choose({"float32": 180.0, "bfloat16": 200.0, "float16": 7.0}, ("float32", "float16", "bfloat16"))
'float32'
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from evidra.core.errors import InvalidInputError

logger = logging.getLogger(__name__)

ComputeDtype = Literal["auto", "float32", "bfloat16", "float16"]
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
CHOICES: tuple[str, ...] = ("auto", *DTYPES)

# what ``auto`` may pick per device type, most precise first (fp16 keeps 10 mantissa bits, bf16 7)
CANDIDATES: dict[str, tuple[str, ...]] = {
    "cpu": ("float32", "float16", "bfloat16"),
    "cuda": ("float16", "bfloat16"),
}
MARGIN = 1.25  # a less precise dtype must be this much faster to be chosen: probe noise is ~10%

Rates = Mapping[str, float]  # dtype name -> measured GEMM rate, GFLOP/s


def check_name(name: str) -> str:
    """``name`` if it is a compute dtype option, else an error listing the options."""
    if name not in CHOICES:
        raise InvalidInputError(f"compute_dtype {name!r}: use one of {', '.join(CHOICES)}")
    return name


StorageDtype = Literal["auto", "float16", "bfloat16", "float32"]


def check_storage(name: str) -> str:
    """``name`` if it is a storage dtype option, else an error listing the options."""
    if name not in CHOICES:
        raise InvalidInputError(f"storage_dtype {name!r}: use one of {', '.join(CHOICES)}")
    return name


def storage_for(name: str, computed_in: str) -> str:
    """The dtype the in-memory page vectors are held in.

    ``auto`` is 16-bit, half the memory of fp32: the compute dtype where that is a 16-bit one,
    else float16, the shards' own dtype, which fp32 scoring widens block by block (exactly: every
    fp16 value is an fp32 value). ``float32`` trades twice the memory for no widening.

    >>> storage_for("auto", "float32"), storage_for("auto", "bfloat16"), storage_for("float32", "float32")
    ('float16', 'bfloat16', 'float32')
    """
    if check_storage(name) != "auto":
        return name
    return computed_in if computed_in in ("float16", "bfloat16") else "float16"


def choose(rates: Rates, candidates: Sequence[str], margin: float = MARGIN) -> str:
    """The most precise of ``candidates`` whose rate is within ``margin`` of the fastest one.

    ``candidates`` are ordered most precise first; one without a rate is not considered.
    """
    known = [c for c in candidates if rates.get(c, 0.0) > 0.0]
    if not known:
        raise InvalidInputError(f"no GEMM rate for any of {', '.join(candidates)}; got {dict(rates)}")
    best = max(rates[c] for c in known)
    return next(c for c in known if rates[c] * margin >= best)


class Gemm:
    """One ``(rows, dim) @ (dim, tokens)`` matmul in ``dtype`` on ``device``, ready to time."""

    def __init__(
        self, dtype: torch.dtype, device: torch.device, rows: int = 1024, tokens: int = 128, dim: int = 128
    ) -> None:
        g = torch.Generator().manual_seed(0)
        self.pages = torch.randn(rows, dim, generator=g).to(device, dtype)
        self.query = torch.randn(tokens, dim, generator=g).to(device, dtype)
        self.out = torch.empty(rows, tokens, dtype=dtype, device=device)
        self.flops = 2 * rows * tokens * dim
        self.device = device
        self.run()  # warm up: allocation, kernel selection, thread pool

    def run(self) -> None:
        torch.matmul(self.pages, self.query.T, out=self.out)

    def gflops(self) -> float:
        """The rate of one call, GFLOP/s."""
        _sync(self.device)
        t0 = time.perf_counter()
        self.run()
        _sync(self.device)
        return self.flops / max(time.perf_counter() - t0, 1e-9) / 1e9


def gemm_gflops(
    dtype: torch.dtype,
    device: torch.device,
    *,
    rows: int = 1024,
    tokens: int = 128,
    dim: int = 128,
    repeats: int = 3,
) -> float:
    """Best-of-``repeats`` rate of ``(rows, dim) @ (dim, tokens)`` in ``dtype``: GFLOP/s."""
    gemm = Gemm(dtype, device, rows, tokens, dim)
    return max(gemm.gflops() for _ in range(repeats))


def measure_rates(names: Sequence[str], device: torch.device, rounds: int = 6) -> dict[str, float]:
    """Best GEMM rate of each dtype in ``names`` over ``rounds`` interleaved rounds, GFLOP/s.

    The shape is a slice of one CPU scoring block (``maxsim.score_block``: pages x dim @ dim x
    padded query tokens). On a shared machine one call can stall for a whole scheduler slice, so
    each dtype keeps its best call, and rounds alternate between dtypes so that a busy spell
    slows them all rather than one. A dtype 8x slower than the best so far is hopeless and
    stops being timed (fp16 without a hardware path, ~5 ms a call, would dominate the probe).
    """
    gemms = {name: Gemm(DTYPES[name], device) for name in names}
    rates = dict.fromkeys(names, 0.0)
    for _ in range(rounds):
        best = max(rates.values())
        for name, gemm in gemms.items():
            if rates[name] * _HOPELESS >= best:
                rates[name] = max(rates[name], gemm.gflops(), gemm.gflops())
    return rates


_HOPELESS = 8.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def candidates(device: torch.device, features: CpuFeatures | None = None) -> tuple[str, ...]:
    """The dtypes ``auto`` may pick on ``device``, most precise first.

    On an x86 CPU (its flags are known) a half dtype needs a hardware path: bf16 needs
    ``avx512_bf16`` or ``amx_bf16``, fp16 needs ``avx512_fp16`` or ``amx_fp16``. Without one,
    the GEMM converts in software (fp16 ran at 7-20 GFLOP/s against fp32's 120-190 on an EPYC),
    and a probe taken while the machine is busy must not be able to pick it.
    """
    names = CANDIDATES.get(device.type, ())
    if device.type != "cpu":
        return names
    flags = (features or cpu_features()).flags
    if not flags & {"sse2", "avx2"}:  # not x86, or flags unknown: the probe alone decides
        return names
    return tuple(n for n in names if n not in _HARDWARE or flags & _HARDWARE[n])


_HARDWARE = {"bfloat16": {"avx512_bf16", "amx_bf16"}, "float16": {"avx512_fp16", "amx_fp16"}}


@functools.cache
def probe_rates(device: torch.device) -> dict[str, float]:
    """GEMM rate of every candidate dtype of ``device``, measured once per process."""
    rates = measure_rates(candidates(device) or ("float32",), device)
    logger.debug("GEMM rates on %s (GFLOP/s): %s", device, {n: round(r, 1) for n, r in rates.items()})
    return rates


def resolve(
    name: str,
    device: torch.device,
    probe: Callable[[torch.device], Rates] | None = None,
    *,
    exclude: Sequence[str] = (),
    features: CpuFeatures | None = None,
) -> str:
    """The dtype name to score in: ``name`` itself, or for ``auto`` the choice by ``probe``'s rates
    (default ``probe_rates``: measured here, once per process) among ``candidates(device,
    features)`` less ``exclude``."""
    if check_name(name) != "auto":
        return name
    allowed = [c for c in candidates(device, features) if c not in exclude]
    if allowed == ["float32"] or not allowed:  # nothing to choose (mps, xpu, ...: fp32 is exact)
        return "float32"
    chosen = choose((probe or probe_rates)(device), allowed)
    logger.debug("scoring MaxSim in %s on %s", chosen, device)  # `index build` prints the choice
    return chosen


WATCHED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16")


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU's model name and the instruction-set flags that decide which GEMMs are fast."""

    model: str
    flags: frozenset[str]

    def summary(self) -> str:
        """``model; flag yes/no ...`` for the flags in ``WATCHED_FLAGS``."""
        marks = " ".join(f"{f} {'yes' if f in self.flags else 'no'}" for f in WATCHED_FLAGS)
        return f"{self.model or 'unknown CPU'}; {marks}"


def cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuFeatures:
    """Model name and flags of the first CPU in ``cpuinfo`` (Linux); empty where it is missing."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return CpuFeatures("", frozenset())
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return CpuFeatures(fields.get("model name", ""), frozenset(fields.get("flags", "").split()))


@dataclass(frozen=True)
class CpuProfile:
    """A kind of CPU this project runs on: its flags and its GEMM rates (GFLOP/s, one thread).

    ``auto`` decides from exactly these two inputs (``candidates`` and ``probe_rates``), so a test
    that puts a profile in their place sees that machine's choice on any machine.
    """

    name: str
    features: CpuFeatures
    rates: Mapping[str, float]

    def probe(self, device: torch.device) -> Mapping[str, float]:
        """What ``probe_rates`` would measure on this CPU: the rates of its candidates, one mapping."""
        return self._probed.setdefault(
            device.type, {n: self.rates[n] for n in candidates(device, self.features) if n in self.rates}
        )

    @functools.cached_property
    def _probed(self) -> dict[str, dict[str, float]]:
        return {}


_X86 = frozenset({"sse2", "avx2"})
PROFILES: dict[str, CpuProfile] = {
    profile.name: profile
    for profile in (
        # Intel Xeon with AMX and AVX-512 FP16: bf16 on the matrix units; torch's fp16 GEMM is slow
        CpuProfile(
            "amx",
            CpuFeatures(
                "Intel Xeon (AMX)",
                _X86 | {"avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16"},
            ),
            {"float32": 215.0, "bfloat16": 733.0, "float16": 31.0},
        ),
        # AMD EPYC with AVX-512 bf16, no AVX-512 FP16, no AMX
        CpuProfile(
            "avx512_bf16",
            CpuFeatures("AMD EPYC", _X86 | {"avx512f", "avx512_bf16"}),
            {"float32": 182.0, "bfloat16": 1013.0, "float16": 7.0},
        ),
        # Intel Xeon with AVX-512 but neither bf16 nor fp16: fp32 is the fast dtype
        CpuProfile(
            "avx512",
            CpuFeatures("Intel Xeon (AVX-512)", _X86 | {"avx512f"}),
            {"float32": 190.0, "bfloat16": 45.0, "float16": 4.0},
        ),
        # AVX2 only: no 16-bit hardware path, so the flags alone rule the half dtypes out
        CpuProfile(
            "avx2", CpuFeatures("x86 (AVX2)", _X86), {"float32": 100.0, "bfloat16": 20.0, "float16": 5.0}
        ),
    )
}
