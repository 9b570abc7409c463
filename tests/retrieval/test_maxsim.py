from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evidra.core.errors import InvalidInputError
from evidra.retrieval.kernels import maxsim as maxsim_module
from evidra.retrieval.kernels.maxsim import (
    build_blocks,
    maxsim,
    pack_signs,
    score_blocks,
    unpack_signs,
)
from evidra.retrieval.pooling import cluster_pool, mean_pool


def test_maxsim_hand_computed() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.0, -1.0]])
    # token 1: max(0.5, 1.0, 0.0) = 1.0; token 2: max(0.5, 0.0, -1.0) = 0.5
    assert float(maxsim(q, d)) == pytest.approx(1.5)


def test_padding_never_floors_negative_similarities() -> None:
    # page 0 has one vector (all sims negative), page 1 has three: block pads page 0 to length 3.
    q = torch.tensor([[1.0, 0.0]])
    short = torch.tensor([[-1.0, 0.0]])
    long = torch.tensor([[-0.5, 0.5], [0.0, 1.0], [-1.0, 0.0]])
    blocks = build_blocks([short, long], [0, 1], dtype=torch.float32)
    assert len(blocks) == 1 and blocks[0].pad is not None
    scores = score_blocks([q], blocks, 2)
    # a zero-vector floor would give 0.0 for the short page; exact MaxSim is -1.0
    assert scores.tolist() == [[-1.0, 0.0]]


def test_blocked_scores_match_reference_for_ragged_pages_and_queries() -> None:
    g = torch.Generator().manual_seed(0)
    pages = [
        torch.nn.functional.normalize(torch.randn(n, 16, generator=g), dim=-1) for n in (3, 9, 5, 9, 1, 7)
    ]
    queries = [torch.nn.functional.normalize(torch.randn(n, 16, generator=g), dim=-1) for n in (4, 1, 6)]
    blocks = build_blocks(pages, list(range(6)), max_tokens=12, dtype=torch.float32)
    assert len(blocks) > 1  # forces several blocks
    got = score_blocks(queries, blocks, 6, max_elements=20)  # forces one query per group
    want = torch.tensor([[float(maxsim(q, p)) for p in pages] for q in queries])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_blocks_are_views_of_one_flat_array_with_their_lengths() -> None:
    pages = [torch.full((n, 2), float(n)) for n in (3, 1, 2, 3)]
    blocks = build_blocks(pages, [10, 11, 12, 13], max_tokens=4, dtype=torch.float32)
    # sorted by length (1, 2, 3, 3): [1, 2] padded to 2 (4 tokens), then one block per page of 3
    assert [b.vectors.shape[:2] for b in blocks] == [(2, 2), (1, 3), (1, 3)]
    assert [b.rows.tolist() for b in blocks] == [[11, 12], [10], [13]]
    assert [b.lengths.tolist() for b in blocks] == [[1, 2], [3], [3]]
    storage = blocks[0].vectors.untyped_storage().data_ptr()
    assert all(b.vectors.untyped_storage().data_ptr() == storage for b in blocks)
    assert [b.vectors.storage_offset() for b in blocks] == [0, 4 * 2, 7 * 2]  # rows 0, 4, 7 of (10, 2)
    assert blocks[0].vectors[0].tolist() == [[1.0, 1.0], [0.0, 0.0]]  # zero filler past length 1


def test_rows_without_pages_score_minus_inf() -> None:
    blocks = build_blocks([torch.ones(2, 4)], [1], dtype=torch.float32)
    scores = score_blocks([torch.ones(1, 4)], blocks, 3)
    assert scores[0, 0] == float("-inf") and scores[0, 2] == float("-inf") and scores[0, 1] == 4.0


def test_mean_pool_hand_computed() -> None:
    page = torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, 4.0]])
    pooled = mean_pool(page, 2)
    # group 1: mean (0.5, 0.5) -> normalised (0.7071, 0.7071); group 2: (3, 4) -> (0.6, 0.8)
    torch.testing.assert_close(pooled, torch.tensor([[0.70710678, 0.70710678], [0.6, 0.8]]))


def test_bad_queries_are_rejected() -> None:
    blocks = build_blocks([torch.ones(2, 4)], [0], dtype=torch.float32)
    with pytest.raises(InvalidInputError, match="query 0"):
        score_blocks([torch.ones(0, 4)], blocks, 1)
    with pytest.raises(InvalidInputError, match="pool factor"):
        mean_pool(torch.ones(2, 4), 0)


@settings(max_examples=60, deadline=None)
@given(
    page_lengths=st.lists(st.integers(1, 9), min_size=1, max_size=8),
    query_lengths=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    max_tokens=st.integers(1, 40),
    max_elements=st.integers(1, 200),
    seed=st.integers(0, 2**16),
    layout=st.sampled_from(sorted(maxsim_module.LAYOUTS)),
    held=st.sampled_from([torch.float32, torch.float16]),
)
def test_blocked_scores_equal_reference_property(
    page_lengths: list[int],
    query_lengths: list[int],
    max_tokens: int,
    max_elements: int,
    seed: int,
    layout: str,
    held: torch.dtype,
) -> None:
    """Every similarity layout scores exactly, pages held in fp32 or in fp16 widened to fp32."""
    g = torch.Generator().manual_seed(seed)
    pages = [torch.randn(n, 8, generator=g).to(held).float() for n in page_lengths]
    queries = [torch.randn(n, 8, generator=g) for n in query_lengths]
    rows = list(range(len(pages)))
    with (
        mock.patch.object(maxsim_module, "layout_for", lambda device, dtype: layout),
        mock.patch.object(maxsim_module, "_CHUNK_ROWS", 12),  # chunks of one or a few pages
    ):
        got = score_blocks(
            queries,
            build_blocks(pages, rows, max_tokens=max_tokens, dtype=held),
            len(pages),
            max_elements=max_elements,
            dtype=torch.float32,
        )
    want = torch.tensor([[float(maxsim(q, p)) for p in pages] for q in queries])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


