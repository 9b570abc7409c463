"""A tiny vision-language model can be built wider and deeper, and still runs a forward pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidra.models.tiny import build_tiny


@pytest.mark.parametrize(("hidden", "layers", "heads"), [(64, 2, 4), (128, 4, 4), (32, 2, 2)])
def test_width_and_depth_reach_the_config_and_rotary_sections_fill_a_head(
    tmp_path: Path, hidden: int, layers: int, heads: int
) -> None:
    folder = build_tiny("qwen2_5_vl", tmp_path / "m", hidden=hidden, layers=layers, heads=heads)
    text = json.loads((folder / "config.json").read_text())["text_config"]
    assert text["hidden_size"] == hidden and text["num_hidden_layers"] == layers
    assert (text["num_attention_heads"], text["num_key_value_heads"]) == (heads, heads // 2)
    head = hidden // heads
    # Qwen2.5-VL splits the rotary pairs of one head over time, height and width
    assert sum(text["rope_parameters"]["mrope_section"]) == head // 2
