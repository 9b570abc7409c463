from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.core.errors import ModelLoadError
from evidra.core.geometry import num_image_tokens
from evidra.models.loading import load_colqwen2, load_vlm, read_model_type


def test_missing_or_foreign_paths_fail_clearly(tmp_path: Path, tiny_dirs: dict[str, Path]) -> None:
    with pytest.raises(ModelLoadError, match="no Qwen-VL model folder"):
        load_vlm(tmp_path / "Qwen" / "Qwen2.5-VL-7B-Instruct")
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        load_vlm(tmp_path)
    with pytest.raises(ModelLoadError, match="supports qwen2_vl"):
        load_vlm(tiny_dirs["colqwen2"])
    with pytest.raises(ModelLoadError, match="not colqwen2"):
        load_colqwen2(tiny_dirs["qwen2_5_vl"])


def test_release_layout_and_pixel_overrides(tiny_dirs: dict[str, Path], tiny_vlms: dict[str, Any]) -> None:
    path = tiny_dirs["qwen2_5_vl"]
    pre = json.loads((path / "preprocessor_config.json").read_text())
    assert pre["processor_class"] == "Qwen2_5_VLProcessor" and "max_pixels" in pre
    assert not (path / "processor_config.json").exists()
    assert read_model_type(path) == "qwen2_5_vl"
    default = tiny_vlms["qwen2_5_vl"].spec
    assert (default.min_pixels, default.max_pixels) == (pre["min_pixels"], pre["max_pixels"])
    big = load_vlm(path, max_pixels=448 * 448)
    assert big.spec.max_pixels == 448 * 448
    from PIL import Image

    page = Image.new("RGB", (600, 800), "white")
    grid = big.processor.image_processor(images=[page], return_tensors="pt")["image_grid_thw"][0]
    assert int(grid.prod()) // 4 == num_image_tokens(600, 800, big.spec) > num_image_tokens(600, 800, default)


def test_colqwen2_embeds_pages_and_queries(tiny_dirs: dict[str, Path]) -> None:
    from PIL import Image

    model, processor = load_colqwen2(tiny_dirs["colqwen2"])
    pages = [Image.new("RGB", (300, 400), c) for c in ("white", "gray")]
    with torch.no_grad():
        page_emb = model(**processor(images=pages, return_tensors="pt")).embeddings  # (2, Np, 32)
        query_emb = model(**processor(text=["founding year", "population"], return_tensors="pt")).embeddings
    assert page_emb.shape[0] == 2 and page_emb.shape[-1] == 32
    norms = page_emb.norm(dim=-1)
    assert torch.allclose(norms[norms > 0], torch.ones_like(norms[norms > 0]), atol=1e-4)
    scores = processor.score_retrieval(list(query_emb), list(page_emb))  # (2 queries, 2 pages)
    manual = torch.einsum("qd,pd->qp", query_emb[0], page_emb[1]).max(dim=1).values.sum()
    assert scores.shape == (2, 2)
    assert torch.isclose(scores[0, 1].float(), manual.float(), atol=1e-4)
