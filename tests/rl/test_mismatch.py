from __future__ import annotations

import pytest
import torch

from evidra.core.errors import InvalidInputError
from evidra.rl.algo.mismatch import logprob_mismatch


def test_mismatch_counts_only_masked_tokens() -> None:
    sampler = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.1, 0.0]])
    trainer = torch.tensor([[-1.2, -2.0, -7.0], [-0.2, -0.1, -5.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    m = logprob_mismatch(sampler, trainer, mask)
    # |deltas| on the mask: 0.2, 0, 0.3, 0 -> mean 0.125, max 0.3 (the 4.0 and 5.0 are masked out)
    assert m.tokens == 4
    assert m.mean_abs == pytest.approx(0.125) and m.max_abs == pytest.approx(0.3)
    assert m.metrics() == {"mismatch/logp_abs_mean": m.mean_abs, "mismatch/logp_abs_max": m.max_abs}


def test_mismatch_of_an_empty_mask_is_zero_and_shapes_must_agree() -> None:
    x = torch.zeros(2, 3)
    assert logprob_mismatch(x, x - 1, torch.zeros(2, 3)).tokens == 0
    with pytest.raises(InvalidInputError, match="shapes differ"):
        logprob_mismatch(x, torch.zeros(2, 4), torch.ones(2, 3))
