from __future__ import annotations

from pathlib import Path

import torch

from evidra.core.types import Message
from evidra.models.adapters import LoraSpec, apply_lora, merge_lora, trainable_parameter_names
from evidra.models.generation import forward_logprobs, teacher_forcing_batch
from evidra.models.loading import load_vlm


def test_lora_step_changes_only_adapter_weights(tiny_dirs: dict[str, Path]) -> None:
    torch.manual_seed(0)
    vlm = apply_lora(load_vlm(tiny_dirs["qwen2_5_vl"]), LoraSpec(r=4, alpha=8))
    names = trainable_parameter_names(vlm.model)
    assert names and all("lora_" in n for n in names)
    assert not any("visual" in n for n in names), "the vision tower must stay frozen"
    before = {n: p.detach().clone() for n, p in vlm.model.named_parameters()}

    chat = [Message.text("user", "What year was the Orion project founded?")]
    completion = vlm.tokenizer.encode("It was founded in 1987.")
    inputs, ids, mask = teacher_forcing_batch(vlm, [chat], [completion])
    vlm.model.train()
    opt = torch.optim.AdamW([p for p in vlm.model.parameters() if p.requires_grad], lr=1e-2)
    loss = -(forward_logprobs(vlm.model, inputs, ids) * mask).sum() / mask.sum()
    loss.backward()
    opt.step()

    changed = {n for n, p in vlm.model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert changed, "the step must change something"
    assert changed <= set(names), f"non-adapter weights changed: {sorted(changed - set(names))[:3]}"
    assert any("lora_B" in n for n in changed)  # B starts at zero, so a real update moves it

    vlm.model.eval()
    with torch.no_grad():
        adapted = forward_logprobs(vlm.model, inputs, ids)
        merged = merge_lora(vlm)
        after_merge = forward_logprobs(merged.model, inputs, ids)
    assert torch.allclose(adapted, after_merge, atol=1e-4)
