"""Similarity services for LAT's stepwise attribution (LAT Eqs. 4-8) and its verification.

LAT scores each reasoning step r_t against the crop of its cited box B_t with the retriever
ColQwen2: S_t = sim(enc_img(crop(p_i, B_t)), enc_txt(r_t)) with L2-normalised vectors (Eqs.
4-6). The released code computes the late-interaction score: for each query (text) token the
best cosine over the crop's tokens, averaged over query tokens (``score_multi_vector``); the
threshold tau = 0.3 (§4, Fig. 8) is calibrated on that score, so that is what
:class:`ColQwen2Similarity` returns.

:class:`TextOverlapSimilarity` is the offline stand-in when no retriever checkpoint is around:
the page's text layer words inside the box against the step text, as token F1. It is not
LAT's measure (it ignores pixels, so figures score 0) and says so in its name.

Both implement ``StepSimilarity.score_steps`` over (page, box, text) queries, one call per
group; ``ColQwen2Similarity`` also implements LAT's ``Similarity.score(crops, texts)``.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from evidra.core.errors import ConfigError, InvalidInputError
from evidra.core.geometry import is_valid_box
from evidra.core.types import Box, Page, Parsed, Sample
from evidra.methods.lat.parse import StepPlan, _fit_aspect

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage
    from torch import Tensor
    from transformers import PreTrainedModel, ProcessorMixin

logger = logging.getLogger(__name__)

LAT_TAU = 0.3  # LAT §4 "default threshold tau = 0.3"
# tau for TextOverlapSimilarity, whose scale is not ColQwen2's (chosen; the paper gives none):
# benchmarks/calibrate_lat_tau.py on 3 x 64 synthetic documents (2,465 labelled steps) finds the
# best balanced accuracy, 0.984 (0.975 at 0.3), for every threshold in (0.32, 1/3]; above 1/3 it
# falls to 0.81. 0.325 is the middle of that interval (docs/methods.md)
TEXT_OVERLAP_TAU = 0.325
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class StepQuery:
    """One step to check: its text against the box (page pixels) on ``page``."""

    page: Page
    box: Box
    text: str


class StepSimilarity(Protocol):
    def score_steps(self, queries: Sequence[StepQuery]) -> list[float]: ...


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits of any script).

    >>> tokens("Revenue: $5.2M (2023)")
    ['revenue', '5', '2m', '2023']
    """
    return [t.lower() for t in _TOKEN.findall(text)]


def token_f1(a: Sequence[str], b: Sequence[str]) -> float:
    """Bag-of-words F1 of two token lists; 0 when either is empty.

    >>> round(token_f1(["a", "b", "c"], ["b", "c", "d", "e"]), 6)  # p = 2/3, r = 2/4
    0.571429
    """
    common = sum((Counter(a) & Counter(b)).values())
    if not a or not b or common == 0:
        return 0.0
    precision, recall = common / len(a), common / len(b)
    return 2 * precision * recall / (precision + recall)


def words_in_box(page: Page, box: Box) -> list[str]:
    """Words of the page's text layer whose centre lies inside ``box`` (page pixels), in order."""
    out = []
    for word in page.words:
        cx, cy = (word.box.x1 + word.box.x2) / 2, (word.box.y1 + word.box.y2) / 2
        if box.x1 <= cx <= box.x2 and box.y1 <= cy <= box.y2:
            out.append(word.text)
    return out


def ocr_available() -> bool:
    """Whether tesseract can read crops here (the ``pytesseract`` package and its binary)."""
    import importlib.util
    import shutil

    return importlib.util.find_spec("pytesseract") is not None and shutil.which("tesseract") is not None


def require_step_text(samples: Sequence[Sample], dataset: str) -> None:
    """``ConfigError`` when a page has no text layer and no OCR is installed: the text-overlap
    similarity would score every step on it 0 (R_step at most 0.5) instead of training on it."""
    bare = sum(1 for s in samples for p in s.pages if not p.words)
    if bare and not ocr_available():
        raise ConfigError(
            f"{dataset}: {bare} pages have no text layer, so LAT's text-overlap step similarity would "
            f"score their steps 0; install OCR (pip install 'evidra[ocr]' and the tesseract binary) or "
            f"use the visual similarity (method.similarity=colqwen2 with method.similarity_checkpoint "
            f"set to a ColQwen2 checkpoint)"
        )


