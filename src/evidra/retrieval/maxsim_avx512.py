"""Exact fp32 MaxSim on AVX-512 CPUs in one fused C kernel (``maxsim_avx512.c``).

Where the CPU computes in fp32 (no fast 16-bit GEMM) and the pages are held in 16 bits, the
chunked torch scorer widens every block into a buffer and multiplies it with MKL in a second pass;
at one query (20 tokens) that GEMM is too narrow to run at its batched rate, and one query sat at
4.5-5.5x its compute bound. This kernel reads each page once in its stored dtype (fp16, bf16 or
fp32), widens and transposes 16 vectors at a time into a tile in L1, multiply-adds up to 24 query
tokens against the tile in registers and keeps only each token's running max: no widened copy,
no similarity matrix. Pages are split between ``torch.get_num_threads()`` threads, each running
the kernel on its own range of pages (the call releases the GIL).

The kernel is compiled from its C source with the system C compiler (``$CC``, else ``cc``) at its
first use and cached under ``$EVIDRA_CACHE_DIR`` (else ``$XDG_CACHE_HOME/evidra``, else
``~/.cache/evidra``) in ``kernels/``, named by a hash of the source and the flags. Without a
compiler, or on a CPU without AVX-512F, ``available()`` is False and ``auto`` keeps the torch
scorer (``evidra.retrieval.kernels``). Calls this kernel cannot take (another compute dtype,
sign-bit codes, a dimension that is not a multiple of 16 or above 256) go to the torch scorer.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import logging
import os
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import torch
from torch import Tensor

from evidra.retrieval import compute, maxsim
from evidra.retrieval.maxsim import Block

logger = logging.getLogger(__name__)

GROUP = 24  # query tokens per pass in the kernel (GROUP in the C source)
MAX_DIM = 256
FLAGS = ("-O3", "-mavx512f", "-mfma", "-mf16c", "-shared", "-fPIC")
_KINDS = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_ARGS = (
    ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
    ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
)  # fmt: skip


_READ_CPU = compute.cpu_features  # this machine's own reader, whatever a test later stands in for it


@functools.cache
def cpu_has_avx512() -> bool:
    """Whether this machine's own CPU (read from /proc/cpuinfo, never a test's stand-in) runs it."""
    return "avx512f" in _READ_CPU(Path("/proc/cpuinfo")).flags


def cache_dir() -> Path:
    """Where the compiled kernel is kept."""
    if os.environ.get("EVIDRA_CACHE_DIR"):
        return Path(os.environ["EVIDRA_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "evidra"


def source() -> str:
    return resources.files("evidra.retrieval").joinpath("maxsim_avx512.c").read_text()


def compile_kernel(compiler: str | None = None, folder: Path | None = None) -> Path:
    """The compiled kernel's path, building it when no build of this source and these flags exists.
    Raises ``OSError`` / ``subprocess.SubprocessError`` when the compiler is missing or fails.

    A cached build is loaded only from a folder that this user owns and nobody else may write to
    (a shared ``$XDG_CACHE_HOME`` could otherwise hand this process someone else's code); where
    that does not hold, the kernel is built into a private temporary folder for this process."""
    cc = compiler or os.environ.get("CC") or "cc"
    text = source()
    key = hashlib.sha256("\0".join((text, cc, *FLAGS)).encode()).hexdigest()[:16]
    folder = (folder or cache_dir()) / "kernels"
    name = f"maxsim_avx512-{key}.so"
    with contextlib.suppress(OSError):  # unwritable: a private folder below
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not _private(folder):
        logger.warning(
            "%s is not private to this user: the MaxSim kernel is built for this process only", folder
        )
        folder = Path(tempfile.mkdtemp(prefix="evidra-kernels-"))
    target = folder / name
    if target.is_file() and _private(target):
        return target
    logger.info("building the fused AVX-512 MaxSim kernel with %s (once, a few seconds): %s", cc, target)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        src = Path(tmp) / "maxsim_avx512.c"
        src.write_text(text)
        built = Path(tmp) / name
        subprocess.run([cc, *FLAGS, "-o", str(built), str(src)], check=True, capture_output=True, timeout=300)
        os.replace(built, target)  # atomic: a concurrent build of the same key writes the same file
    return target


def _private(path: Path) -> bool:
    """Whether ``path`` belongs to this user and no group or other user may write to it."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022 and not path.is_symlink()


@functools.cache
def _library() -> ctypes.CDLL | None:
    if not cpu_has_avx512():
        return None
    try:
        lib = ctypes.CDLL(str(compile_kernel()))
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        logger.info(
            "the fused AVX-512 MaxSim kernel could not be built (%s %s): exact search scores in torch",
            exc, detail.decode(errors="replace")[:300],
        )  # fmt: skip
        return None
    lib.evidra_maxsim_block.restype = ctypes.c_int
    lib.evidra_maxsim_block.argtypes = _ARGS
    return lib


def available() -> bool:
    """Whether the kernel runs here: an AVX-512 CPU and a C compiler that built it (once per process)."""
    return _library() is not None


def fits(blocks: Sequence[Block], dtype: torch.dtype | None) -> bool:
    """Whether the kernel can score ``blocks`` in ``dtype`` (else the torch scorer does)."""
    if not blocks or (dtype or maxsim.compute_dtype(blocks[0].vectors)) != torch.float32:
        return False
    first = blocks[0].vectors
    dim = _dim(blocks[0])
    shaped = all(b.vectors.is_contiguous() and b.lengths.is_contiguous() for b in blocks)
    return (
        first.device.type == "cpu"
        and first.dtype in _KINDS
        and dim % 16 == 0
        and 0 < dim <= MAX_DIM
        and shaped
    )


def score_blocks(
    queries: Sequence[Tensor],
    blocks: Sequence[Block],
    n_rows: int,
    *,
    max_elements: int = 1 << 25,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Exact MaxSim of every query against every page in ``blocks``: ``(Q, n_rows)`` float32,
    ``-inf`` for rows in no block (``maxsim.score_blocks``'s contract)."""
    lib = _library()
    if lib is None or not fits(blocks, dtype):
        rows = [untile(b) for b in blocks]
        return maxsim.score_blocks(queries, rows, n_rows, max_elements=max_elements, dtype=dtype)
    tokens, owner = maxsim.pack_queries(queries)  # (T, D) fp32
    arranged = _arrange(tokens)
    best = [torch.empty(b.vectors.shape[0], tokens.shape[0], dtype=torch.float32) for b in blocks]
    parts = _split(blocks, torch.get_num_threads())
    run = functools.partial(_run, lib, blocks, arranged, int(tokens.shape[0]), best)
    if len(parts) == 1:
        run(parts[0])
    else:
        list(_pool(len(parts)).map(run, parts))
    scores = maxsim.per_query(torch.cat(best).T, owner, len(queries))  # (Q, sum C)
    out = torch.full((len(queries), n_rows), float("-inf"), dtype=torch.float32)
    out[:, torch.cat([b.rows for b in blocks])] = scores
    return out


def tile(block: Block) -> Block:
    """``block`` in the layout this kernel reads without transposing: ``(C, L'/16, D, 16)``, ``L'``
    the block's length rounded up to 16 (the extra vectors are zeros past every page's length)."""
    if block.tiled:
        return block
    c, length, dim = block.vectors.shape
    padded = -(-length // 16) * 16
    vectors = block.vectors
    if padded != length:
        vectors = torch.cat([vectors, vectors.new_zeros(c, padded - length, dim)], dim=1)
    tiles = vectors.view(c, padded // 16, 16, dim).transpose(2, 3).contiguous()  # (C, L'/16, D, 16)
    pad = block.pad
    if padded != length:
        pad = torch.arange(padded).unsqueeze(0) >= block.lengths.unsqueeze(1)  # (C, L')
    return Block(vectors=tiles, rows=block.rows, pad=pad, lengths=block.lengths, tiled=True)


def untile(block: Block) -> Block:
    """A tiled ``block`` back in the row-major ``(C, L', D)`` layout every scorer reads (a copy)."""
    if not block.tiled:
        return block
    c, n_tiles, dim, _ = block.vectors.shape
    vectors = block.vectors.transpose(2, 3).reshape(c, n_tiles * 16, dim)
    return Block(vectors=vectors, rows=block.rows, pad=block.pad, lengths=block.lengths)


def _dim(block: Block) -> int:
    """``D``: the vectors' dimension, in either layout."""
    return int(block.vectors.shape[2] if block.tiled else block.vectors.shape[-1])


def _arrange(tokens: Tensor) -> Tensor:
    """Query tokens ``(T, D)`` as the kernel reads them: ``(groups, D, GROUP)``, zero-padded."""
    t, dim = tokens.shape
    groups = -(-t // GROUP)
    padded = torch.zeros(groups * GROUP, dim, dtype=torch.float32)
    padded[:t] = tokens
    return padded.view(groups, GROUP, dim).transpose(1, 2).contiguous()


Part = list[tuple[int, int, int]]  # (block, first page, end page) ranges one thread scores


def _split(blocks: Sequence[Block], threads: int) -> list[Part]:
    """Cut the blocks' pages into ``threads`` ranges of about equal vector counts."""
    total = sum(b.n_tokens for b in blocks)
    share = max(1, -(-total // max(1, threads)))
    parts: list[Part] = [[]]
    room = share
    for i, block in enumerate(blocks):
        c, length = int(block.vectors.shape[0]), block.length
        start = 0
        while start < c:
            take = min(c - start, max(1, room // max(1, length)))
            parts[-1].append((i, start, start + take))
            start += take
            room -= take * length
            if room <= 0 and len(parts) < threads:
                parts.append([])
                room = share
    return [p for p in parts if p]


def _run(
    lib: ctypes.CDLL, blocks: Sequence[Block], queries: Tensor, tokens: int, best: list[Tensor], part: Part
) -> None:
    scratch = torch.empty(tokens * 16 + 16, dtype=torch.float32)  # running maxima, 64-byte aligned below
    offset = (-scratch.data_ptr() // 4) % 16
    runs = scratch[offset : offset + tokens * 16]
    for i, begin, end in part:
        block = blocks[i]
        vectors = block.vectors
        rc = lib.evidra_maxsim_block(
            vectors.data_ptr(), _KINDS[vectors.dtype], int(block.tiled), block.length, _dim(block),
            block.lengths.data_ptr(), begin, end, queries.data_ptr(), tokens, runs.data_ptr(),
            best[i].data_ptr(),
        )  # fmt: skip
        if rc != 0:
            raise RuntimeError(f"the AVX-512 MaxSim kernel refused dim {_dim(block)}")  # fits() rules it out


_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """One pool of ``workers`` threads per thread count, kept for the process."""
    with _POOLS_LOCK:
        if workers not in _POOLS:
            _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="evidra-maxsim")
        return _POOLS[workers]
