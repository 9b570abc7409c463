"""What the fused C kernels share (``evidra.retrieval.kernels.native``): the thread split, the build cache
and the refusal to load a build that someone else could have written."""

from __future__ import annotations

import itertools
import logging
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from evidra.retrieval.kernels import maxsim, maxsim_amx, maxsim_avx512, native


def _builds(kernel: native.Kernel, folder: Path) -> Path:
    """The kernel built into ``folder``; the test is skipped where the C compiler cannot build it."""
    try:
        return native.compile_kernel(kernel, folder=folder)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"the C compiler cannot build the {kernel.label} kernel here: {exc}")


KINDS = pytest.mark.parametrize("kernel", [maxsim_avx512.KERNEL, maxsim_amx.KERNEL], ids=lambda k: k.label)


def test_pages_are_split_between_threads_without_gaps_or_overlaps() -> None:
    g = torch.Generator().manual_seed(3)
    pages = [torch.randn(int(n), 16, generator=g) for n in torch.randint(1, 300, (97,), generator=g)]
    blocks = maxsim.build_blocks(pages, list(range(97)), max_tokens=1000, dtype=torch.float16)
    for threads in (1, 2, 3, 8, 200):
        parts = native.split(blocks, threads)
        assert 1 <= len(parts) <= threads
        seen = [(b, p) for part in parts for b, lo, hi in part for p in range(lo, hi)]
        expected = [(b, p) for b, block in enumerate(blocks) for p in range(block.vectors.shape[0])]
        assert sorted(seen) == expected  # every page of every block once
        if threads == 2:
            sizes = [sum((hi - lo) * blocks[b].vectors.shape[1] for b, lo, hi in part) for part in parts]
            assert max(sizes) <= 1.2 * min(sizes)  # balanced by vectors, not by pages


def test_pages_in_place_are_cut_into_consecutive_spans() -> None:
    lengths = torch.tensor([256] * 10 + [1, 1, 700, 3])
    for parts in (1, 2, 3, 5, 40):
        spans = native.spans(lengths, parts)
        assert 1 <= len(spans) <= parts and spans[0][0] == 0 and spans[-1][1] == len(lengths)
        assert all(a < b for a, b in spans) and all(x[1] == y[0] for x, y in itertools.pairwise(spans))
    assert native.spans(torch.tensor([256] * 8), 2) == [(0, 4), (4, 8)]  # equal vector counts


def test_a_call_is_cut_into_parts_the_threads_take_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert native.shares(100) == 1  # too little work to share
    assert native.shares(10 * native.MIN_PART) == 2 * native.PARTS_PER_THREAD
    done: list[int] = []
    native.run_each(done.append, list(range(9)))
    assert sorted(done) == list(range(9))


def test_aligned_buffers_start_on_a_cache_line() -> None:
    for n in (1, 16, 100):
        for dtype in (torch.float32, torch.bfloat16):
            buf = native.aligned(n, dtype)
            assert buf.numel() == n and buf.dtype == dtype and buf.data_ptr() % 64 == 0


@KINDS
def test_the_build_is_cached_by_source_and_flags(kernel: native.Kernel, tmp_path: Path) -> None:
    first = _builds(kernel, tmp_path)
    stamp = first.stat().st_mtime_ns
    again = native.compile_kernel(kernel, folder=tmp_path)
    assert again == first and again.stat().st_mtime_ns == stamp  # not rebuilt
    assert first.parent == tmp_path / "kernels" and list(first.parent.iterdir()) == [first]  # no temp left
    assert first.name.startswith(kernel.stem + "-")


@KINDS
def test_a_build_planted_in_a_shared_folder_is_never_loaded(
    kernel: native.Kernel, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _builds(kernel, tmp_path)  # learn the name a build of this source has
    at_exit: list[tuple[object, ...]] = []
    monkeypatch.setattr(native.atexit, "register", lambda *call: at_exit.append(call))
    shared = tmp_path / "shared"
    (shared / "kernels").mkdir(parents=True)
    (shared / "kernels").chmod(0o777)  # anyone may write here
    planted = shared / "kernels" / first.name
    planted.write_bytes(b"not a library")
    with caplog.at_level(logging.WARNING, logger="evidra.retrieval.kernels.native"):
        built = native.compile_kernel(kernel, folder=shared)
    assert built != planted and built.read_bytes() != b"not a library"
    assert "is not private to this user" in caplog.text
    assert at_exit == [(shutil.rmtree, built.parent, True)]  # the private build goes at exit
    shutil.rmtree(built.parent)
    group_writable = tmp_path / "own" / "kernels"
    group_writable.mkdir(parents=True)
    (group_writable / first.name).write_bytes(b"not a library")
    (group_writable / first.name).chmod(0o666)
    rebuilt = native.compile_kernel(kernel, folder=tmp_path / "own")
    assert rebuilt == group_writable / first.name and rebuilt.read_bytes() != b"not a library"