@dataclass(frozen=True)
class TextOverlapSimilarity:
    """Offline step similarity: token F1 between the words inside the box and the step text.

    The words are the page's text layer; on a page without one (screenshots) they are what
    tesseract reads in the crop when OCR is installed (``ocr``: None = when available), else the
    step scores 0 with a warning (``require_step_text`` refuses such data at task build)."""

    ocr: bool | None = None

    def score_steps(self, queries: Sequence[StepQuery]) -> list[float]:
        use_ocr = ocr_available() if self.ocr is None else self.ocr
        if not use_ocr and any(not q.page.words for q in queries):
            logger.warning(
                "TextOverlapSimilarity: some pages have no text layer and no OCR; their steps score 0"
            )
        images: dict[str, PILImage] = {}
        out = []
        for q in queries:
            if q.page.words or not use_ocr:
                words = words_in_box(q.page, q.box)
            else:
                from evidra.retrieval.ocr import ocr_words

                if q.page.id not in images:
                    images[q.page.id] = q.page.open_image()
                words = ocr_words(_crop(images[q.page.id], q.box))
            out.append(token_f1(tokens(" ".join(words)), tokens(q.text)))
        return out


def _unpad(embeddings: Tensor, mask: Tensor) -> list[Tensor]:
    return [row[m.bool()] for row, m in zip(embeddings, mask, strict=True)]


def maxsim_mean(query: Tensor, doc: Tensor) -> float:
    """LAT's score: mean over query tokens of the max cosine over doc tokens (after L2 norm)."""
    import torch

    q = torch.nn.functional.normalize(query.float(), p=2, dim=1)  # (Lq, D)
    d = torch.nn.functional.normalize(doc.float(), p=2, dim=1)  # (Ld, D)
    return float((q @ d.T).max(dim=1).values.mean())


