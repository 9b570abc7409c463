"""What the MaxSim benchmarks share: synthetic pages, planted queries, and how rankings compare.

``benchmarks/maxsim.py`` (CPU), ``benchmarks/maxsim_cuda.py`` (its ``--device cuda`` half) and
``benchmarks/qdrant_local.py`` score the same pages and queries, so their agreement and recall
figures are comparable. ``make_pages`` draws N unit-norm fp16 pages of L x D patch vectors
(``kind``: ``iid``, ``smooth`` runs of 4 similar patches, or ``document`` pages 60% "white
space"); ``make_queries`` plants half of each query's tokens near patches of one gold page.
"""

from __future__ import annotations

import statistics

import torch

Q, LQ, K = 32, 20, 10  # queries per batch, tokens per query, hits compared (top 10)


def make_pages(n: int, length: int, dim: int, kind: str, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    blank = torch.nn.functional.normalize(torch.randn(4, dim, generator=g), dim=-1)  # shared "white space"
    pages = []
    for _ in range(n):
        if kind == "smooth":  # runs of 4 patches around a shared base vector (cosine ~0.9)
            base = torch.randn(-(-length // 4), dim, generator=g).repeat_interleave(4, dim=0)[:length]
            page = base + 0.35 * torch.randn(length, dim, generator=g)
        elif kind == "document":  # 60% near-copies of 4 corpus-wide blank vectors, scattered
            is_blank = torch.rand(length, generator=g) < 0.6
            back = blank[torch.randint(4, (length,), generator=g)] + 0.05 * torch.randn(
                length, dim, generator=g
            )
            page = torch.where(is_blank[:, None], back, torch.randn(length, dim, generator=g))
        else:
            page = torch.randn(length, dim, generator=g)
        pages.append(torch.nn.functional.normalize(page, dim=-1).half())
    return pages


def make_queries(
    pages: list[torch.Tensor], seed: int, count: int = Q
) -> tuple[list[torch.Tensor], list[int]]:
    g = torch.Generator().manual_seed(seed + 1)
    gold = torch.randint(len(pages), (count,), generator=g).tolist()
    queries = []
    dim = pages[0].shape[1]
    for page in gold:
        tokens = torch.randn(LQ, dim, generator=g)
        picks = torch.randint(pages[page].shape[0], (LQ // 2,), generator=g)
        noise = torch.nn.functional.normalize(torch.randn(LQ // 2, dim, generator=g), dim=-1)
        tokens[: LQ // 2] = pages[page][picks].float() + 1.33 * noise  # cosine ~0.6 to a gold patch
        queries.append(torch.nn.functional.normalize(tokens, dim=-1))
    return queries, gold


def topk_ids(scores: torch.Tensor, k: int) -> list[list[int]]:
    return scores.float().topk(k, dim=1).indices.tolist()


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    return statistics.mean(len(set(x) & set(y)) / len(y) for x, y in zip(a, b, strict=True))


def recall(ids: list[list[int]], gold: list[int], k: int) -> float:
    return statistics.mean(float(g in row[:k]) for row, g in zip(ids, gold, strict=True))
