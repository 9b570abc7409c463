"""What the transformers objects evidra holds are, for annotations.

A loaded policy is a transformers model (or a PEFT wrapper around one) with a processor: a
Qwen-VL processor, or ``TextProcessor`` around a text-only LM's tokenizer. Naming the real classes
says which object a function takes; transformers and peft are imported here only while type
checking, so importing evidra stays light. mypy reads their API loosely (the overrides in
``pyproject.toml``), so what it checks is evidra's own side of the union (``TextProcessor``).

    def decode(tokenizer: Tokenizer, ids: Sequence[int]) -> str: ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from peft import PeftModel
    from torch import Tensor
    from transformers import (
        BatchEncoding,
        Cache,
        PretrainedConfig,
        PreTrainedModel,
        PreTrainedTokenizerBase,
        ProcessorMixin,
    )

    from evidra.models.processors import TextProcessor

HFModel: TypeAlias = "PreTrainedModel | PeftModel"  # a policy, a reference model, an encoder
ModelConfig: TypeAlias = "PretrainedConfig"
Tokenizer: TypeAlias = "PreTrainedTokenizerBase"
Processor: TypeAlias = "ProcessorMixin | TextProcessor"  # what ``VLM.processor`` holds
Encoding: TypeAlias = "BatchEncoding"  # a processor's or tokenizer's output: input_ids, attention_mask...
KVCache: TypeAlias = "Cache"  # the key/value cache a forward takes and returns
ModelInputs: TypeAlias = "dict[str, Tensor]"  # keyword tensors of a forward: input_ids, pixel_values...
