"""LAT trains on a named synthetic suite (``data.synthetic``) whose samples it can cite."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidra.core.errors import ConfigError
from evidra.methods import build_task
from evidra.rl.run_config import DataConfig
from evidra.rl.tasks import task_samples


def test_lat_takes_the_reading_suite_with_boxes_and_words(tmp_path: Path) -> None:
    task = build_task({"name": "lat"})
    samples = task_samples(task, DataConfig(path=str(tmp_path), size=5, seed=2, synthetic=("reading",)))
    assert len(samples) == 5
    assert all(s.gold_boxes and s.pages[0].words for s in samples)
    assert task.oracle is not None  # an SFT cold start on these samples exists
    assert "So the answer is" in task.oracle(samples[0])[-1].plain_text


def test_lat_refuses_a_suite_without_answer_boxes(tmp_path: Path) -> None:
    task = build_task({"name": "lat"})
    data = DataConfig(path=str(tmp_path), size=2, seed=0, synthetic=("tunnel.chain",))
    with pytest.raises(ConfigError, match="no sample with a gold answer box"):
        task_samples(task, data)
