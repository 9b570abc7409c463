"""Image-only Qwen-VL processors.

transformers builds a Qwen-VL processor from the sub-processors named in its ``__init__``
signature, and every Qwen-VL video processor needs torchvision, which has no CPU wheel here.
Loading a checkpoint through the stock class therefore fails ("Can't load video processor").
The subclasses below take only ``image_processor`` and ``tokenizer``, so ``from_pretrained``
loads a real checkpoint directory (``preprocessor_config.json`` with legacy ``min_pixels`` /
``max_pixels`` keys included) without touching the video side. Video input is not supported.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evidra.core.errors import ModelLoadError

if TYPE_CHECKING:
    # transformers' own names, not models.hf_types' aliases: hf_types imports TextProcessor from here
    from transformers import BatchEncoding as Encoding
    from transformers import PreTrainedTokenizerBase as Tokenizer
    from transformers import ProcessorMixin

    from evidra.models.chat import ChatMessage

_BASES = {
    "qwen2_vl": "Qwen2VLProcessor",
    "qwen2_5_vl": "Qwen2_5_VLProcessor",
    "qwen3_vl": "Qwen3VLProcessor",
}


@cache
def image_only_processor_class(arch: str) -> type[ProcessorMixin]:
    """The processor class for ``arch`` with the video sub-processor removed."""
    import transformers

    try:
        base = getattr(transformers, _BASES[arch])
    except KeyError:
        raise ModelLoadError(
            f"no processor for architecture {arch!r}; supported: {', '.join(_BASES)}"
        ) from None

    def __init__(
        self: ProcessorMixin,
        image_processor: object = None,
        tokenizer: Tokenizer | None = None,
        chat_template: str | None = None,
        **kwargs: object,
    ) -> None:
        # ProcessorMixin zips positional sub-processors with the attributes of *this* signature,
        # so the base's trailing ``video_processor=None`` is dropped rather than validated.
        base.__init__(self, image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    name = base.__name__.replace("Processor", "ImageOnlyProcessor")
    return type(name, (base,), {"__init__": __init__, "__module__": __name__})


class TextProcessor:
    """The slice of a processor evidra uses, for a text-only causal LM (Qwen2, Qwen2.5, Qwen3).

    Contexts are built through ``processor(text=..., images=...)`` and ``apply_chat_template``
    whatever the policy; this wraps a tokenizer in that interface. Messages arrive with
    list-of-parts content; stock text chat templates print ``message['content']`` as is, so
    text parts are joined into one string first. An image is an error, not silently dropped.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def __call__(
        self, text: str | list[str] | None = None, images: Sequence[object] | None = None, **kwargs: Any
    ) -> Encoding:
        if images:
            raise ModelLoadError(
                "a text-only policy was given images; train it on a text task or load a Qwen-VL checkpoint"
            )
        return self.tokenizer(text, **kwargs)

    def apply_chat_template(self, conversation: Sequence[ChatMessage], **kwargs: Any) -> Any:
        return self.tokenizer.apply_chat_template([_flatten(m) for m in conversation], **kwargs)

    def decode(self, *args: Any, **kwargs: Any) -> str:
        return self.tokenizer.decode(*args, **kwargs)

    def save_pretrained(self, path: str | Path) -> tuple[str, ...]:
        return self.tokenizer.save_pretrained(path)


def _flatten(message: ChatMessage) -> ChatMessage:
    content = message.get("content")
    if isinstance(content, str) or content is None:
        return message
    parts = []
    for part in content:
        if part.get("type", "text") != "text":
            raise ModelLoadError(
                f"a text-only policy cannot render a {part.get('type')!r} message part; "
                "use a Qwen-VL checkpoint"
            )
        parts.append(str(part["text"]))
    return {**message, "content": "".join(parts)}
