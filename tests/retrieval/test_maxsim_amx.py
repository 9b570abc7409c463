"""The fused AMX bf16 MaxSim kernel: the scores of bf16 products summed in fp32, filler that never
wins, chosen only where the CPU has AMX."""

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
from evidra.retrieval.kernels import maxsim, maxsim_amx, maxsim_avx512, maxsim_avx512_bf16, native

CPU = torch.device("cpu")
BF16 = torch.bfloat16
runs_here = pytest.mark.skipif(
    not maxsim_amx.available(),
    reason="needs a CPU with AMX (amx_tile, amx_bf16), a C compiler that builds AMX code and Linux's "
    "permission to use the tiles",
)


def _unit(n: int, dim: int, g: torch.Generator) -> torch.Tensor:
    return torch.nn.functional.normalize(torch.randn(n, dim, generator=g), dim=-1)


def _pages(n: int, dim: int, seed: int, longest: int = 80) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, longest, (n,), generator=g).tolist()
    lengths[:7] = [1, 15, 16, 17, 31, 32, 33][:n]  # one vector, and the edges of a tile and a tile pair
    return [_unit(int(k), dim, g) for k in lengths]


def _exact(queries: list[torch.Tensor], pages: list[torch.Tensor]) -> torch.Tensor:
    """The reference: bf16 inputs, products and sums in fp32 (what the matrix units compute)."""
    return torch.stack(
        [torch.stack([maxsim.maxsim(q.to(BF16), p.to(BF16)) for p in pages]) for q in queries]
    )  # (Q, N)


@runs_here
@pytest.mark.parametrize("dim", [32, 128, 160])
@pytest.mark.parametrize("held", [False, True])
def test_scores_equal_bf16_products_summed_in_fp32(dim: int, held: bool) -> None:
    pages = _pages(40, dim, seed=dim)
    blocks = maxsim.build_blocks(pages, list(range(2, 42)), max_tokens=700, dtype=BF16)  # rows 0, 1: none
    assert any(b.length % 16 for b in blocks)  # pages whose last tile would read past their slot
    if held:
        blocks = maxsim_amx.hold(blocks, BF16)
        assert all(b.length % 16 == 0 for b in blocks)
    g = torch.Generator().manual_seed(1)
    # query lengths around a tile of 16 tokens; one query, and a batch packed across queries
    for counts in ([1], [15], [17], [33], [20], [20] * 9 + [1, 15, 17, 33]):
        queries = [_unit(c, dim, g) for c in counts]
        fused = kernels.score_amx(queries, blocks, 42, dtype=BF16)
        assert fused.shape == (len(counts), 42) and torch.isinf(fused[:, :2]).all()
        torch.testing.assert_close(fused[:, 2:], _exact(queries, pages), rtol=1e-5, atol=1e-5)
        # torch's bf16 scorer rounds every similarity to bf16 (8 bits) before the max: within that
        tolerance = 2.0**-8 * max(counts)
        reference = maxsim.score_blocks(
            queries, maxsim.build_blocks(pages, list(range(2, 42)), dtype=BF16), 42
        )
        torch.testing.assert_close(fused, reference, rtol=0, atol=tolerance)


@runs_here
@pytest.mark.parametrize("length", [5, 17, 40])
def test_filler_and_the_next_page_never_win(length: int) -> None:
    """Every real similarity is negative: a zero filler vector (0) or the next page's vectors (+1),
    read by a tile that runs past a page's length, would raise the score; none may."""
    g = torch.Generator().manual_seed(length)
    q = _unit(1, 64, g)
    away = [-(q.repeat(n, 1) + 0.1 * torch.randn(n, 64, generator=g)) for n in (length, length - 3, 2)]
    toward = [q.repeat(length, 1)]  # the similarity +1 page sits right after the others in its block
    pages = [away[0], toward[0], away[1], away[2]]
    blocks = maxsim.build_blocks(pages, [0, 1, 2, 3], dtype=BF16)
    queries = [q, torch.cat([q, -q])]
    for held in (blocks, maxsim_amx.hold(blocks, BF16)):
        fused = kernels.score_amx(queries, held, 4, dtype=BF16)
        torch.testing.assert_close(fused, _exact(queries, pages), rtol=1e-5, atol=1e-5)
        assert (fused[0, [0, 2, 3]] < -0.5).all() and abs(float(fused[0, 1]) - 1.0) < 0.01


