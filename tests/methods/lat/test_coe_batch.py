"""LAT's R_step for a whole batch: one similarity call, the same scores as per episode; pages
without a text layer read by OCR or refused at task build."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from types import SimpleNamespace

import pytest

from evidra.core.errors import ConfigError
from evidra.core.types import Page, Sample
from evidra.methods.lat import similarity as embedding
from evidra.methods.lat.batch import episode_scorer, with_step_text
from evidra.methods.lat.paradigm import parse_coe
from evidra.methods.lat.reward import LatReward
from evidra.methods.lat.similarity import StepQuery, TextOverlapSimilarity


def box(x1: int, y1: int, x2: int, y2: int, k: int = 1) -> str:
    return f'Bounding box: {{"bbox_2d": [{x1}, {y1}, {x2}, {y2}], "Image_index": {k}}}'


GOOD = (
    f"<think>Revenue 2023. {box(5, 5, 105, 25)} It was $5M. {box(5, 28, 75, 42)} "
    f"So $5M. {box(38, 28, 72, 42)}</think>\n<answer>$5M\n{box(38, 28, 72, 42)}</answer>"
)


@dataclass
class Counting:
    """Text overlap, counting the calls (a retriever would embed once per call)."""

    calls: list[int] = field(default_factory=list)

    def score_steps(self, queries: Sequence[StepQuery]) -> list[float]:
        self.calls.append(len(queries))
        return TextOverlapSimilarity(ocr=False).score_steps(queries)


def _episode(sample: Sample, text: str) -> SimpleNamespace:
    return SimpleNamespace(sample=sample, trajectory=SimpleNamespace(texts=[text]))


def test_a_batch_is_scored_in_one_call_with_the_per_episode_scores(sample: Sample) -> None:
    other = replace(sample, id="s2", answers=("$7M",))
    weak = (
        f"<think>Nothing here. {box(5, 5, 105, 25)} So. {box(5, 28, 75, 42)}</think>\n"
        f"<answer>$5M\n{box(38, 28, 72, 42)}</answer>"
    )
    texts = [(sample, GOOD), (sample, weak), (other, GOOD), (other, "no tags")]
    per_episode = [LatReward(similarity=Counting())(parse_coe(t), s) for s, t in texts]
    counting = Counting()
    scorer = episode_scorer(LatReward(similarity=counting), parse_coe)
    batched = scorer(None, [_episode(s, t) for s, t in texts])
    assert batched == per_episode
    assert counting.calls == [8]  # 3 + 2 + 3 + 0 steps in ONE call
    # weak: step 1 box words {Revenue, 2023} vs "Nothing here." F1 0 < 0.3 -> no 0.5; the two boxes
    # do not overlap -> + 0.5
    assert per_episode[0].total == 4.0 and per_episode[1].components["step"] == 0.5


def test_pages_without_a_text_layer_are_read_by_ocr_or_refused(
    sample: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    bare_page = Page(
        sample.pages[0].id, sample.pages[0].image_path, sample.pages[0].width, sample.pages[0].height
    )
    bare = replace(sample, pages=(bare_page,))
    read: list[tuple[int, int]] = []

    def fake_ocr(image: object, **_: object) -> list[str]:
        read.append(image.size)  # type: ignore[attr-defined]
        return ["Revenue", "2023"]

    monkeypatch.setattr("evidra.retrieval.ocr.ocr_words", fake_ocr)
    query = StepQuery(bare_page, parse_coe(GOOD).steps[0].box, "Revenue 2023.")  # type: ignore[arg-type]
    assert TextOverlapSimilarity(ocr=True).score_steps([query]) == [1.0]
    assert read == [(100, 20)]  # the crop of (5, 5, 105, 25), not the page
    assert TextOverlapSimilarity(ocr=False).score_steps([query]) == [0.0]
    cfg = SimpleNamespace(source="visa")
    keep = with_step_text(lambda s, c: s)
    monkeypatch.setattr(embedding, "ocr_available", lambda: False)
    with pytest.raises(
        ConfigError,
        match=r"data.source=visa: 1 pages have no text layer.*evidra\[ocr\].*method.similarity=colqwen2",
    ):
        keep([bare], cfg)
    assert keep([sample], cfg) == [sample]  # a text layer: nothing to fix
    monkeypatch.setattr(embedding, "ocr_available", lambda: True)
    assert keep([bare], cfg) == [bare]
