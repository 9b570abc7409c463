"""The fused AVX512_BF16 MaxSim kernel: bf16 products summed in fp32, filler that never wins, the
fp32 reference within bf16's rounding, and chosen by ``auto`` for bf16 exactly where the CPU has
AVX512_BF16 and no AMX kernel runs (every profile, on any machine)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.core.errors import InvalidInputError
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.kernels import choice as kernels
from evidra.retrieval.kernels import maxsim, maxsim_amx, maxsim_avx512, maxsim_avx512_bf16, native
from float_hits import assert_hits_close

CPU = torch.device("cpu")
BF16 = torch.bfloat16
runs_here = pytest.mark.skipif(
    not maxsim_avx512_bf16.available(),
    reason="needs a CPU with AVX512_BF16 and a C compiler that builds it",
)


def _unit(n: int, dim: int, g: torch.Generator) -> torch.Tensor:
    return torch.nn.functional.normalize(torch.randn(n, dim, generator=g), dim=-1)


def _pages(n: int, dim: int, seed: int, longest: int = 80) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, longest, (n,), generator=g).tolist()
    lengths[:5] = [1, 15, 16, 17, 33][:n]  # one vector, and the edges of a tile of 16
    return [_unit(int(k), dim, g) for k in lengths]


def _bf16_products(queries: list[torch.Tensor], pages: list[torch.Tensor]) -> torch.Tensor:
    """What the kernel computes: bf16 inputs, products and sums in fp32."""
    return torch.stack(
        [torch.stack([maxsim.maxsim(q.to(BF16), p.to(BF16)) for p in pages]) for q in queries]
    )  # (Q, N)


def _fp32(queries: list[torch.Tensor], pages: list[torch.Tensor]) -> torch.Tensor:
    """The fp32 reference of the unrounded vectors."""
    return torch.stack([torch.stack([maxsim.maxsim(q, p) for p in pages]) for q in queries])  # (Q, N)


@runs_here
@pytest.mark.parametrize("dim", [32, 128, 160])
@pytest.mark.parametrize("held", [False, True])
def test_scores_match_the_fp32_reference_within_bf16_rounding(dim: int, held: bool) -> None:
    pages = _pages(40, dim, seed=dim)
    blocks = maxsim.build_blocks(pages, list(range(2, 42)), max_tokens=700, dtype=BF16)  # rows 0, 1: none
    assert len(blocks) > 1 and any(b.length % 16 for b in blocks)  # tiles that run past a page
    if held:
        blocks = maxsim_avx512_bf16.hold(blocks, BF16)
        assert all(b.tiled and b.length % 16 == 0 for b in blocks)
    g = torch.Generator().manual_seed(1)
    # token counts around the kernel's group of 24; one query, and a few side by side
    for counts in ([1], [20], [24], [25], [49], [20, 1, 30]):
        queries = [_unit(c, dim, g) for c in counts]
        fused = kernels.score_avx512_bf16(queries, blocks, 42, dtype=BF16)
        assert fused.shape == (len(counts), 42) and torch.isinf(fused[:, :2]).all()
        # the same arithmetic in another order: fp32 summation order only
        torch.testing.assert_close(fused[:, 2:], _bf16_products(queries, pages), rtol=1e-5, atol=1e-5)
        # bf16 keeps 8 significant bits: each rounded input moves a similarity of unit vectors by
        # at most ~2^-8 relative, so a query of T tokens scores within T * 2^-8 of fp32
        tolerance = 2.0**-8 * max(counts)
        torch.testing.assert_close(fused[:, 2:], _fp32(queries, pages), rtol=0, atol=tolerance)


@runs_here
@pytest.mark.parametrize("length", [5, 17, 40])
def test_filler_and_the_next_page_never_win(length: int) -> None:
    """Every real similarity is negative: a zero filler vector (0) or the next page's vectors (+1),
    read by a tile that runs past a page's length, would raise the score; none may."""
    g = torch.Generator().manual_seed(length)
    q = _unit(1, 64, g)
    away = [-(q.repeat(n, 1) + 0.1 * torch.randn(n, 64, generator=g)) for n in (length, length - 3, 2)]
    pages = [away[0], q.repeat(length, 1), away[1], away[2]]  # the +1 page right after the first
    blocks = maxsim.build_blocks(pages, [0, 1, 2, 3], dtype=BF16)
    queries = [q, torch.cat([q, -q])]
    for held in (blocks, maxsim_avx512_bf16.hold(blocks, BF16)):
        fused = kernels.score_avx512_bf16(queries, held, 4, dtype=BF16)
        torch.testing.assert_close(fused, _bf16_products(queries, pages), rtol=1e-5, atol=1e-5)
        assert (fused[0, [0, 2, 3]] < -0.5).all() and abs(float(fused[0, 1]) - 1.0) < 0.01


