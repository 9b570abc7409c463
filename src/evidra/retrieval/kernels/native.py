"""What the fused C MaxSim kernels (``maxsim_avx512``, ``maxsim_amx``, ``maxsim_avx512_bf16``) share:
building, caching and loading a kernel, and splitting a call's pages between threads.

A kernel is compiled from its C source in the package with the system C compiler (``$CC``, else
``cc``) at its first use and cached under ``$EVIDRA_CACHE_DIR`` (else ``$XDG_CACHE_HOME/evidra``,
else ``~/.cache/evidra``) in ``kernels/``, named by a hash of the source, the compiler and the
flags. A cached build is loaded only from a folder private to this user (``compile_kernel``).

Each kernel scores a range of pages of one block per call and writes each query token's best
similarity per page; ``score_split`` cuts the pages into ``torch.get_num_threads()`` ranges of
about equal vector counts, runs one range per thread (ctypes releases the GIL for the call) and
sums the tokens' maxima per query.

A kernel module describes its kernel once (``Fused``: its C source and entry points, the dtype it
scores, how it holds blocks and lays out query tokens, what one call takes beyond the arguments
all kernels take, the scorer it passes on to); its ``available``, ``fits``, ``hold`` and
``score_blocks`` are that record's. What stays in the module is what differs between kernels.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import hashlib
import itertools
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Protocol, TypeVar

import torch
from torch import Tensor

from evidra.retrieval.kernels import compute_dtype as compute
from evidra.retrieval.kernels import maxsim
from evidra.retrieval.kernels.maxsim import Block

logger = logging.getLogger(__name__)

_READ_CPU = compute.cpu_features  # this machine's own reader, whatever a test later stands in for it


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This machine's own CPU flags, read from /proc/cpuinfo (never a test's stand-in): what
    decides whether a kernel CAN run here, as opposed to whether ``auto`` picks it."""
    return _READ_CPU(Path("/proc/cpuinfo")).flags


@dataclass(frozen=True)
class Kernel:
    """One C kernel: its source file in the package, compile flags and a name for the log."""

    source: str  # file name in evidra.retrieval, e.g. "maxsim_avx512.c"
    flags: tuple[str, ...]
    label: str  # "AVX-512", "AMX"

    @property
    def stem(self) -> str:
        return self.source.removesuffix(".c")

    def text(self) -> str:
        return resources.files("evidra.retrieval.kernels").joinpath(self.source).read_text()


