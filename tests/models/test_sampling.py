"""``SamplingParams`` lives in ``evidra.models.sampling`` (below the sampling loop) and stays
importable from ``evidra.models.generation``, where callers have always imported it."""

from __future__ import annotations

import pytest

from evidra.core.errors import InvalidInputError
from evidra.models import generation, sampling


def test_generation_re_exports_the_one_sampling_params_class() -> None:
    assert generation.SamplingParams is sampling.SamplingParams


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
        ({"min_new_tokens": -1}, "min_new_tokens must be >= 0"),
        ({"temperature": -0.5}, "temperature must be >= 0"),
        ({"top_p": 1.5}, "top_p must be in"),
    ],
)
def test_a_setting_out_of_range_is_one_error_naming_it(options: dict[str, float], named: str) -> None:
    with pytest.raises(InvalidInputError, match=named):
        sampling.SamplingParams(**options)  # type: ignore[arg-type]


def test_stop_strings_are_kept_as_a_tuple_and_temperature_zero_is_greedy() -> None:
    params = sampling.SamplingParams(temperature=0, stop=["</answer>"])  # type: ignore[arg-type]
    assert (params.stop, params.greedy) == (("</answer>",), True)
