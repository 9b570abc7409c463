"""Load Qwen2-VL, Qwen2.5-VL and Qwen3-VL checkpoints (and ColQwen2 retrievers).

Text-only causal LMs (Qwen2, Qwen2.5 and Qwen3 checkpoints, ``model_type`` qwen2 / qwen3) load
through the same ``load_vlm`` into the same ``VLM`` record, with ``spec`` None and a
``TextProcessor`` around their tokenizer, so rollouts and the trainer need no second path.

A model is named as users write it (``evidra.models.references``): a local directory, a hub id
(``org/name[@revision]``, fetched into the hub cache) or ``tiny:ARCH``. ``min_pixels`` /
``max_pixels`` override the checkpoint's image limits, which decide how many tokens a page costs
(see ``evidra.core.geometry.smart_resize``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.core.devices import resolve_device
from evidra.core.errors import ModelLoadError
from evidra.core.geometry import VISION_SPECS, VisionSpec
from evidra.models.references import resolve_model_ref
from evidra.models.speedups import fast_patch_embed
from evidra.safeio.jsonfiles import read_capped_text

if TYPE_CHECKING:
    import torch
    from transformers import ColQwen2ForRetrieval, ColQwen2Processor, ProcessorMixin

    from evidra.models.hf_types import HFModel, Processor, Tokenizer
    from evidra.models.processors import TextProcessor

logger = logging.getLogger(__name__)

TEXT_ARCHS = ("qwen2", "qwen3")  # text-only causal LMs: no vision tower, no image inputs
SUPPORTED_ARCHS = (*VISION_SPECS, *TEXT_ARCHS)
_REFETCH = "the checkpoint is damaged: copy or download it again"


@dataclass(frozen=True, eq=False)
class VLM:
    """A loaded policy model with its processor and the facts the rest of evidra needs."""

    model: HFModel
    processor: Processor
    arch: str
    spec: VisionSpec | None  # None for a text-only policy
    path: Path

    @property
    def is_text_only(self) -> bool:
        return self.spec is None

    @property
    def tokenizer(self) -> Tokenizer:
        return self.processor.tokenizer

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Token ids that end a completion: ``<|im_end|>`` and ``<|endoftext|>``."""
        tok = self.tokenizer
        ids = {tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
        ids.discard(tok.unk_token_id)
        return tuple(sorted(i for i in ids if i is not None))

    @property
    def pad_token_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    @property
    def image_token_id(self) -> int:
        """``<|image_pad|>``; -1 (never a token) for a text-only policy, which has no image slots."""
        if self.spec is None:
            return -1
        found = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        return -1 if found is None or found == self.tokenizer.unk_token_id else int(found)

    @property
    def vision_token_ids(self) -> tuple[int, ...]:
        """Placeholder and delimiter tokens of images and videos."""
        names = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>")
        ids = {self.tokenizer.convert_tokens_to_ids(n) for n in names} - {self.tokenizer.unk_token_id, None}
        return tuple(sorted(ids))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def read_model_type(path: str | Path, kind: str = "Qwen-VL model") -> str:
    """The ``model_type`` of a ``kind`` checkpoint directory, with a clear error if it is not one."""
    root = Path(path)
    cfg = root / "config.json"
    if not str(path).strip():
        raise ModelLoadError(f"no {kind} checkpoint given; pass a local checkpoint directory")
    if not root.is_dir():
        raise ModelLoadError(
            f"{str(path)!r} is not a directory; pass a local {kind} checkpoint directory (with config.json)"
        )
    if not cfg.is_file():
        raise ModelLoadError(
            f"{str(root)!r} has no config.json; pass a local {kind} checkpoint directory "
            "(transformers format)"
        )
    try:
        model_type = json.loads(read_capped_text(cfg, f"{kind} config", fix=_REFETCH))["model_type"]
    except (ValueError, KeyError, TypeError, RecursionError, OSError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ModelLoadError(f"{cfg} is not a valid transformers config ({reason})") from None
    return str(model_type)


def _torch_dtype(dtype: str | torch.dtype) -> str | torch.dtype:
    import torch

    if not isinstance(dtype, str) or dtype == "auto":
        return dtype
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    except KeyError:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use float32, bfloat16, float16 or auto") from None


def load_processor(
    path: str | Path, arch: str, *, min_pixels: int | None = None, max_pixels: int | None = None
) -> ProcessorMixin:
    """Load the image-only processor of a checkpoint; tokenizer left-padded for generation."""
    from evidra.models.processors import image_only_processor_class

    cls = image_only_processor_class(arch)
    try:
        processor = cls.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # transformers raises many types here; report the file
        raise ModelLoadError(f"could not load the processor from {str(path)!r}: {exc}") from exc
    size = dict(processor.image_processor.size)
    if min_pixels is not None:
        size["shortest_edge"] = min_pixels
    if max_pixels is not None:
        size["longest_edge"] = max_pixels
    processor.image_processor.size = type(processor.image_processor.size)(**size)
    processor.tokenizer.padding_side = "left"
    return processor


def processor_spec(processor: ProcessorMixin, arch: str) -> VisionSpec:
    """The vision facts (patch, merge, pixel limits) this processor actually applies."""
    ip = processor.image_processor
    size = ip.size
    return VisionSpec(
        arch=arch,
        patch_size=int(ip.patch_size),
        merge_size=int(ip.merge_size),
        min_pixels=int(size["shortest_edge"]),
        max_pixels=int(size["longest_edge"]),
        box_space=VISION_SPECS[arch].box_space,
    )


def load_vlm(
    path: str | Path,
    *,
    dtype: str | torch.dtype = "float32",
    device: str = "cpu",
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    attn_implementation: str | None = None,
    kind: str = "Qwen-VL model",
) -> VLM:
    """Load a Qwen2-VL / Qwen2.5-VL / Qwen3-VL (or text-only Qwen2 / Qwen3) checkpoint.

    ``path`` is a directory, a hub id or ``tiny:ARCH`` (``resolve_model_ref``); ``device`` may be
    ``auto`` (the GPU when one is present). ``kind`` names what the caller wants it as, in errors
    (e.g. "dse retriever").

    >>> vlm = load_vlm("Qwen/Qwen2.5-VL-7B-Instruct", dtype="bfloat16", device="auto")  # doctest: +SKIP
    """
    path = resolve_model_ref(path, kind)
    device = resolve_device(device)
    arch = read_model_type(path, kind)
    if arch not in SUPPORTED_ARCHS:
        raise ModelLoadError(
            f"{str(path)!r} is a {arch!r} checkpoint; load_vlm supports {', '.join(SUPPORTED_ARCHS)}"
        )
    kwargs: dict[str, object] = {"dtype": _torch_dtype(dtype), "local_files_only": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    spec: VisionSpec | None = None
    if arch in TEXT_ARCHS:
        processor = _text_processor(path)
        model = _from_pretrained("AutoModelForCausalLM", path, kwargs)
    else:
        processor = load_processor(path, arch, min_pixels=min_pixels, max_pixels=max_pixels)
        model = _from_pretrained("AutoModelForImageTextToText", path, kwargs)
        spec = processor_spec(processor, arch)
    model.to(device)
    model.eval()
    fast_patch_embed(model)
    pixels = f"pixels {spec.min_pixels}..{spec.max_pixels}" if spec else "text only"
    logger.info("loaded %s from %s (%s, %s)", arch, path, dtype, pixels)
    return VLM(model=model, processor=processor, arch=arch, spec=spec, path=Path(path))


def _from_pretrained(auto_class: str, path: str | Path, kwargs: dict[str, object]) -> HFModel:
    import transformers

    try:
        return getattr(transformers, auto_class).from_pretrained(str(path), **kwargs)
    except Exception as exc:
        raise ModelLoadError(f"could not load model weights from {str(path)!r}: {exc}") from exc


def _text_processor(path: str | Path) -> TextProcessor:
    from transformers import AutoTokenizer

    from evidra.models.processors import TextProcessor

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:
        raise ModelLoadError(f"could not load the tokenizer from {str(path)!r}: {exc}") from exc
    tokenizer.padding_side = "left"
    return TextProcessor(tokenizer)


def load_colqwen2(
    path: str | Path, *, dtype: str | torch.dtype = "float32", device: str = "cpu"
) -> tuple[ColQwen2ForRetrieval, ColQwen2Processor]:
    """Load a ColQwen2 retriever and its processor: ``(model, processor)``."""
    from transformers import ColQwen2ForRetrieval, ColQwen2Processor

    path = resolve_model_ref(path, "ColQwen2 retriever")
    arch = read_model_type(path, "ColQwen2 retriever")
    if arch != "colqwen2":
        raise ModelLoadError(f"{str(path)!r} is a {arch!r} checkpoint, not colqwen2")
    try:
        processor = ColQwen2Processor.from_pretrained(str(path), local_files_only=True)
        model = ColQwen2ForRetrieval.from_pretrained(
            str(path), dtype=_torch_dtype(dtype), local_files_only=True
        )
    except Exception as exc:
        raise ModelLoadError(f"could not load ColQwen2 from {str(path)!r}: {exc}") from exc
    return model.to(resolve_device(device)).eval(), processor
