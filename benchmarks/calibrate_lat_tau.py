"""Calibrate LAT's tau (Eq. 8) for the offline word-overlap step similarity on synthetic documents.

LAT's tau = 0.3 (§4) is a threshold on ColQwen2's late-interaction score. The offline stand-in,
``TextOverlapSimilarity`` (token F1 of the text-layer words inside the cited box and the step
text), is on another scale. This script labels reasoning steps on evidra's synthetic documents
(the corpus the LAT recipe trains on, ``generate_documents`` at the recipe's 72 dpi):

* a correct step is one of the task's oracle CoE steps (``coe_oracle_text``): the evidence
  sentence cited with its evidence box, and "So the answer is A." cited with the gold box;
* an incorrect step is the same text cited with the box of another question: on the same page
  when one there does not overlap the right box, else on another page of the same document.

Every step is scored with ``TextOverlapSimilarity`` and the threshold with the highest balanced
accuracy is chosen (``evidra.methods.lat.calibration.best_threshold``); it is also reported at
LAT's 0.3 for comparison.

    OMP_NUM_THREADS=1 python benchmarks/calibrate_lat_tau.py [--docs 64] [--seeds 0 1 2]

The last line is ``RESULT tau=<t> balanced_accuracy=<a> at_0.3=<b> steps=<n>``, over all seeds
together; each seed's own choice is printed first (the spread says how stable the value is).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

from evidra.core.geometry import iou
from evidra.core.types import Box, Page, Sample
from evidra.methods.lat.calibration import balanced_accuracy, best_threshold
from evidra.methods.lat.paradigm import coe_oracle_text, parse_coe
from evidra.methods.lat.similarity import LAT_TAU, TEXT_OVERLAP_TAU, StepQuery, TextOverlapSimilarity

Labelled = tuple[StepQuery, bool]


def _boxes(samples: Sequence[Sample]) -> dict[str, list[Box]]:
    """Every gold and evidence box of the corpus, by page id."""
    out: dict[str, list[Box]] = {}
    for s in samples:
        for ev in (*s.gold_boxes, *((s.evidence_box,) if s.evidence_box else ())):
            if ev.box not in out.setdefault(ev.page_id, []):
                out[ev.page_id].append(ev.box)
    return out


def _wrong_box(
    page: Page, right: Box, sample: Sample, boxes: dict[str, list[Box]], rng: random.Random
) -> tuple[Page, Box] | None:
    """Another question's box: on ``page`` without overlap with ``right``, else on another page."""
    same = [b for b in boxes.get(page.id, []) if iou(b, right) == 0.0]
    if same:
        return page, rng.choice(same)
    others = [(p, b) for p in sample.pages if p.id != page.id for b in boxes.get(p.id, [])]
    return rng.choice(others) if others else None


def labelled_steps(samples: Sequence[Sample], seed: int) -> list[Labelled]:
    """The oracle's steps (correct) and each step's text on another question's box (incorrect)."""
    rng, boxes, out = random.Random(seed), _boxes(samples), []
    seen: set[tuple[str, str]] = set()
    for sample in samples:
        if not sample.answerable or not sample.gold_boxes:
            continue
        for step in parse_coe(coe_oracle_text(sample)).steps:
            if step.box is None or step.page_index is None or (sample.id, step.text) in seen:
                continue
            seen.add((sample.id, step.text))
            page = sample.pages[step.page_index]
            out.append((StepQuery(page, step.box, step.text), True))
            wrong = _wrong_box(page, step.box, sample, boxes, rng)
            if wrong is not None:
                out.append((StepQuery(wrong[0], wrong[1], step.text), False))
    return out


def _samples(docs: int, seed: int, root: Path) -> list[Sample]:
    from evidra.methods._synth import QUESTIONS_PER_DOC, synth_samples
    from evidra.rl.run_config import DataConfig

    return synth_samples(DataConfig(path=str(root), size=docs * QUESTIONS_PER_DOC, seed=seed), "synth.lat")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=64, help="synthetic documents per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data", default="", help="folder for the synthetic corpus (default: a temp folder)")
    args = parser.parse_args()
    similarity = TextOverlapSimilarity(ocr=False)
    scores: list[float] = []
    labels: list[bool] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.data or tmp)
        for seed in args.seeds:
            steps = labelled_steps(_samples(args.docs, seed, root), seed)
            mine = similarity.score_steps([q for q, _ in steps])
            marks = [label for _, label in steps]
            cal = best_threshold(mine, marks)
            right = [s for s, label in zip(mine, marks, strict=True) if label]
            wrong = [s for s, label in zip(mine, marks, strict=True) if not label]
            print(
                f"seed {seed}: {cal.correct} correct / {cal.incorrect} incorrect steps, median score "
                f"{statistics.median(right):.3f} / {statistics.median(wrong):.3f}; tau {cal.tau:.4f} "
                f"(balanced accuracy {cal.balanced_accuracy:.3f}; at {LAT_TAU}: "
                f"{balanced_accuracy(mine, marks, LAT_TAU):.3f})"
            )
            scores += mine
            labels += marks
    cal = best_threshold(scores, labels)
    recorded = balanced_accuracy(scores, labels, TEXT_OVERLAP_TAU)
    print(f"evidra's TEXT_OVERLAP_TAU = {TEXT_OVERLAP_TAU}: balanced accuracy {recorded:.3f}")
    print(
        f"RESULT tau={cal.tau:.4f} balanced_accuracy={cal.balanced_accuracy:.3f} "
        f"at_0.3={balanced_accuracy(scores, labels, LAT_TAU):.3f} steps={len(scores)}"
    )


if __name__ == "__main__":
    main()
