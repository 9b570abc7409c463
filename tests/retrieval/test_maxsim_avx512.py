"""The fused AVX-512 MaxSim kernel: same scores as the torch scorer, chosen only where it runs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.core.errors import InvalidInputError
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.kernels import choice as kernels
from evidra.retrieval.kernels import compute_dtype as compute
from evidra.retrieval.kernels import maxsim, maxsim_avx512, native

CPU = torch.device("cpu")
runs_here = pytest.mark.skipif(
    not maxsim_avx512.available(), reason="needs a CPU with AVX-512F and a C compiler (cc)"
)


def _pages(n: int, dim: int, seed: int, longest: int = 300) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, longest, (n,), generator=g).tolist()
    lengths[: min(4, n)] = [1, 15, 16, 17][:n]  # one vector, and a tile's edges
    return [torch.randn(int(n_vec), dim, generator=g) for n_vec in lengths]


@runs_here
@pytest.mark.parametrize("held", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dim", [16, 128, 256])
def test_scores_equal_the_torch_scorer(held: torch.dtype, dim: int) -> None:
    pages = _pages(60, dim, seed=dim)
    rows = list(range(3, 63))  # rows 0-2 and 63 are in no block: -inf
    blocks = maxsim.build_blocks(pages, rows, max_tokens=2048, dtype=held)
    tiled = [maxsim_avx512.tile(b) for b in blocks]
    assert all(b.tiled and b.length % 16 == 0 for b in tiled)
    g = torch.Generator().manual_seed(1)
    # token counts around the kernel's group of 24, one query and several
    for counts in ([20], [1], [24], [25], [23, 49, 1, 7]):
        queries = [torch.randn(c, dim, generator=g) for c in counts]
        fused = maxsim_avx512.score_blocks(queries, blocks, 64, dtype=torch.float32)
        ref = maxsim.score_blocks(queries, blocks, 64, dtype=torch.float32)
        assert fused.shape == ref.shape == (len(counts), 64)
        torch.testing.assert_close(maxsim_avx512.score_blocks(queries, tiled, 64, dtype=torch.float32), fused)
        assert torch.isinf(fused[:, [0, 1, 2, 63]]).all()
        torch.testing.assert_close(fused[:, 3:63], ref[:, 3:63], rtol=1e-5, atol=1e-4)
        one = maxsim.maxsim(queries[0], pages[5].to(held))  # the reference formula, one page
        assert abs(float(fused[0, 8]) - float(one)) < 1e-3 * max(1.0, abs(float(one)))


@runs_here
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_thread_count_scores_every_page_once(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    monkeypatch.setattr(native, "MIN_PART", 64)  # many parts, taken by the threads as they finish
    pages = _pages(41, 64, seed=threads)
    blocks = maxsim.build_blocks(pages, list(range(41)), max_tokens=900, dtype=torch.float16)
    query = [torch.randn(20, 64)]
    fused = maxsim_avx512.score_blocks(query, blocks, 41, dtype=torch.float32)
    torch.testing.assert_close(fused, maxsim.score_blocks(query, blocks, 41, dtype=torch.float32))


def test_tiles_hold_the_same_vectors_and_only_this_kernel_takes_them() -> None:
    pages = _pages(9, 32, seed=8)
    block = maxsim.build_blocks(pages, list(range(9)), dtype=torch.float16)[0]
    tiled = maxsim_avx512.tile(block)
    assert tiled.vectors.shape == (9, block.length // 16 + (block.length % 16 > 0), 32, 16)
    back = maxsim_avx512.untile(tiled)
    assert torch.equal(back.vectors[:, : block.length], block.vectors)
    assert not back.vectors[:, block.length :].any()  # rounding up to 16 adds zero vectors only
    assert tiled.pad is not None and torch.equal(tiled.pad[:, : block.length], block.pad)
    with pytest.raises(InvalidInputError, match="scored by the fused CPU kernel that tiled them"):
        maxsim.score_blocks([torch.randn(3, 32)], [tiled], 9)
    query = [torch.randn(7, 32)]  # a 16-bit score of tiled blocks goes to torch, untiled
    torch.testing.assert_close(
        kernels.score_avx512(query, [tiled], 9, dtype=torch.float16),
        maxsim.score_blocks(query, [block], 9, dtype=torch.float16),
    )


def test_calls_it_cannot_take_go_to_the_torch_scorer(monkeypatch: pytest.MonkeyPatch) -> None:
    pages = _pages(10, 12, seed=4)  # dim 12: not a multiple of 16
    blocks = maxsim.build_blocks(pages, list(range(10)), dtype=torch.float16)
    assert not maxsim_avx512.fits(blocks, torch.float32)
    assert not maxsim_avx512.fits(maxsim.build_blocks(_pages(3, 16, 5), [0, 1, 2]), torch.float16)
    query = [torch.randn(5, 12)]
    out = maxsim_avx512.score_blocks(query, blocks, 10, dtype=torch.float32)
    torch.testing.assert_close(out, maxsim.score_blocks(query, blocks, 10, dtype=torch.float32))


def test_auto_picks_it_for_fp32_on_avx512_cpus_only(
    cpu_profile: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(maxsim_avx512, "available", lambda: True)
    cpu_profile("avx512")
    assert kernels.resolve("auto", CPU, torch.float32) == "avx512"
    assert kernels.resolve("auto", CPU, torch.bfloat16) == "torch"  # 16-bit GEMMs run in torch
    assert kernels.resolve("auto", CPU) == "torch"  # dtype not known
    cpu_profile("avx2")
    assert kernels.resolve("auto", CPU, torch.float32) == "torch"
    cpu_profile("avx512")
    monkeypatch.setattr(maxsim_avx512, "available", lambda: False)  # no compiler here
    assert kernels.resolve("auto", CPU, torch.float32) == "torch"


def test_forcing_it_where_it_cannot_run_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidInputError, match="runs on the CPU, but the index is on cuda"):
        kernels.resolve("avx512", torch.device("cuda"), torch.float32)
    monkeypatch.setattr(maxsim_avx512, "cpu_has_avx512", lambda: False)
    with pytest.raises(InvalidInputError, match=r"needs a CPU with AVX-512F.*use kernel 'torch'"):
        kernels.resolve("avx512", CPU, torch.float32)
    monkeypatch.setattr(maxsim_avx512, "cpu_has_avx512", lambda: True)
    monkeypatch.setattr(maxsim_avx512, "available", lambda: False)
    with pytest.raises(InvalidInputError, match=r"needs a C compiler \(cc, or \$CC\)"):
        kernels.resolve("avx512", CPU, torch.float32)


def test_without_a_compiler_search_stays_in_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("EVIDRA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(maxsim_avx512, "cpu_has_avx512", lambda: True)
    maxsim_avx512._library.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger="evidra.retrieval.kernels.native"):
            assert not maxsim_avx512.available()
        assert "could not be built" in caplog.text and "scores in torch" in caplog.text
        blocks = maxsim.build_blocks(_pages(5, 16, 6), list(range(5)))
        query = [torch.randn(3, 16)]
        out = kernels.score_avx512(query, blocks, 5, dtype=torch.float32)  # forced: falls back, no crash
        torch.testing.assert_close(out, maxsim.score_blocks(query, blocks, 5, dtype=torch.float32))
    finally:
        maxsim_avx512._library.cache_clear()


@runs_here
def test_an_fp32_index_searches_with_it_and_ranks_like_torch(tmp_path: Path) -> None:
    pages = _pages(30, 32, seed=7)
    ids = [f"p{i}" for i in range(30)]
    MultiVectorIndex.create(tmp_path / "idx", 32).add(ids, pages)
    queries = [torch.randn(9, 32), torch.randn(30, 32)]
    found = {}
    for kernel in ("avx512", "torch"):
        opts = MaxSimOptions(device="cpu", compute_dtype="float32", kernel=kernel)  # type: ignore[arg-type]
        index = MultiVectorIndex.open(tmp_path / "idx", options=opts)
        assert index.kernel == kernel
        assert all(b.tiled == (kernel == "avx512") for b in index._blocks)  # held as the kernel reads
        found[kernel] = [
            [h.page_id for h in hits] for hits in index.search(queries, k=10, exclude=[["p3"], []])
        ]
    assert found["avx512"] == found["torch"] and "p3" not in found["avx512"][0]
    auto = MultiVectorIndex.open(
        tmp_path / "idx", options=MaxSimOptions(device="cpu", compute_dtype="float32")
    )
    assert auto.kernel == ("avx512" if "avx512f" in compute.cpu_features().flags else "torch")


@runs_here
@pytest.mark.parametrize("held", [torch.float16, torch.bfloat16, torch.float32])
def test_pages_scored_in_place_equal_the_torch_scorer(
    held: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "MIN_PART", 64)  # several parts, as a large re-score is cut
    pages = [p.to(held) for p in _pages(23, 32, seed=9)]
    rows = list(range(5, 28))
    queries = [torch.randn(20, 32), torch.randn(1, 32), torch.randn(30, 32)]
    out = maxsim_avx512.score_pages(queries, pages, rows, 30, torch.float32)
    assert out is not None and torch.isinf(out[:, [0, 4, 28, 29]]).all()
    blocks = maxsim.build_blocks(pages, rows, max_tokens=500, dtype=held)
    torch.testing.assert_close(
        out, maxsim.score_blocks(queries, blocks, 30, dtype=torch.float32), rtol=1e-5, atol=1e-4
    )
    assert maxsim_avx512.score_pages(queries, pages, rows, 30, torch.bfloat16) is None  # fp32 only
    assert maxsim_avx512.score_pages(queries, [p[:, :24] for p in pages], rows, 30, torch.float32) is None


@runs_here
def test_each_query_scores_its_own_pages_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # the queries side by side
    pages = _pages(12, 32, seed=11)
    queries = [torch.randn(20, 32), torch.randn(3, 32), torch.randn(1, 32)]
    own = [pages[:5], [], pages[4:]]  # the second query has no candidates
    each = maxsim_avx512.score_each(queries, own, torch.float32)
    assert each is not None and [s.shape[0] for s in each] == [5, 0, 8]
    for query, mine, scores in zip(queries, own, each, strict=True):
        expected = [float(maxsim.maxsim(query, p)) for p in mine]
        torch.testing.assert_close(scores, torch.tensor(expected), rtol=1e-5, atol=1e-4)
    assert maxsim_avx512.score_each(queries, own, torch.bfloat16) is None
