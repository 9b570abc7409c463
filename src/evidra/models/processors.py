"""Image-only Qwen-VL processors.

transformers builds a Qwen-VL processor from the sub-processors named in its ``__init__``
signature, and every Qwen-VL video processor needs torchvision, which has no CPU wheel here.
Loading a checkpoint through the stock class therefore fails ("Can't load video processor").
The subclasses below take only ``image_processor`` and ``tokenizer``, so ``from_pretrained``
loads a real checkpoint directory (``preprocessor_config.json`` with legacy ``min_pixels`` /
``max_pixels`` keys included) without touching the video side. Video input is not supported.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from evidra.errors import ModelLoadError

_BASES = {
    "qwen2_vl": "Qwen2VLProcessor",
    "qwen2_5_vl": "Qwen2_5_VLProcessor",
    "qwen3_vl": "Qwen3VLProcessor",
}


@cache
def image_only_processor_class(arch: str) -> type[Any]:
    """The processor class for ``arch`` with the video sub-processor removed."""
    import transformers

    try:
        base = getattr(transformers, _BASES[arch])
    except KeyError:
        raise ModelLoadError(
            f"no processor for architecture {arch!r}; supported: {', '.join(_BASES)}"
        ) from None

    def __init__(
        self: Any,
        image_processor: Any = None,
        tokenizer: Any = None,
        chat_template: Any = None,
        **kwargs: Any,
    ) -> None:
        # ProcessorMixin zips positional sub-processors with the attributes of *this* signature,
        # so the base's trailing ``video_processor=None`` is dropped rather than validated.
        base.__init__(self, image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    name = base.__name__.replace("Processor", "ImageOnlyProcessor")
    return type(name, (base,), {"__init__": __init__, "__module__": __name__})