def cache_dir() -> Path:
    """Where compiled kernels are kept (in ``kernels/`` below it)."""
    if os.environ.get("EVIDRA_CACHE_DIR"):
        return Path(os.environ["EVIDRA_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "evidra"


def compile_kernel(kernel: Kernel, compiler: str | None = None, folder: Path | None = None) -> Path:
    """The compiled kernel's path, building it when no build of this source and these flags exists.
    Raises ``OSError`` / ``subprocess.SubprocessError`` when the compiler is missing or fails.

    A cached build is loaded only from a folder that this user owns and nobody else may write to
    (a shared ``$XDG_CACHE_HOME`` could otherwise hand this process someone else's code); where
    that does not hold, the kernel is built into a private temporary folder for this process."""
    cc = compiler or os.environ.get("CC") or "cc"
    text = kernel.text()
    key = hashlib.sha256("\0".join((text, cc, *kernel.flags)).encode()).hexdigest()[:16]
    folder = (folder or cache_dir()) / "kernels"
    name = f"{kernel.stem}-{key}.so"
    with contextlib.suppress(OSError):  # unwritable: a private folder below
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not _private(folder):
        logger.warning(
            "%s is not private to this user: the MaxSim kernel is built for this process only", folder
        )
        folder = Path(tempfile.mkdtemp(prefix="evidra-kernels-"))
        atexit.register(shutil.rmtree, folder, True)  # loaded libraries stay mapped; the files go
    target = folder / name
    if target.is_file() and _private(target):
        return target
    logger.info(
        "building the fused %s MaxSim kernel with %s (once, a few seconds): %s", kernel.label, cc, target
    )
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        src = Path(tmp) / kernel.source
        src.write_text(text)
        built = Path(tmp) / name
        cmd = [cc, *kernel.flags, "-o", str(built), str(src)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=300)
        os.replace(built, target)  # atomic: a concurrent build of the same key writes the same file
    return target


def _private(path: Path) -> bool:
    """Whether ``path`` belongs to this user and no group or other user may write to it."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022 and not path.is_symlink()


def load(kernel: Kernel) -> ctypes.CDLL | None:
    """The kernel's library, built if need be; None (and one log line) where it cannot be built."""
    try:
        return ctypes.CDLL(str(compile_kernel(kernel)))
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        logger.info(
            "the fused %s MaxSim kernel could not be built (%s %s): exact search scores in torch",
            kernel.label,
            exc,
            detail.decode(errors="replace")[:300],
        )
        return None


class BlockScorer(Protocol):
    """Exact MaxSim of every query against every page in ``blocks``: ``(Q, n_rows)`` float32,
    ``-inf`` for rows in no block; products in ``dtype`` (default: the blocks' own)."""

    def __call__(
        self,
        queries: Sequence[Tensor],
        blocks: Sequence[Block],
        n_rows: int,
        *,
        max_elements: int,
        dtype: torch.dtype | None,
    ) -> Tensor: ...


Part = list[tuple[int, int, int]]  # (block, first page, end page) ranges one thread scores


@dataclass(frozen=True, eq=False)
class Packed:
    """One call's query tokens as a kernel reads them."""

    tokens: Tensor  # laid out by the kernel's ``arrange``
    owner: Tensor  # (T,) int32: the query of each token, in order
    count: int  # T, real tokens
    queries: int  # Q


# scores one thread's part: packed queries, per-block (C, T) maxima or (C, Q) sums, the part
RunPart = Callable[[Packed, list[Tensor], Part], None]


def fit_blocks(
    blocks: Sequence[Block],
    layout: str,
    storage: Collection[torch.dtype],
    dim: int,
    multiple: int,
    max_dim: int,
) -> bool:
    """Whether a fused CPU kernel can read ``blocks``: on the CPU, held in one of ``storage``, each
    row-major or in the kernel's own ``layout``, contiguous, of dimension ``dim``, a positive
    multiple of ``multiple`` up to ``max_dim``."""
    first = blocks[0].vectors
    return (
        first.device.type == "cpu"
        and first.dtype in storage
        and 0 < dim <= max_dim
        and dim % multiple == 0
        and all(
            b.layout in ("rows", layout) and b.vectors.is_contiguous() and b.lengths.is_contiguous()
            for b in blocks
        )
    )


def score_split(
    queries: Sequence[Tensor],
    blocks: Sequence[Block],
    n_rows: int,
    arrange: Callable[[Tensor], Tensor],
    run: RunPart,
    *,
    summed: bool = False,
) -> Tensor:
    """``(Q, n_rows)`` float32 MaxSim scores, ``-inf`` for rows in no block, from a kernel that
    scores pages block by block: ``run`` scores one part of the pages per thread with the query
    tokens as ``arrange`` lays them out for it, writing each page's row of its block's output, which
    holds each token's best similarity (``(C, T)``), or with ``summed`` each query's score
    (``(C, Q)``, summed in the kernel). All blocks' rows are views of one array, allocated once:
    fresh memory costs page faults, ~3 ms per 10 MB on the 2-core Xeon."""
    tokens, owner = maxsim.pack_queries(queries)  # (T, D) fp32
    t = int(tokens.shape[0])
    packed = Packed(arrange(tokens), owner.to(torch.int32), t, len(queries))
    sizes = [int(b.vectors.shape[0]) for b in blocks]
    best = torch.empty(sum(sizes), len(queries) if summed else t, dtype=torch.float32)  # (sum C, Q or T)
    parts = split(blocks, shares(sum(b.n_tokens for b in blocks)))
    run_each(functools.partial(run, packed, list(best.split(sizes))), parts)
    scores = best.T if summed else maxsim.per_query(best.T, owner, len(queries))  # (Q, sum C)
    out = torch.full((len(queries), n_rows), float("-inf"), dtype=torch.float32)
    out[:, torch.cat([b.rows for b in blocks])] = scores
    return out


def split(blocks: Sequence[Block], parts: int) -> list[Part]:
    """Cut the blocks' pages into ``parts`` ranges of about equal vector counts."""
    total = sum(b.n_tokens for b in blocks)
    share = max(1, -(-total // max(1, parts)))
    cut: list[Part] = [[]]
    room = share
    for i, block in enumerate(blocks):
        c, length = int(block.vectors.shape[0]), block.length
        start = 0
        while start < c:
            take = min(c - start, max(1, room // max(1, length)))
            cut[-1].append((i, start, start + take))
            start += take
            room -= take * length
            if room <= 0 and len(cut) < parts:
                cut.append([])
                room = share
    return [p for p in cut if p]


T = TypeVar("T")


def shares(vectors: int) -> int:
    """Into how many parts to cut a call over ``vectors`` page vectors: ``PARTS_PER_THREAD`` per
    thread, each of at least ``MIN_PART`` vectors. Threads take the next part when done with one,
    so a thread that shares its core with another process (a busy machine) takes fewer parts
    instead of holding up the call: with one part per thread, one such thread made a search wait
    for it at half speed."""
    return max(1, min(torch.get_num_threads() * PARTS_PER_THREAD, vectors // MIN_PART))


PARTS_PER_THREAD = 4
MIN_PART = 8192  # 32 pages of 256 vectors; a part costs ~20 us of Python and ctypes


def run_each(job: Callable[[T], None], parts: Sequence[T]) -> None:
    """``job`` on every part, on ``torch.get_num_threads()`` threads that each take the next part
    when done (this thread alone for a single part or thread)."""
    threads = min(torch.get_num_threads(), len(parts))
    if threads <= 1:
        for part in parts:
            job(part)
    else:
        list(_pool(threads).map(job, parts))


def spans(lengths: Tensor, parts: int) -> list[tuple[int, int]]:
    """Cut pages of ``lengths`` vectors into at most ``parts`` consecutive ``(begin, end)`` index
    ranges of about equal vector counts."""
    ends = torch.cumsum(lengths, 0)  # (C,)
    total = int(ends[-1]) if len(ends) else 0
    cuts = [int(torch.searchsorted(ends, total * k // parts, right=True)) for k in range(1, parts)]
    bounds = sorted({0, *cuts, len(lengths)})
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def aligned(numel: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """``numel`` elements of ``dtype`` whose first one sits on a 64-byte boundary (a cache line, one
    AVX-512 register)."""
    size = torch.empty(0, dtype=dtype).element_size()
    room = torch.empty(numel + 64 // size, dtype=dtype)
    offset = (-room.data_ptr() % 64) // size
    return room[offset : offset + numel]


_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """One pool of ``workers`` threads per thread count, kept for the process."""
    with _POOLS_LOCK:
        if workers not in _POOLS:
            _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="evidra-maxsim")
        return _POOLS[workers]


def tile_slices(block: Block, layout: str, width: int) -> Block:
    """``block`` as ``(C, L'/16, D/width, 16, width)``: per 16 vectors, ``width`` dimensions of each
    side by side, one slice of dimensions after another; ``L'`` the block's length rounded up to
    16 (zero vectors past every page's length)."""
    if block.tiled:
        return block
    block = maxsim.round_up(block)
    c, length, dim = block.vectors.shape
    tiles = block.vectors.view(c, length // 16, 16, dim // width, width).transpose(2, 3).contiguous()
    return Block(vectors=tiles, rows=block.rows, pad=block.pad, lengths=block.lengths, layout=layout)


def untile_slices(block: Block, layout: str, width: int) -> Block:
    """A ``tile_slices`` d block of ``layout`` back in the row-major ``(C, L', D)`` layout (a copy)."""
    if block.layout != layout:
        return block
    c, n_tiles, slices, _, _ = block.vectors.shape
    vectors = block.vectors.transpose(2, 3).reshape(c, n_tiles * 16, slices * width)
    return Block(vectors=vectors, rows=block.rows, pad=block.pad, lengths=block.lengths)


CType = type[ctypes.c_void_p] | type[ctypes.c_int] | type[ctypes.c_int64]
# the arguments every kernel's block call takes after the pages' address (and what ``leading``
# adds): tiled, L, D, the pages' lengths, first page, end page, query tokens, T
BLOCK_ARGS: tuple[CType, ...] = (
    ctypes.c_int,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_int64,
)


@dataclass(frozen=True)
class Fused:
    """One fused CPU kernel: what its module says about it, and ``available``, ``fits``, ``hold``
    and ``score_blocks``, which the module hands out as its own.

    ``functions`` maps each C function to its argument types (each returns 0 for done); the first
    scores pages ``[begin, end)`` of one block, called with the pages' address, ``leading``,
    ``BLOCK_ARGS``, ``trailing``, the running maxima (``scratch`` fp32 elements per thread) and
    the block's output. A block held as the kernel's tiles has ``layout`` and its dimension ``D``
    spread as ``shape[2] * width``."""

    kernel: Kernel
    library: Callable[[], ctypes.CDLL | None]  # the module's cached ``open_library``, or None
    functions: dict[str, tuple[CType, ...]]
    dtype: torch.dtype  # the compute dtype it scores in
    storage: frozenset[torch.dtype]  # the dtypes it reads blocks in
    layout: str  # ``Block.layout`` of the blocks it holds
    width: int
    multiple: int  # D must be a positive multiple of this ...
    max_dim: int  # ... up to this (MAX_DIM in the C source)
    tile: Callable[[Block], Block]  # a block as the kernel holds it
    untile: Callable[[Block], Block]  # and back in rows, for the scorer it passes on to
    arrange: Callable[[Tensor], Tensor]  # query tokens (T, D) as the kernel reads them
    scratch: Callable[[Packed], int]
    fallback: BlockScorer  # scores the calls this kernel cannot take
    leading: Callable[[Block], tuple[int, ...]] = lambda block: ()
    trailing: Callable[[Packed], tuple[int, ...]] = lambda queries: ()
    summed: bool = False  # the kernel sums each query's token maxima itself
    ready: Callable[[ctypes.CDLL], bool] = lambda lib: True  # asked once, after loading it

    def available(self) -> bool:
        """Whether the kernel runs here: its CPU flags and a compiler that built it (once per process)."""
        return self.library() is not None

    def dim(self, block: Block) -> int:
        """``D``: the vectors' dimension, in rows or in the kernel's tiles."""
        shape = block.vectors.shape
        return int(shape[2] * self.width if block.layout == self.layout else shape[-1])

    def fits(self, blocks: Sequence[Block], dtype: torch.dtype | None) -> bool:
        """Whether the kernel can score ``blocks`` in ``dtype`` (the blocks' own by default); the
        scorer it passes on to takes the calls it cannot."""
        if not blocks or (dtype or maxsim.compute_dtype(blocks[0].vectors)) != self.dtype:
            return False
        dim = self.dim(blocks[0])
        return fit_blocks(blocks, self.layout, self.storage, dim, self.multiple, self.max_dim)

    def hold(self, blocks: Sequence[Block], dtype: torch.dtype) -> list[Block]:
        """``blocks`` as the index holds them for this kernel: tiled where it scores them in ``dtype``."""
        return [self.tile(b) for b in blocks] if self.fits(blocks, dtype) else list(blocks)

    def score_blocks(
        self,
        queries: Sequence[Tensor],
        blocks: Sequence[Block],
        n_rows: int,
        *,
        max_elements: int = 1 << 25,
        dtype: torch.dtype | None = None,
    ) -> Tensor:
        """Exact MaxSim of every query against every page in ``blocks``: ``(Q, n_rows)`` float32,
        ``-inf`` for rows in no block (``maxsim.score_blocks``'s contract)."""
        lib = self.library()
        if lib is None or not self.fits(blocks, dtype):
            rows = [self.untile(b) for b in blocks]
            return self.fallback(queries, rows, n_rows, max_elements=max_elements, dtype=dtype)
        run = functools.partial(self._run, lib, blocks)
        return score_split(queries, blocks, n_rows, self.arrange, run, summed=self.summed)

    def _run(
        self, lib: ctypes.CDLL, blocks: Sequence[Block], queries: Packed, out: list[Tensor], part: Part
    ) -> None:
        score = getattr(lib, next(iter(self.functions)))
        runs = aligned(self.scratch(queries))
        for i, begin, end in part:
            block = blocks[i]
            rc = score(
                block.vectors.data_ptr(),
                *self.leading(block),
                int(block.tiled),
                block.length,
                self.dim(block),
                block.lengths.data_ptr(),
                begin,
                end,
                queries.tokens.data_ptr(),
                queries.count,
                *self.trailing(queries),
                runs.data_ptr(),
                out[i].data_ptr(),
            )
            if rc != 0:  # fits() rules it out
                raise RuntimeError(f"the {self.kernel.label} MaxSim kernel refused dim {self.dim(block)}")


def open_library(fused: Fused) -> ctypes.CDLL | None:
    """The kernel's library with its functions typed, built if need be; None where it cannot be
    built or is not ``ready`` to run."""
    lib = load(fused.kernel)
    if lib is None or not fused.ready(lib):
        return None
    for name, argtypes in fused.functions.items():
        function = getattr(lib, name)
        function.restype = ctypes.c_int
        function.argtypes = argtypes
    return lib
