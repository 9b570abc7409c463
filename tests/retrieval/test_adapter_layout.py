"""Retrievers published as a PEFT adapter over a base model (colpali-engine's layout): the base is
resolved (hub id or path), the adapter applied and merged; mismatched checkpoints are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.core.errors import ModelLoadError
from evidra.core.types import Page
from evidra.retrieval.encoders import load_encoder
from evidra.retrieval.interfaces import EncoderOptions

BASE_ID = "tiny-vidore/colqwen2-base"
ADAPTER_ID = "tiny-vidore/colqwen2-lora"


@pytest.fixture(scope="module")
def adapter_and_merged(
    tiny_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Any]:
    """A LoRA adapter saved by peft over the tiny ColQwen2 (random, non-zero B: it changes the
    embeddings) naming ``BASE_ID`` as its base, and the same adapter merged in memory."""
    from peft import LoraConfig, get_peft_model
    from transformers import ColQwen2ForRetrieval

    torch.manual_seed(0)
    base = ColQwen2ForRetrieval.from_pretrained(str(tiny_dirs["colqwen2"]), local_files_only=True)
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=r".*language_model.*\.(q_proj|v_proj)|embedding_proj_layer",
        init_lora_weights=False,  # random A and B: a merge that did nothing would show
    )
    peft_model = get_peft_model(base, config)
    out = tmp_path_factory.mktemp("adapter")
    peft_model.save_pretrained(out)
    cfg = json.loads((out / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = BASE_ID
    (out / "adapter_config.json").write_text(json.dumps(cfg))
    assert not (out / "config.json").exists()  # an adapter folder only
    return out, peft_model.merge_and_unload().eval()


def _reference(
    model: Any, processor: Any, pages: list[Page], queries: list[str]
) -> tuple[list[Any], list[Any]]:
    with torch.no_grad():
        p = processor(images=[page.open_image() for page in pages], return_tensors="pt")
        q = processor(text=queries, return_tensors="pt")
        pe, qe = model(**p).embeddings, model(**q).embeddings
    return (
        [e[m.bool()] for e, m in zip(pe, p["attention_mask"], strict=True)],
        [e[m.bool()] for e, m in zip(qe, q["attention_mask"], strict=True)],
    )


def test_adapter_from_the_hub_cache_equals_base_plus_adapter_merged(
    hub_cache: Any, tiny_dirs: dict[str, Path], adapter_and_merged: tuple[Path, Any], ragged_pages: list[Page]
) -> None:
    adapter, merged = adapter_and_merged
    hub_cache.publish(tiny_dirs["colqwen2"], BASE_ID)
    hub_cache.publish(adapter, ADAPTER_ID)
    enc: Any = load_encoder("colqwen2", ADAPTER_ID, EncoderOptions(batch_size=4, device="auto"))
    queries = ["founding year", "total revenue of the company"]
    pages, qs = enc.embed_pages(ragged_pages), enc.embed_queries(queries)
    want_pages, want_queries = _reference(merged, enc.processor, ragged_pages, queries)
    for got, want in zip([*pages, *qs], [*want_pages, *want_queries], strict=True):
        assert torch.allclose(got, want, atol=1e-5)
    plain: Any = load_encoder("colqwen2", BASE_ID, EncoderOptions(batch_size=4))
    assert not torch.allclose(plain.embed_queries(queries)[0], qs[0], atol=1e-3)  # the adapter counts


def test_adapter_over_a_local_base_directory(
    tmp_path: Path, tiny_dirs: dict[str, Path], adapter_and_merged: tuple[Path, Any]
) -> None:
    adapter, merged = adapter_and_merged
    local = tmp_path / "adapter"
    shutil.copytree(adapter, local)
    cfg = json.loads((local / "adapter_config.json").read_text())
    (local / "adapter_config.json").write_text(
        json.dumps({**cfg, "base_model_name_or_path": str(tiny_dirs["colqwen2"])})
    )
    enc: Any = load_encoder("colqwen2", local)
    state = merged.state_dict()
    assert all(torch.equal(v, state[k]) for k, v in enc.model.state_dict().items())


def test_adapter_checkpoints_are_checked(
    hub_cache: Any, tmp_path: Path, tiny_dirs: dict[str, Path], adapter_and_merged: tuple[Path, Any]
) -> None:
    adapter, _ = adapter_and_merged
    hub_cache.publish(adapter, ADAPTER_ID)
    with pytest.raises(ModelLoadError) as info:  # its base is not in the cache
        load_encoder("colqwen2", ADAPTER_ID)
    assert "\n" not in str(info.value) and f"`hf download {BASE_ID}`" in str(info.value)
    hub_cache.publish(tiny_dirs["colqwen2"], BASE_ID)
    with pytest.raises(
        ModelLoadError, match=r"is a 'colqwen2' checkpoint, not colpali; use encoder 'colqwen2'"
    ):
        load_encoder("colpali", ADAPTER_ID)

    nameless = tmp_path / "nameless"
    shutil.copytree(adapter, nameless)
    cfg = json.loads((nameless / "adapter_config.json").read_text())
    del cfg["base_model_name_or_path"]
    (nameless / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match=r"names no base model .*base_model_name_or_path"):
        load_encoder("colqwen2", nameless)

    foreign = tmp_path / "foreign"  # an adapter whose modules its base lacks
    shutil.copytree(adapter, foreign)
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    (foreign / "adapter_config.json").write_text(
        json.dumps({**cfg, "target_modules": ["no_such_proj"], "base_model_name_or_path": BASE_ID})
    )
    with pytest.raises(ModelLoadError, match=r"does not fit its base model"):
        load_encoder("colqwen2", foreign)
