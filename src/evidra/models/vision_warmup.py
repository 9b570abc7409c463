"""A vision tower taught to see glyphs before the language model learns to read them.

Real vision-language models start from a pretrained vision encoder; a tiny model built from a
config starts from a random one, and trained only through the language model's loss it does not
learn glyphs that fill a small part of a page: the language model settles on the answers' prior
within a few dozen steps and the gradient reaching the tower fades (``benchmarks/reading_probe.py``
shows a digit two image tokens wide staying at chance for 1,500 steps). This module gives the
tower the pretraining it lacks, with a dense target on every image token: the characters whose
centres fall in the token's cell, left to right, read from the page's text layer (``SLOTS`` per
token, the rest blank). A linear head on the merged image tokens is trained with the tower, then
dropped; the tower is then kept frozen while the language model learns on top of it.

The target is per merged token, not per patch, on purpose: the language model sees merged tokens,
and a character read the same way wherever it sits inside its token is one linear direction to
find, where a per-patch target puts it in one of four (``reading_probe.py --vision-warmup``:
two digits in their own cells are read at 0.56 after 300 steps over a tower warmed per token, 0.08
over one warmed per patch).

Character centres are the word's box split evenly by its characters, exact for a monospaced font
and close for the others: the target is a proxy for where the glyphs are, not a transcription to
score.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.core.errors import InvalidInputError
from evidra.core.types import Page

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image

    from evidra.models.loading import VLM

logger = logging.getLogger(__name__)

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
BLANK = 0  # class of an empty slot; ALPHABET[i] is class i + 1, any other character the last
BLANK_WEIGHT = 0.1  # most slots are blank: they count a tenth in the loss
SLOTS = 3  # characters read per merged token (three 12-pixel glyphs fit in a 28-pixel cell)


@dataclass(frozen=True)
class Grid:
    """How the tower cuts an image: patch side (pixels), patches per merged side, patch rows, columns."""

    patch: int
    merge: int
    rows: int
    cols: int


def n_classes() -> int:
    return len(ALPHABET) + 2


def char_class(ch: str) -> int:
    index = ALPHABET.find(ch.upper())
    return index + 1 if index >= 0 else len(ALPHABET) + 1


def char_centres(page: Page) -> list[tuple[str, float, float]]:
    """Each character of the page's text layer with its centre (the word's box split evenly)."""
    out: list[tuple[str, float, float]] = []
    for word in page.words:
        chars = [c for c in word.text if not c.isspace()]
        if not chars:
            continue
        box = word.box
        step = (box.x2 - box.x1) / len(chars)
        y = (box.y1 + box.y2) / 2
        out.extend((ch, box.x1 + step * (k + 0.5), y) for k, ch in enumerate(chars))
    return out


def token_targets(page: Page, grid: Grid) -> list[int]:
    """``SLOTS`` classes per merged image token, in the tower's output order (row-major): the
    characters whose centres fall in the token's cell, left to right (top to bottom for a tie),
    then blanks. The page is seen resized to the grid's size."""
    side = grid.patch * grid.merge
    rows, cols = grid.rows // grid.merge, grid.cols // grid.merge
    sx = grid.cols * grid.patch / max(1, page.width)
    sy = grid.rows * grid.patch / max(1, page.height)
    cells: list[list[tuple[float, float, int]]] = [[] for _ in range(rows * cols)]
    for ch, x, y in char_centres(page):
        col, row = int(x * sx // side), int(y * sy // side)
        if 0 <= row < rows and 0 <= col < cols:
            cells[row * cols + col].append((x, y, char_class(ch)))
    out: list[int] = []
    for found in cells:
        classes = [c for _, _, c in sorted(found)][:SLOTS]
        out.extend(classes + [BLANK] * (SLOTS - len(classes)))
    return out


class VisionWarmup:
    """The tower of ``vlm`` and a per-token character head, trained together on pages with words."""

    def __init__(self, vlm: VLM, *, lr: float = 2e-3, seed: int = 0) -> None:
        import torch

        config = getattr(vlm.model.config, "vision_config", None)
        if config is None:
            raise InvalidInputError("vision warm-up: the model has no vision tower (a text-only model)")
        self.vlm = vlm
        self.patch = int(config.patch_size)
        self.merge = int(config.spatial_merge_size)
        width = int(getattr(config, "out_hidden_size", 0) or vlm.model.config.get_text_config().hidden_size)
        self.tower = vlm.model.model.visual
        generator = torch.Generator().manual_seed(seed)
        head = torch.nn.Linear(width, SLOTS * n_classes())
        with torch.no_grad():
            head.weight.normal_(0.0, width**-0.5, generator=generator)
            head.bias.zero_()
        self.head = head.to(device=self.tower.device, dtype=self.tower.dtype)
        self.params = [*self.tower.parameters(), *self.head.parameters()]
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=0.0)

    def logits(self, images: Sequence[Image]) -> tuple[torch.Tensor, list[Grid]]:
        """Class logits (tokens x SLOTS, classes) of ``images``, and each image's grid."""
        processor = getattr(self.vlm.processor, "image_processor", None)
        if processor is None:
            raise InvalidInputError("vision warm-up: the model has no image processor (a text-only model)")
        batch = processor(images=list(images), return_tensors="pt")
        pixels = batch["pixel_values"].to(device=self.tower.device, dtype=self.tower.dtype)
        thw = batch["image_grid_thw"].to(self.tower.device)
        out = self.tower(pixels, grid_thw=thw)
        features = getattr(out, "pooler_output", out)
        if features.shape[0] != int((thw.prod(-1) // self.merge**2).sum()):
            raise InvalidInputError("vision warm-up: the tower's output is not one feature per merged token")
        grids = [Grid(self.patch, self.merge, int(h), int(w)) for _, h, w in thw.tolist()]
        return self.head(features).reshape(-1, n_classes()), grids

    def loss(self, pages: Sequence[Page]) -> tuple[torch.Tensor, float]:
        """The weighted cross-entropy on ``pages`` and the share of character slots read right."""
        import torch

        logits, grids = self.logits([page.open_image() for page in pages])
        target = torch.tensor(
            [c for page, grid in zip(pages, grids, strict=True) for c in token_targets(page, grid)],
            device=logits.device,
        )
        weight = torch.where(target == BLANK, BLANK_WEIGHT, 1.0).to(logits.dtype)
        each = torch.nn.functional.cross_entropy(logits.float(), target, reduction="none")
        marked = target != BLANK
        right = (
            (logits.argmax(-1) == target)[marked].float().mean() if bool(marked.any()) else torch.tensor(1.0)
        )
        return (each * weight).sum() / weight.sum(), float(right)

    def step(self, pages: Sequence[Page]) -> tuple[float, float]:
        import torch

        self.tower.train()
        loss, read = self.loss(pages)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach()), read


def warm_up_vision(
    vlm: VLM,
    pages: Sequence[Page],
    *,
    steps: int,
    batch_size: int = 16,
    lr: float = 2e-3,
    seed: int = 0,
) -> list[float]:
    """Train ``vlm``'s vision tower ``steps`` steps on ``pages`` (each with a text layer); the losses."""
    with_words = [p for p in pages if p.words]
    if steps > 0 and not with_words:
        raise InvalidInputError(
            "vision warm-up: no page has a text layer to learn glyphs from; "
            "use generated pages (data.synthetic=[reading]) or ingested PDFs"
        )
    warm = VisionWarmup(vlm, lr=lr, seed=seed)
    order = random.Random(seed)
    losses: list[float] = []
    for step in range(1, steps + 1):
        loss, read = warm.step(order.sample(with_words, min(batch_size, len(with_words))))
        losses.append(loss)
        if step == 1 or step % 50 == 0 or step == steps:
            logger.info("vision warm-up step %d/%d: loss %.3f, characters read %.2f", step, steps, loss, read)
    return losses