@runs_here
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_thread_count_scores_every_page_once(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    monkeypatch.setattr(native, "MIN_PART", 64)  # many parts, taken by the threads as they finish
    pages = _pages(41, 64, seed=threads)
    blocks = maxsim_amx.hold(maxsim.build_blocks(pages, list(range(41)), max_tokens=900, dtype=BF16), BF16)
    queries = [torch.randn(20, 64), torch.randn(7, 64)]
    fused = maxsim_amx.score_blocks(queries, blocks, 41, dtype=BF16)
    torch.testing.assert_close(fused, _exact(queries, pages), rtol=1e-5, atol=1e-4)


def test_query_tokens_are_laid_out_as_vnni_tiles() -> None:
    tokens = torch.randn(37, 64)  # 3 tiles of 16 tokens, the last one 5 real and 11 zero
    arranged = maxsim_amx.arrange(tokens)
    assert arranged.shape == (3, 2, 16, 16, 2) and arranged.dtype == BF16
    as_bf16 = tokens.to(BF16)
    for j, s, r, c, e in [
        (0, 0, 0, 0, 0),
        (0, 0, 0, 0, 1),
        (1, 1, 7, 3, 1),
        (2, 1, 15, 4, 0),
        (0, 1, 2, 15, 1),
    ]:
        # tile (j, s), row r, column c: dimension 32 s + 2 r + e of token 16 j + c
        assert arranged[j, s, r, c, e] == as_bf16[16 * j + c, 32 * s + 2 * r + e]
    assert not arranged[2, :, :, 5:].any()  # padding tokens are zeros


def test_tiles_hold_the_same_vectors_and_only_this_kernel_takes_them() -> None:
    pages = _pages(12, 64, seed=2)
    blocks = maxsim.build_blocks(pages, list(range(12)), max_tokens=200, dtype=BF16)
    held = maxsim_amx.hold(blocks, BF16)
    assert [b.length for b in held] == [-(-b.length // 16) * 16 for b in blocks]
    for before, after in zip(blocks, held, strict=True):
        assert after.layout == "amx" and after.vectors.shape[2:] == (2, 16, 32)
        # tile (i, s) row r: dimensions 32 s .. 32 s + 31 of vector 16 i + r
        assert torch.equal(after.vectors[:, 0, 1, 3], before.vectors[:, 3, 32:64])
        back = maxsim_amx.untile(after)
        assert torch.equal(back.vectors[:, : before.length], before.vectors)
        assert not back.vectors[:, before.length :].any() and not back.tiled
    query = [torch.randn(9, 64)]
    with pytest.raises(InvalidInputError, match="scored by the fused CPU kernel that tiled them"):
        maxsim.score_blocks(query, held, 12)
    assert not maxsim_avx512.fits(held, torch.float32)  # not the AVX-512 kernel's tiles
    # fp32 scoring of the kernel's tiles goes on to the other scorers, untiled
    torch.testing.assert_close(
        kernels.score_amx(query, held, 12, dtype=torch.float32),
        maxsim.score_blocks(query, blocks, 12, dtype=torch.float32),
        rtol=1e-5,
        atol=1e-4,
    )
    assert maxsim_amx.hold(blocks, torch.float32) == blocks  # not the kernel's dtype: untouched


def test_calls_it_cannot_take_go_to_the_other_scorers() -> None:
    odd = maxsim.build_blocks(_pages(6, 48, seed=3), list(range(6)), dtype=BF16)  # 48: not a multiple of 32
    half = maxsim.build_blocks(_pages(6, 32, seed=4), list(range(6)), dtype=torch.float16)
    assert not maxsim_amx.fits(odd, BF16) and not maxsim_amx.fits(half, BF16)
    own = maxsim.build_blocks(_pages(6, 32, seed=5), list(range(6)), dtype=BF16)
    assert maxsim_amx.fits(own, None) and not maxsim_amx.fits(own, torch.float32)  # None: the blocks' own
    for blocks, dim, dtype in ((odd, 48, BF16), (half, 32, torch.float32)):
        query = [torch.randn(5, dim)]
        out = maxsim_amx.score_blocks(query, blocks, 6, dtype=dtype)
        torch.testing.assert_close(
            out, maxsim.score_blocks(query, blocks, 6, dtype=dtype), rtol=1e-5, atol=1e-4
        )


def test_auto_picks_it_for_bf16_on_amx_cpus_only(cpu_profile: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(maxsim_amx, "available", lambda: True)
    monkeypatch.setattr(maxsim_avx512, "available", lambda: True)
    monkeypatch.setattr(maxsim_avx512_bf16, "available", lambda: False)  # its own tests pick it
    cpu_profile("amx")
    assert kernels.resolve("auto", CPU, BF16) == "amx"
    assert kernels.resolve("auto", CPU, torch.float32) == "avx512"  # fp32: the AVX-512 kernel
    assert kernels.resolve("auto", CPU, torch.float16) == "torch"
    assert kernels.resolve("auto", CPU) == "torch"  # dtype not known
    for name in ("avx512_bf16", "avx512", "avx2"):  # no AMX (nor its AVX512_BF16 peer): torch's GEMM
        cpu_profile(name)
        assert kernels.resolve("auto", CPU, BF16) == "torch"
    cpu_profile("amx")
    monkeypatch.setattr(maxsim_amx, "available", lambda: False)  # no compiler, or no permission
    assert kernels.resolve("auto", CPU, BF16) == "torch"


def test_an_index_picks_it_exactly_where_the_cpu_in_use_has_amx(tmp_path: Path) -> None:
    """Under ``--cpu-profile`` the CPU in use is the profile's: without AMX it is never picked."""
    index = MultiVectorIndex.create(tmp_path / "idx", 32, options=MaxSimOptions(device="cpu"))
    amx = compute.cpu_features().flags >= maxsim_amx.NEEDS and index.compute_dtype == "bfloat16"
    assert (index.kernel == "amx") == (amx and maxsim_amx.available())


def test_forcing_it_where_it_cannot_run_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidInputError, match="runs on the CPU, but the index is on cuda"):
        kernels.resolve("amx", torch.device("cuda"), BF16)
    monkeypatch.setattr(maxsim_amx, "cpu_has_amx", lambda: False)
    with pytest.raises(InvalidInputError, match=r"'amx' needs a CPU with AMX.*use kernel 'torch' or 'auto'"):
        kernels.resolve("amx", CPU, BF16)
    monkeypatch.setattr(maxsim_amx, "cpu_has_amx", lambda: True)
    monkeypatch.setattr(maxsim_amx, "available", lambda: False)
    with pytest.raises(InvalidInputError, match=r"could not be built: it needs a C compiler with AMX"):
        kernels.resolve("amx", CPU, BF16)


class _Refused:
    """A built library whose permission request Linux refuses."""

    def evidra_amx_permit(self) -> int:
        return -1


@pytest.mark.parametrize("cause", ["no compiler", "no permission"])
def test_where_it_cannot_run_search_stays_in_torch(
    cause: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("EVIDRA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(maxsim_amx, "cpu_has_amx", lambda: True)
    if cause == "no compiler":
        monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    else:
        monkeypatch.setattr(native, "load", lambda kernel: _Refused())
    maxsim_amx._library.cache_clear()
    try:
        with caplog.at_level(logging.INFO):
            assert not maxsim_amx.available()
        said = "could not be built" if cause == "no compiler" else "refused this process the AMX tile"
        assert said in caplog.text and "scores in torch" in caplog.text
        blocks = maxsim.build_blocks(_pages(5, 32, 6), list(range(5)), dtype=BF16)
        query = [torch.randn(3, 32)]
        out = kernels.score_amx(query, blocks, 5, dtype=BF16)  # forced: falls back, no crash
        torch.testing.assert_close(out, maxsim.score_blocks(query, blocks, 5, dtype=BF16))
    finally:
        maxsim_amx._library.cache_clear()


@runs_here
def test_a_bf16_index_searches_with_it_and_ranks_like_torch(tmp_path: Path) -> None:
    pages = [*_pages(29, 64, seed=7), torch.randn(81, 64)]  # the longest page: 81 vectors
    ids = [f"p{i}" for i in range(30)]
    opts = MaxSimOptions(device="cpu", compute_dtype="bfloat16", kernel="amx")
    MultiVectorIndex.create(tmp_path / "idx", 64, options=opts).add(ids, pages)
    queries = [
        _unit(9, 64, torch.Generator().manual_seed(9)),
        _unit(30, 64, torch.Generator().manual_seed(10)),
    ]
    found = {}
    for kernel in ("amx", "torch"):
        opts = MaxSimOptions(device="cpu", compute_dtype="bfloat16", kernel=kernel)  # type: ignore[arg-type]
        index = MultiVectorIndex.open(tmp_path / "idx", options=opts)
        assert index.kernel == kernel
        assert [b.length for b in index._blocks] == [96 if kernel == "amx" else 81]  # held as it reads
        found[kernel] = [
            [h.page_id for h in hits] for hits in index.search(queries, k=10, exclude=[["p3"], []])
        ]
    assert found["amx"] == found["torch"] and "p3" not in found["amx"][0]
    assert index.store.meta()["maxsim_kernel"] == "amx"  # the writer's kernel, and so its layout