def test_each_device_and_dtype_gets_its_layout() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert maxsim_module.layout_for(cpu, torch.float32) == "chunked"  # fp32 CPUs: no token padding
    assert maxsim_module.layout_for(cpu, torch.bfloat16) == "tokens_last"  # matrix-unit tiles
    assert maxsim_module.layout_for(cpu, torch.float16) == "tokens_last"
    assert maxsim_module.layout_for(cuda, torch.float32) == "patches_last"


def test_chunked_layout_masks_filler_in_every_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 2 pages over a padded block: each page's filler is masked, never a 0 floor."""
    monkeypatch.setattr(maxsim_module, "_CHUNK_ROWS", 6)  # 6 // 3 patches = 2 pages per chunk
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    pages = [torch.tensor([[-1.0, -1.0]] * n) for n in (1, 2, 3, 3, 1)]
    blocks = build_blocks(pages, list(range(5)), dtype=torch.float16)
    assert len(blocks) == 1 and blocks[0].pad is not None and blocks[0].vectors.shape[:2] == (5, 3)
    scores = score_blocks([q], blocks, 5, dtype=torch.float32)
    assert scores.tolist() == [[-2.0] * 5]  # a zero filler would give 0.0 for the short pages
    both = score_blocks([q, q[:1]], blocks, 5, dtype=torch.float32)  # two queries: summed per owner
    assert both.tolist() == [[-2.0] * 5, [-1.0] * 5]


def test_sign_bits_round_trip_and_asymmetric_score() -> None:
    page = torch.tensor([[0.5, -0.1, 0.2, 0.3, -0.4, 0.6, -0.7, 0.8], [-1.0] * 8])
    codes = pack_signs(page)
    assert codes.tolist() == [[0b10110101], [0]]
    signs = unpack_signs(codes, torch.float32)
    assert signs.tolist() == [[1.0, -1, 1, 1, -1, 1, -1, 1], [-1.0] * 8]
    # a block of codes scores q . sign(p): token (1, 0, ..., 0) -> max(+1, -1) = 1
    q = torch.zeros(1, 8)
    q[0, 0] = 1.0
    blocks = build_blocks([codes], [0], dtype=torch.uint8)
    assert score_blocks([q], blocks, 1).tolist() == [[1.0]]
    with pytest.raises(InvalidInputError, match="divisible by 8"):
        pack_signs(torch.ones(2, 6))


def test_sign_bits_round_trip_on_block_shaped_codes() -> None:
    x = torch.randn(3, 5, 64)  # (C, L, D) as a block holds them
    codes = torch.stack([pack_signs(page) for page in x])  # (C, L, D/8)
    assert codes.shape == (3, 5, 8)
    assert torch.equal(unpack_signs(codes, torch.float32), torch.where(x > 0, 1.0, -1.0))


def test_cluster_pool_spends_its_vectors_on_distinct_content(document_pages: Any) -> None:
    pages, masks = document_pages(20, 64, 128, seed=0)
    clustered = cluster_pool(pages, 4)
    positional = [mean_pool(p, 4) for p in pages]

    def coverage(pooled: list[torch.Tensor]) -> float:  # how well the pool still holds each content patch
        return (
            sum(float((p[m] @ c.T).amax(1).mean()) for p, m, c in zip(pages, masks, pooled, strict=True)) / 20
        )

    # consecutive runs mix blank and content patches; clustering merges the blanks wherever they are
    assert coverage(clustered) > coverage(positional) + 0.1
    assert all(c.shape == (16, 128) for c in clustered)
    torch.testing.assert_close(torch.stack(clustered).norm(dim=-1), torch.ones(20, 16))
    assert all(torch.equal(a, b) for a, b in zip(clustered, cluster_pool(pages, 4), strict=True))


def test_cluster_pool_keeps_order_across_lengths_and_factor_one_is_identity() -> None:
    g = torch.Generator().manual_seed(3)
    pages = [torch.nn.functional.normalize(torch.randn(n, 8, generator=g), dim=-1) for n in (9, 4, 9, 1)]
    pooled = cluster_pool(pages, 3, batch=1)
    assert [p.shape[0] for p in pooled] == [3, 2, 3, 1]
    torch.testing.assert_close(pooled[3], pages[3])  # one vector: its own cluster
    for a, b in zip(pooled, cluster_pool(pages, 3), strict=True):  # batched like one at a time
        torch.testing.assert_close(a, b)
    for page, one in zip(pages, cluster_pool(pages, 1), strict=True):
        torch.testing.assert_close(one, page)
    with pytest.raises(InvalidInputError, match="pool factor"):
        cluster_pool(pages, 0)
