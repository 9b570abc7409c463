"""The fused Triton MaxSim kernel against the fp32 reference: compiled on CUDA, or run by Triton's
interpreter on CPU tensors.

Without a GPU these tests need ``TRITON_INTERPRET=1`` set before Triton is imported (the
interpreter cannot be switched on inside a process that has imported Triton), so they skip in a
plain run and ``test_kernels.py`` runs this file in a subprocess with the variable set:
``TRITON_INTERPRET=1 pytest tests/retrieval/test_maxsim_triton.py``. The interpreter is slow (Python
per tile), so the shapes are small and cover every path: ragged pages, a page longer than a tile,
queries longer than a tile, many queries per tile, a partial last group of queries, blocks from
several flat arrays, sign-bit codes and a dimension that is not a power of two.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.core.errors import InvalidInputError
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.kernels import choice as kernels
from evidra.retrieval.kernels.maxsim import Block, build_blocks, maxsim, pack_signs, score_blocks
from float_hits import assert_hits_close

pytest.importorskip("triton")
if not kernels.interpreting() and not torch.cuda.is_available():
    pytest.skip(
        "the Triton kernel runs on CUDA, or on the CPU with TRITON_INTERPRET=1 set before Triton is "
        "imported (test_kernels.py runs this file so)",
        allow_module_level=True,
    )
from evidra.retrieval.kernels import maxsim_triton
from evidra.retrieval.kernels.maxsim_triton import TritonConfig, pad_queries

DEVICE = torch.device("cpu" if maxsim_triton.INTERPRETED else "cuda")
DIM = 24  # not a power of two: the kernel masks dimensions 24..31 of its 32-wide tiles


def _unit(g: torch.Generator, *lengths: int, dim: int = DIM) -> list[torch.Tensor]:
    return [torch.nn.functional.normalize(torch.randn(n, dim, generator=g), dim=-1) for n in lengths]


def _score(queries: list[torch.Tensor], blocks: list[Block], n: int, **kw: Any) -> torch.Tensor:
    return maxsim_triton.score_blocks(queries, blocks, n, **kw).cpu()


def _reference(queries: list[torch.Tensor], pages: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """fp32 MaxSim of the vectors rounded to ``dtype``: what fp32 accumulation of ``dtype`` products
    gives, up to summation order (a product of two fp16 or bf16 values is exact in fp32)."""
    return torch.tensor(
        [[float(maxsim(q.to(dtype).float(), p.to(dtype).float())) for p in pages] for q in queries]
    )


def test_padding_never_floors_negative_similarities_in_the_kernel() -> None:
    q = torch.tensor([[1.0, 0.0]])
    short = torch.tensor([[-1.0, 0.0]])  # padded to length 3 in the block: its filler must not score 0
    long = torch.tensor([[-0.5, 0.5], [0.0, 1.0], [-1.0, 0.0]])
    blocks = build_blocks([short, long], [0, 2], dtype=torch.float32, device=DEVICE)
    assert blocks[0].pad is not None
    scores = _score([q], blocks, 3)
    assert scores.tolist() == [[-1.0, float("-inf"), 0.0]]  # row 1 is in no block


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("tiles", [(16, 16), (32, 16), (64, 64)], ids=str)
def test_scores_match_the_reference_on_ragged_pages(dtype: torch.dtype, tiles: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(0)
    pages = _unit(g, 3, 9, 1, 40, 17, 9)  # 40 > every patch tile: several tiles per page
    queries = _unit(g, 4, 1, 33)  # 33 tokens pad to 64: longer than a 16- or 32-token tile
    blocks = build_blocks(pages, list(range(6)), max_tokens=40, dtype=dtype, device=DEVICE)
    assert len(blocks) > 1
    got = _score(queries, blocks, 6, config=TritonConfig(*tiles))
    torch.testing.assert_close(got, _reference(queries, pages, dtype), rtol=0, atol=2e-5)


def test_many_short_queries_share_a_tile_and_the_last_group_is_partial() -> None:
    g = torch.Generator().manual_seed(1)
    pages = _unit(g, 5, 2, 7)
    queries = _unit(g, *([3] * 9), 1, 4)  # stride 4: 16 queries per 64-token tile, 11 in one group
    blocks = build_blocks(pages, [0, 1, 2], dtype=torch.float32, device=DEVICE)
    got = _score(queries, blocks, 3, config=TritonConfig(16, 16))  # 4 per tile
    torch.testing.assert_close(got, _reference(queries, pages, torch.float32), rtol=0, atol=1e-5)


def test_fp16_pages_scored_in_fp32_are_widened_inside_the_kernel() -> None:
    g = torch.Generator().manual_seed(2)
    pages, queries = _unit(g, 6, 11, 2), _unit(g, 5)
    blocks = build_blocks(pages, [0, 1, 2], dtype=torch.float16, device=DEVICE)
    got = _score(queries, blocks, 3, dtype=torch.float32)
    want = _reference(queries, [p.half() for p in pages], torch.float32)  # fp16 pages, fp32 query
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_sign_codes_are_expanded_in_the_kernel(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    pages, queries = _unit(g, 4, 13, 1, 8, dim=32), _unit(g, 3, 6, dim=32)
    codes = build_blocks([pack_signs(p) for p in pages], [0, 1, 2, 3], dtype=torch.uint8, device=DEVICE)
    got = _score(queries, codes, 4, dtype=dtype)
    signs = [torch.where(p > 0, 1.0, -1.0) for p in pages]  # what the codes stand for
    torch.testing.assert_close(got, _reference(queries, signs, dtype), rtol=0, atol=2e-5)
    torch_scores = score_blocks(queries, codes, 4, dtype=dtype).cpu()  # fp16 rounds its similarities
    torch.testing.assert_close(got, torch_scores, rtol=0, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_top_k_equals_the_cpu_reference(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(4)
    lengths = torch.randint(1, 30, (40,), generator=g).tolist()
    pages, queries = _unit(g, *lengths), _unit(g, 7, 12, 2, 20)
    blocks = build_blocks(pages, list(range(40)), max_tokens=96, dtype=dtype, device=DEVICE)
    got = _score(queries, blocks, 40)
    cpu = score_blocks(queries, build_blocks(pages, list(range(40)), dtype=torch.float32), 40)  # on the CPU
    want = _reference(queries, pages, dtype)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-5)
    assert got.topk(5).indices.tolist() == want.topk(5).indices.tolist()
    if dtype == torch.float32:
        assert got.topk(5).indices.tolist() == cpu.topk(5).indices.tolist()


def test_the_index_finds_the_same_pages_with_either_kernel(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(5)
    lengths = torch.randint(1, 24, (30,), generator=g).tolist()
    pages = dict(zip([f"p{i}" for i in range(30)], _unit(g, *lengths), strict=True))
    queries = _unit(g, 5, 9)
    hits = {}
    for kernel in ("torch", "triton"):
        for prefilter in ("none", "signbits"):
            opts = MaxSimOptions(
                device=str(DEVICE),
                compute_dtype="float32",
                kernel=kernel,
                block_tokens=64,
                prefilter=prefilter,
                candidates=6,
            )
            index = MultiVectorIndex.create(tmp_path / f"{kernel}-{prefilter}", DIM, options=opts)
            assert index.kernel == kernel
            ids = list(pages)
            index.add(ids[:18], [pages[p] for p in ids[:18]])  # two adds: two flat arrays, two launches
            index.add(ids[18:], [pages[p] for p in ids[18:]])
            index.delete(["p3"])
            found = index.search(queries, k=4, exclude=[{"p7"}, set()])
            hits[kernel, prefilter] = found
    for prefilter in ("none", "signbits"):  # two kernels: scores within float summation order
        assert_hits_close(hits["triton", prefilter], hits["torch", prefilter])
    assert all(h.page_id not in {"p3", "p7"} for h in hits["triton", "none"][0])


def test_query_dimension_must_match_the_pages() -> None:
    blocks = build_blocks([torch.ones(2, 16)], [0], dtype=torch.float32, device=DEVICE)
    with pytest.raises(InvalidInputError, match="dimension 8, the pages 16"):
        _score([torch.ones(1, 8)], blocks, 1)


def test_pad_queries_pads_to_a_power_of_two() -> None:
    tokens, lengths = pad_queries(
        [torch.ones(3, 2), 2 * torch.ones(5, 2)], torch.float16, torch.device("cpu")
    )
    assert tokens.shape == (2, 8, 2) and tokens.dtype == torch.float16
    assert lengths.tolist() == [3, 5]
    assert tokens[0, :3].eq(1).all() and tokens[0, 3:].eq(0).all() and tokens[1, 5:].eq(0).all()
    with pytest.raises(InvalidInputError, match="query 1 must be a non-empty"):
        pad_queries([torch.ones(3, 2), torch.ones(0, 2)], torch.float32, torch.device("cpu"))


@pytest.mark.parametrize("bad", [8, 48])
def test_tiles_must_be_powers_of_two_of_at_least_16(bad: int) -> None:
    with pytest.raises(InvalidInputError, match="power of two >= 16"):
        TritonConfig(block_tokens=bad)