class ColQwen2Similarity:
    """ColQwen2 (or ColPali) late-interaction similarity of crops vs step texts, batched:
    one forward for all crops and one for all texts of a call (a group)."""

    def __init__(
        self, model: PreTrainedModel, processor: ProcessorMixin, *, batch_size: int = 16, device: str = "cpu"
    ) -> None:
        self.model, self.processor = model, processor
        self.batch_size, self.device = batch_size, device

    @classmethod
    def load(cls, path: str | Path, *, device: str = "auto", dtype: str = "auto") -> ColQwen2Similarity:
        """From a ColQwen2/ColPali checkpoint: a directory, a hub id or a PEFT adapter of one;
        ``auto``: on the GPU in bfloat16 when there is one (as the policy), else CPU float32."""
        from evidra.core.devices import resolve_device, resolve_dtype
        from evidra.retrieval.encoders.colvision import ColVisionEncoder
        from evidra.retrieval.interfaces import EncoderOptions

        where = resolve_device(device)
        enc = ColVisionEncoder.load(path, EncoderOptions(device=where, dtype=resolve_dtype(dtype, where)))
        return cls(enc.model, enc.processor, device=enc.options.device)

    def _embed(self, **inputs: Any) -> list[Tensor]:
        import torch

        batch = self.processor(**inputs, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            out = self.model(**batch).embeddings  # (B, L, D)
        return _unpad(out, batch["attention_mask"])

    def score(self, crops: Sequence[PILImage], texts: Sequence[str]) -> list[float]:
        """LAT's ``Similarity``: one score per (crop, text) pair."""
        if len(crops) != len(texts):
            raise InvalidInputError(f"got {len(crops)} crops for {len(texts)} texts; pass one text per crop")
        scores: list[float] = []
        for i in range(0, len(crops), self.batch_size):
            images = [c.convert("RGB") for c in crops[i : i + self.batch_size]]
            docs = self._embed(images=images)
            queries = self._embed(text=list(texts[i : i + self.batch_size]))
            scores += [maxsim_mean(q, d) for q, d in zip(queries, docs, strict=True)]
        return scores

    def score_steps(self, queries: Sequence[StepQuery]) -> list[float]:
        """Crop each box from its page (crops thinner than 1:200 are resized as LAT does)."""
        images: dict[str, PILImage] = {}
        crops = []
        for q in queries:
            if q.page.id not in images:
                images[q.page.id] = q.page.open_image()
            crops.append(_crop(images[q.page.id], q.box))
        return self.score(crops, [q.text for q in queries]) if queries else []


def _crop(image: PILImage, box: Box) -> PILImage:
    """The box's pixels, at least 1 px each way; crops thinner than 1:200 resized as LAT does."""
    x1, y1 = round(box.x1), round(box.y1)
    crop = image.crop((x1, y1, max(x1 + 1, round(box.x2)), max(y1 + 1, round(box.y2))))
    fitted = _fit_aspect(crop)
    return fitted if fitted is not None else crop


def score_plans_on_pages(
    plans: Sequence[StepPlan], pages: Sequence[Page], similarity: StepSimilarity
) -> list[list[float]]:
    """``lat.score_plans`` for a ``StepSimilarity``: every scorable step of every plan (paper
    planner: ``page_key`` is the 0-based page index) in ONE call; unscorable steps get 0."""
    queries: list[StepQuery] = []
    for plan in plans:
        for step in plan.steps:
            if step.crop is not None and step.box is not None and isinstance(step.page_key, int):
                queries.append(StepQuery(pages[step.page_key], Box(*step.box), step.text))
    flat = iter(similarity.score_steps(queries) if queries else [])
    return [
        [
            float(next(flat))
            if s.crop is not None and s.box is not None and isinstance(s.page_key, int)
            else 0.0
            for s in plan.steps
        ]
        for plan in plans
    ]


@dataclass(frozen=True)
class StepVerdict:
    """One CoE step checked at inference time (``evidra ask --verify``)."""

    index: int  # 1-based step number
    text: str
    page_index: int | None  # 0-based
    page_id: str | None
    box: Box | None  # page pixels
    score: float | None  # None when the step could not be checked
    supported: bool
    reason: str = ""


def verify_steps(
    parsed: Parsed, pages: Sequence[Page], similarity: StepSimilarity, *, tau: float = LAT_TAU
) -> list[StepVerdict]:
    """LAT's attribution check per step (Eq. 8's S_t >= tau, without the accuracy gate): crop
    the step's box from its page, score it against the step text, compare with ``tau``.

    A step without a box, on a page that does not exist, with a box outside its page, or
    without text is "unsupported" with the reason; a single-page input reads an absent page
    index as page 1, as LAT's single-image mode does.
    """
    checked: list[tuple[int, StepQuery]] = []
    verdicts: list[StepVerdict | None] = []
    for i, step in enumerate(parsed.steps, 1):
        page_index = step.page_index if step.page_index is not None or len(pages) != 1 else 0
        page = pages[page_index] if page_index is not None and 0 <= page_index < len(pages) else None
        reason = _unchecked_reason(step.text, step.box, page)
        if reason:
            verdicts.append(
                StepVerdict(
                    i, step.text, page_index, page.id if page else None, step.box, None, False, reason
                )
            )
            continue
        assert page is not None and step.box is not None  # _unchecked_reason guarantees both
        checked.append((len(verdicts), StepQuery(page, step.box, step.text)))
        verdicts.append(None)
    scores = similarity.score_steps([q for _, q in checked]) if checked else []
    for (slot, query), score in zip(checked, scores, strict=True):
        step = parsed.steps[slot]
        relation = ">=" if score >= tau else "<"
        verdicts[slot] = StepVerdict(
            slot + 1,
            step.text,
            pages.index(query.page),
            query.page.id,
            query.box,
            float(score),
            score >= tau,
            f"similarity {score:.3f} {relation} tau {tau}",
        )
    return [v for v in verdicts if v is not None]


def _unchecked_reason(text: str, box: Box | None, page: Page | None) -> str:
    if box is None:
        return "no readable box"
    if page is None:
        return "cited page does not exist"
    if not is_valid_box(box, page.width, page.height):
        return "box outside the page"
    if not text.strip():
        return "empty step text"
    return ""
