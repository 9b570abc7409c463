"""Training the method recipes on published benchmarks (``data.source``) instead of synthetic data.

A benchmark loader gives ``Sample`` records with page images, answers and, depending on the
benchmark, gold pages, gold boxes or evidence text. Each recipe states what its reward needs
(``usable`` drops and counts the rest) and fills what it derives (EVisRAG's sufficiency label
from answerability, CAVE's single image). Checks are cheap: a missing image file is caught here,
not in the middle of a rollout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from evidra.core.types import Sample
from evidra.rl.run_config import DataConfig
from evidra.rl.tasks import usable

Check = Callable[[Sample], str | None]


def has_pages(sample: Sample) -> str | None:
    return None if sample.pages else "without page images"


def has_answer(sample: Sample) -> str | None:
    return None if sample.answers or not sample.answerable else "without a gold answer"


def is_answerable(sample: Sample) -> str | None:
    return None if sample.answerable and sample.answers else "unanswerable or without a gold answer"


def has_gold_pages(sample: Sample) -> str | None:
    return None if sample.gold_pages else "without gold pages"


def images_on_disk(sample: Sample) -> str | None:
    return None if all(Path(p.image_path).is_file() for p in sample.pages) else "with a missing image file"


def adapter(
    checks: tuple[Check, ...], fill: Callable[[Sample], Sample] | None = None, name: str = "the task"
) -> Callable[[list[Sample], DataConfig], list[Sample]]:
    """``Task.from_benchmark`` (or ``from_synthetic``) for a single-turn task ``name``: keep what
    ``checks`` accept, then ``fill``."""

    def adapt(samples: list[Sample], cfg: DataConfig) -> list[Sample]:
        where = cfg.source or "+".join(cfg.synthetic)
        kept = usable(samples, checks, f"{name} on {where}")
        return [fill(s) for s in kept] if fill is not None else kept

    return adapt


def with_sufficiency(sample: Sample) -> Sample:
    """EVisRAG's label: the shown pages suffice exactly when the question is answerable from them."""
    return sample if sample.sufficient is not None else replace(sample, sufficient=sample.answerable)


def first_gold_page(sample: Sample) -> Sample:
    """CAVE zooms on one image: the gold page when known, else the first page."""
    gold = [p for p in sample.pages if p.id in sample.gold_pages]
    page = tuple(gold or sample.pages)[:1]
    evidence = sample.evidence_box
    on_page = evidence is not None and bool(page) and evidence.page_id == page[0].id
    return replace(sample, pages=page, evidence_box=evidence if on_page else None)


IMAGE_QA = (has_pages, images_on_disk, has_answer)  # what every single-turn page-QA task needs
