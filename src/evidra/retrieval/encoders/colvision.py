"""Late-interaction page encoders through transformers' own classes: ColQwen2 and ColPali.

Checkpoints load in transformers' format (the ``-hf`` releases) or in colpali-engine's own
(``colvision_native`` renames its weights), either one alone or with a PEFT adapter on top.

Pages go through the processor's image path (its fixed visual prompt), queries through its
query path (prefix plus query-augmentation tokens). The model returns unit-norm vectors per
token, zeroed at padding; we keep only the positions the attention mask marks, per item, so a
zero vector never enters MaxSim (it would score 0 where every real match is negative).

>>> enc = ColVisionEncoder.load("ckpt/colqwen2-v1.0-hf")       # doctest: +SKIP
>>> pages = enc.embed_pages(store.pages())  # [(L_i, 128), ...]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor

from evidra.core.devices import resolve_device
from evidra.core.errors import ModelLoadError
from evidra.retrieval.encoders._batching import batches, check_texts, torch_dtype, unpad
from evidra.retrieval.encoders.colvision_native import (
    Layout,
    colpali_engine_classes,
    load_native,
    native_family,
    write_renamed_adapter,
)
from evidra.retrieval.interfaces import ENCODERS, EncoderOptions
from evidra.safeio.jsonfiles import read_capped_text

if TYPE_CHECKING:
    from transformers import BatchFeature, PreTrainedModel, ProcessorMixin

    from evidra.core.types import Page

logger = logging.getLogger(__name__)

_CLASSES = {
    "colqwen2": ("ColQwen2ForRetrieval", "ColQwen2Processor"),
    "colpali": ("ColPaliForRetrieval", "ColPaliProcessor"),
}

_TITLES = {"colqwen2": "ColQwen2", "colpali": "ColPali"}
ADAPTER_CONFIG = "adapter_config.json"
_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")


class ColVisionEncoder:
    """A ColQwen2 / ColPali retriever: multi-vector pages and queries."""

    kind: Literal["multi"] = "multi"

    def __init__(
        self, model: PreTrainedModel, processor: ProcessorMixin, *, name: str, options: EncoderOptions
    ) -> None:
        self.model = model
        self.processor = processor
        self.name = name
        self.options = options

    @classmethod
    def load(
        cls, path: str | Path, options: EncoderOptions | None = None, *, expected: str | None = None
    ) -> ColVisionEncoder:
        """Load a ColQwen2 or ColPali checkpoint (its ``model_type`` decides).

        ``path`` is a directory, a hub id or ``tiny:ARCH`` (``resolve_model_ref``), in transformers'
        format (the ``-hf`` releases) or colpali-engine's own (``colvision_native``). A PEFT adapter
        (``adapter_config.json``, the layout colpali-engine publishes its retrievers in) is applied to
        the base model its ``base_model_name_or_path`` names, resolved the same way, and merged; one
        that names colpali-engine's modules is renamed first. With ``expected`` (the encoder name
        asked for) a checkpoint of the other family is refused, so an index never records one encoder
        while holding vectors of another.
        """
        import transformers

        from evidra.models.references import resolve_model_ref

        opts = options or EncoderOptions()
        opts = replace(opts, device=resolve_device(opts.device))
        kind = f"{_TITLES[expected]} retriever" if expected in _TITLES else "ColQwen2 / ColPali retriever"
        root = resolve_model_ref(path, kind)
        adapter = root / ADAPTER_CONFIG
        base = _adapter_base(adapter, kind) if adapter.is_file() else root
        arch, native = _check_family(base, kind, expected)
        model_cls, proc_cls = (getattr(transformers, n) for n in _CLASSES[arch])
        # an adapter folder of colpali-engine carries the processor it was trained with
        processor_dir = root if any((root / f).is_file() for f in _PROCESSOR_FILES) else base
        try:
            processor = proc_cls.from_pretrained(str(processor_dir), local_files_only=True)
        except Exception as exc:  # transformers raises many kinds here; name the directory
            raise ModelLoadError(
                f"could not load the {arch} processor from {str(processor_dir)!r}: {exc}"
            ) from exc
        model, layout = _load_model(model_cls, base, arch, native, torch_dtype(opts.dtype))
        if adapter.is_file():
            model = _apply_adapter(model, root, arch, layout)
        model.to(opts.device).eval()
        return cls(model, processor, name=arch, options=opts)

    @property
    def dim(self) -> int:
        return int(self.model.config.embedding_dim)

    def _forward(self, inputs: BatchFeature) -> list[Tensor]:
        inputs = inputs.to(self.options.device)
        with torch.inference_mode():
            out = self.model(**inputs).embeddings  # (B, L, D), unit norm, zero at padding
        return unpad(out, inputs["attention_mask"])

    def embed_pages(self, pages: Sequence[Page]) -> list[Tensor]:
        out: list[Tensor] = []
        for batch in batches(pages, self.options.batch_size):
            images = [page.open_image() for page in batch]
            out += self._forward(self.processor(images=images, return_tensors="pt"))
        return out

    def embed_queries(self, queries: Sequence[str]) -> list[Tensor]:
        check_texts(queries)
        out: list[Tensor] = []
        for batch in batches(queries, self.options.batch_size):
            out += self._forward(self.processor(text=list(batch), return_tensors="pt"))
        return out


def _load_model(
    model_cls: type[PreTrainedModel], base: Path, arch: str, native: bool, dtype: torch.dtype
) -> tuple[PreTrainedModel, Layout | None]:
    """The retrieval model in ``base``, and the colpali-engine layout it was read from (None for a
    checkpoint in transformers' format)."""
    if native:
        model, layout = load_native(model_cls, base, arch, dtype)
        logger.info("read %s (%s) into %s", base, layout.name, model_cls.__name__)
        return model, layout
    try:
        return model_cls.from_pretrained(str(base), dtype=dtype, local_files_only=True), None
    except Exception as exc:  # transformers raises many kinds here; name the directory
        raise ModelLoadError(f"could not load {arch} from {str(base)!r}: {exc}") from exc


def _check_family(path: Path, kind: str, expected: str | None) -> tuple[str, bool]:
    """The checkpoint's family and whether colpali-engine saved it in its own format, refused in
    one line unless it is the family asked for."""
    from evidra.models.loading import read_model_type

    native = native_family(path)
    arch = native or read_model_type(path, kind)
    if arch in _CLASSES and (expected is None or arch == expected):
        return arch, native is not None
    if arch in _CLASSES:
        fix = f"use encoder {arch!r} for it"
    elif names := colpali_engine_classes(path):
        fix = (
            f"colpali-engine's own format is read for ColQwen2 (qwen2_vl) and ColPali (paligemma), "
            f"not {names[0]}; pass a transformers release of it"
        )
    else:
        fix = "pass a ColQwen2 or ColPali checkpoint"
    raise ModelLoadError(
        f"{str(path)!r} is a {arch!r} checkpoint, not {expected or ' / '.join(_CLASSES)}; {fix}"
    )


def _adapter_base(adapter: Path, kind: str) -> Path:
    """The base checkpoint directory a PEFT adapter names (a local path or a hub id)."""
    from evidra.models.references import resolve_model_ref

    try:
        base = json.loads(read_capped_text(adapter, "adapter config"))["base_model_name_or_path"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(
            f"{adapter} names no base model ({type(exc).__name__}: {exc}); a PEFT adapter needs "
            "base_model_name_or_path in its adapter_config.json"
        ) from None
    if not isinstance(base, str) or not base.strip():
        raise ModelLoadError(f"{adapter} has an empty base_model_name_or_path; set it to the base {kind}")
    try:
        return resolve_model_ref(base, f"base of the {kind} adapter")
    except ModelLoadError as exc:
        raise ModelLoadError(f"adapter {adapter.parent}: {exc}") from None


def _apply_adapter(
    model: PreTrainedModel, folder: Path, family: str, layout: Layout | None
) -> PreTrainedModel:
    """``model`` with the adapter in ``folder`` merged, renamed first if it names colpali-engine's
    modules (``layout``, the base's own, decides when the adapter's keys fit either layout)."""
    with tempfile.TemporaryDirectory(prefix="evidra-adapter-") as tmp:
        renamed = write_renamed_adapter(folder, family, model, Path(tmp), prefer=layout)
        return _merge_adapter(model, Path(tmp) if renamed else folder, shown=folder)


def _merge_adapter(model: PreTrainedModel, folder: Path, *, shown: Path) -> PreTrainedModel:
    """``model`` with the PEFT adapter in ``folder`` applied and merged into its weights."""
    from peft import PeftModel

    try:
        merged = PeftModel.from_pretrained(model, str(folder), local_files_only=True).merge_and_unload()
    except Exception as exc:  # peft raises ValueError/KeyError/RuntimeError for a mismatched adapter
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelLoadError(
            f"the adapter in {str(shown)!r} does not fit its base model ({reason}); pass an adapter "
            "trained on that base"
        ) from None
    logger.info("merged the adapter of %s into its base model", shown)
    return merged


def _colqwen2(path: str | Path, options: EncoderOptions | None = None) -> ColVisionEncoder:
    return ColVisionEncoder.load(path, options, expected="colqwen2")


def _colpali(path: str | Path, options: EncoderOptions | None = None) -> ColVisionEncoder:
    return ColVisionEncoder.load(path, options, expected="colpali")


ENCODERS.add("colqwen2", _colqwen2)
ENCODERS.add("colpali", _colpali)
