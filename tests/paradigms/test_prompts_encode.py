"""Every prompt of this folder's paradigms goes through the real chat templates and generates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from evidra.core.types import ImagePart, Page, Sample
from evidra.models.generation import SamplingParams, generate
from evidra.paradigms import PARADIGMS

NAMES = [
    "coe",
    "coe.single",
    "coe.multi",
    "evidence",
    "toolchain",
    "toolchain.stage1",
    "cot",
    "ddcot",
    "ccot",
    "cocot",
    "vanilla",
    "tot",
    "got",
]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_every_paradigm_prompt_encodes_and_generates(
    arch: str, tiny_vlms: dict[str, Any], page_factory: Callable[..., Page]
) -> None:
    pages = (page_factory("doc-p0001"), page_factory("doc-p0002"))
    sample = Sample(id="x", question="What was revenue in 2023?", answers=("$5M",), pages=pages)
    chats = [PARADIGMS.get(name)().build_messages(sample, pages) for name in NAMES]
    for chat in chats:
        assert sum(len([p for p in m.content if isinstance(p, ImagePart)]) for m in chat) == 2
    gens = generate(tiny_vlms[arch], chats, SamplingParams(max_new_tokens=2, temperature=0.0))
    assert len(gens) == len(NAMES)
    assert all(len(g.token_ids) >= 1 for g in gens)
