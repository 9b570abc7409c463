"""``evidra train sft --data FILE`` on TRL messages, LLaMA-Factory ShareGPT and evidra rows: two
steps each on the tiny model, with images the test writes beside the file."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import main

TINY = [
    "model.path=tiny:qwen2_5_vl",
    "model.min_pixels=3136",
    "model.max_pixels=12544",
    "run.steps=2",
    "run.batch_size=1",
    "run.micro_batch_size=1",
]


def _rows(folder: Path, fmt: str) -> list[dict[str, Any]]:
    from PIL import Image

    for name, color in (("a.png", "red"), ("b.png", "green")):
        Image.new("RGB", (56, 56), color).save(folder / name)
    if fmt == "messages":
        turn = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Colour?"}]}
        return [
            {"messages": [turn, {"role": "assistant", "content": "red"}], "images": ["a.png"]},
            {"messages": [turn, {"role": "assistant", "content": "green"}], "images": ["b.png"]},
        ]
    if fmt == "sharegpt":
        return [
            {
                "conversations": [
                    {"from": "human", "value": "<image>Colour?"},
                    {"from": "gpt", "value": "red"},
                    {"from": "human", "value": "Sure?"},
                    {"from": "gpt", "value": "yes"},
                ],
                "images": ["a.png"],
                "system": "Answer in one word.",
            },
            {
                "conversations": [
                    {"from": "human", "value": "<image><image>Two?"},
                    {"from": "gpt", "value": "x"},
                ],
                "images": ["b.png"],
            },  # 2 placeholders, 1 image: skipped
        ]
    prompt = [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": str(folder / "a.png")},
                {"type": "text", "text": "Colour?"},
            ],
        }
    ]
    return [
        {"id": "1", "accepted": True, "prompt": prompt, "response": "red"},
        {"id": "2", "accepted": False, "prompt": prompt, "response": "blue"},
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "summary"),
    [
        ("messages", "(messages): 2 conversations from 2 rows, 0 skipped"),
        ("sharegpt", "(sharegpt): 1 conversations from 2 rows, 1 skipped"),
        ("evidra", "(evidra): 1 conversations from 2 rows, 0 skipped, 1 not accepted"),
    ],
)
def test_train_sft_on_each_data_format(
    tmp_path: Path, fmt: str, summary: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data" / "train.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows(data.parent, fmt)))
    run = tmp_path / "run"
    assert main(["-q", "train", "sft", "--data", str(data), *TINY, f"run.output_dir={run}"]) == 0
    assert f"data: {data} {summary}" in capsys.readouterr().out
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(math.isfinite(m["loss"]) and m["loss"] > 0 and m["tokens"] > 0 for m in metrics)
    # ShareGPT's kept row has two assistant turns, "red" and "yes", each two tokens of the tiny
    # tokenizer ("re" "d", "ye" "s") and its <|im_end|>: 6 learned tokens; the prompt's are not
    if fmt == "sharegpt":
        assert metrics[0]["tokens"] == 6


def test_data_format_is_checked_before_anything_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}]}) + "\n")
    argv = ["-q", "train", "sft", *TINY, f"run.output_dir={tmp_path / 'run'}"]
    assert main([*argv, "--data-format", "messages"]) == 2
    assert "--data-format names the format of --data FILE" in capsys.readouterr().err
    assert main([*argv, "--data", str(data), "data.trajectories_format=sharegtp"]) == 2
    assert "did you mean 'sharegpt'" in capsys.readouterr().err
    assert main([*argv, "--data", str(data), "--data-format", "sharegpt"]) == 2
    assert "no row to train on as 'sharegpt' data" in capsys.readouterr().err
    assert [r.getMessage().split(" line 1 skipped: ")[1][:23] for r in caplog.records] == [
        "no assistant turn to le"
    ]