@runs_here
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_thread_count_scores_every_page_once(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    monkeypatch.setattr(native, "MIN_PART", 64)  # many parts, taken by the threads as they finish
    pages = _pages(41, 64, seed=threads)
    blocks = maxsim.build_blocks(pages, list(range(41)), max_tokens=900, dtype=BF16)
    blocks = maxsim_avx512_bf16.hold(blocks, BF16)
    queries = [torch.randn(20, 64), torch.randn(7, 64)]
    fused = maxsim_avx512_bf16.score_blocks(queries, blocks, 41, dtype=BF16)
    torch.testing.assert_close(fused, _bf16_products(queries, pages), rtol=1e-5, atol=1e-4)


def test_query_tokens_are_laid_out_as_pairs_of_dimensions() -> None:
    tokens = torch.randn(30, 64)  # 2 groups of 24 tokens, the last one 6 real and 18 zero
    arranged = maxsim_avx512_bf16.arrange(tokens)
    assert arranged.shape == (2, 32, 24) and arranged.dtype == torch.int32
    as_bf16 = tokens.to(BF16)
    for group, pair, j in [(0, 0, 0), (0, 5, 23), (1, 31, 5), (1, 7, 0)]:
        # group g, pair k, slot j: dimensions 2k (low half) and 2k + 1 of token 24 g + j
        both = arranged[group, pair, j : j + 1].view(BF16)
        assert torch.equal(both, as_bf16[24 * group + j, 2 * pair : 2 * pair + 2])
    assert not arranged[1, :, 6:].any()  # padding tokens are zeros


def test_tiles_hold_the_same_vectors_and_only_this_kernel_takes_them() -> None:
    pages = _pages(12, 64, seed=2)
    blocks = maxsim.build_blocks(pages, list(range(12)), max_tokens=200, dtype=BF16)
    held = maxsim_avx512_bf16.hold(blocks, BF16)
    assert [b.length for b in held] == [-(-b.length // 16) * 16 for b in blocks]
    for before, after in zip(blocks, held, strict=True):
        assert after.layout == "avx512_bf16" and after.vectors.shape[2:] == (32, 16, 2)
        # tile i, pair row k, lane r: dimensions 2k and 2k + 1 of vector 16 i + r
        assert torch.equal(after.vectors[:, 0, 5, 3], before.vectors[:, 3, 10:12])
        back = maxsim_avx512_bf16.untile(after)
        assert torch.equal(back.vectors[:, : before.length], before.vectors)
        assert not back.vectors[:, before.length :].any() and not back.tiled
    query = [torch.randn(9, 64)]
    with pytest.raises(InvalidInputError, match="scored by the fused CPU kernel that tiled them"):
        maxsim.score_blocks(query, held, 12)
    assert not maxsim_avx512.fits(held, torch.float32) and not maxsim_amx.fits(held, BF16)
    # fp32 scoring of the kernel's tiles goes on to the other scorers, untiled
    torch.testing.assert_close(
        kernels.score_avx512_bf16(query, held, 12, dtype=torch.float32),
        maxsim.score_blocks(query, blocks, 12, dtype=torch.float32),
        rtol=1e-5,
        atol=1e-4,
    )
    assert maxsim_avx512_bf16.hold(blocks, torch.float32) == blocks  # not the kernel's dtype: untouched


def test_calls_it_cannot_take_go_to_the_other_scorers() -> None:
    odd = maxsim.build_blocks(_pages(6, 48, seed=3), list(range(6)), dtype=BF16)  # 48: not a multiple of 32
    half = maxsim.build_blocks(_pages(6, 32, seed=4), list(range(6)), dtype=torch.float16)
    own = maxsim.build_blocks(_pages(6, 32, seed=5), list(range(6)), dtype=BF16)
    assert not maxsim_avx512_bf16.fits(odd, BF16) and not maxsim_avx512_bf16.fits(half, BF16)
    assert maxsim_avx512_bf16.fits(own, None) and not maxsim_avx512_bf16.fits(own, torch.float32)
    for blocks, dim, dtype in ((odd, 48, BF16), (half, 32, torch.float32)):
        query = [torch.randn(5, dim)]
        out = maxsim_avx512_bf16.score_blocks(query, blocks, 6, dtype=dtype)
        torch.testing.assert_close(
            out, maxsim.score_blocks(query, blocks, 6, dtype=dtype), rtol=1e-5, atol=1e-4
        )


# (compute dtype, kernel) that an index picks under each CPU profile where every kernel runs
PICKS = {
    "amx": ("bfloat16", "amx"),
    "avx512_bf16": ("bfloat16", "avx512_bf16"),
    "avx512": ("float32", "avx512"),
    "avx2": ("float32", "torch"),
}


@pytest.mark.parametrize("profile", sorted(PICKS))
def test_each_profile_picks_its_kernel(
    profile: str, tmp_path: Path, cpu_profile: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (maxsim_avx512, maxsim_amx, maxsim_avx512_bf16):  # as if every kernel ran here
        monkeypatch.setattr(module, "available", lambda: True)
    cpu_profile(profile)
    index = MultiVectorIndex.create(tmp_path / "idx", 32, options=MaxSimOptions(device="cpu"))
    assert (index.compute_dtype, index.kernel) == PICKS[profile]
    assert index.store.meta()["maxsim_kernel"] == PICKS[profile][1]
    # bf16 on a CPU with AVX512_BF16 but no AMX: this kernel; elsewhere bf16 is not its call
    want = {"amx": "amx", "avx512_bf16": "avx512_bf16"}.get(profile, "torch")
    assert kernels.resolve("auto", CPU, BF16) == want
    assert kernels.resolve("auto", CPU, torch.float16) == "torch"


def test_auto_falls_back_where_it_was_not_built(cpu_profile: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(maxsim_avx512_bf16, "available", lambda: True)
    monkeypatch.setattr(maxsim_amx, "available", lambda: False)  # AMX refused: the next kernel
    cpu_profile("amx")
    assert kernels.resolve("auto", CPU, BF16) == "avx512_bf16"
    monkeypatch.setattr(maxsim_avx512_bf16, "available", lambda: False)  # no compiler for it
    assert kernels.resolve("auto", CPU, BF16) == "torch"
    cpu_profile("avx512_bf16")
    assert kernels.resolve("auto", CPU, BF16) == "torch"


def test_forcing_it_where_it_cannot_run_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidInputError, match="runs on the CPU, but the index is on cuda"):
        kernels.resolve("avx512_bf16", torch.device("cuda"), BF16)
    monkeypatch.setattr(maxsim_avx512_bf16, "cpu_has_bf16", lambda: False)
    with pytest.raises(InvalidInputError, match=r"needs a CPU with AVX512_BF16.*use kernel 'torch'"):
        kernels.resolve("avx512_bf16", CPU, BF16)
    monkeypatch.setattr(maxsim_avx512_bf16, "cpu_has_bf16", lambda: True)
    monkeypatch.setattr(maxsim_avx512_bf16, "available", lambda: False)
    with pytest.raises(
        InvalidInputError, match=r"could not be built: it needs a C compiler with AVX512_BF16 support"
    ):
        kernels.resolve("avx512_bf16", CPU, BF16)


def test_without_a_compiler_search_stays_in_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("EVIDRA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(maxsim_avx512_bf16, "cpu_has_bf16", lambda: True)
    maxsim_avx512_bf16._library.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger="evidra.retrieval.kernels.native"):
            assert not maxsim_avx512_bf16.available()
        assert "AVX-512 BF16 MaxSim kernel could not be built" in caplog.text
        blocks = maxsim.build_blocks(_pages(5, 32, 6), list(range(5)), dtype=BF16)
        query = [torch.randn(3, 32)]
        out = kernels.score_avx512_bf16(query, blocks, 5, dtype=BF16)  # forced: falls back, no crash
        torch.testing.assert_close(out, maxsim.score_blocks(query, blocks, 5, dtype=BF16))
    finally:
        maxsim_avx512_bf16._library.cache_clear()


def test_a_cpu_without_the_instruction_never_loads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(kernel: native.Kernel) -> None:
        raise AssertionError(f"{kernel.source} must not be built on a CPU that cannot run it")

    monkeypatch.setattr(maxsim_avx512_bf16, "cpu_has_bf16", lambda: False)
    monkeypatch.setattr(native, "load", refuse)
    maxsim_avx512_bf16._library.cache_clear()
    try:
        assert not maxsim_avx512_bf16.available()
    finally:
        maxsim_avx512_bf16._library.cache_clear()


@runs_here
def test_a_bf16_index_searches_with_it_and_finds_what_torch_finds(tmp_path: Path) -> None:
    pages = [*_pages(29, 64, seed=7), torch.randn(81, 64)]
    ids = [f"p{i}" for i in range(30)]
    opts = MaxSimOptions(device="cpu", compute_dtype="bfloat16", kernel="avx512_bf16")
    MultiVectorIndex.create(tmp_path / "idx", 64, options=opts).add(ids, pages)
    g = torch.Generator().manual_seed(9)
    queries = [_unit(9, 64, g), _unit(20, 64, g)]
    found = {}
    for kernel in ("avx512_bf16", "torch"):
        opts = MaxSimOptions(device="cpu", compute_dtype="bfloat16", kernel=kernel)
        index = MultiVectorIndex.open(tmp_path / "idx", options=opts)
        assert index.kernel == kernel
        assert all(b.tiled == (kernel == "avx512_bf16") for b in index._blocks)  # held as it reads
        found[kernel] = index.search(queries, k=10, exclude=[["p3"], []])
    # every page is re-scored in fp32 (rescore 32 >= 30 pages): the same pages, fp32 scores
    assert_hits_close(found["avx512_bf16"], found["torch"])
    assert "p3" not in [h.page_id for h in found["avx512_bf16"][0]]
    assert index.store.meta()["maxsim_kernel"] == "avx512_bf16"
