"""SFT data files in TRL/OpenAI ``messages`` and LLaMA-Factory ShareGPT rows (``evidra.rl.sft.files``):
tiny files and images written by each test; the loss mask on the tiny model's processor."""

from __future__ import annotations

import base64
import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from evidra.core.errors import ConfigError
from evidra.core.types import ImagePart, Message, TextPart
from evidra.rl.sft.files import detect_format, read_sft_data


def _png(path: Path, size: tuple[int, int] = (32, 24), color: str = "red") -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path


def _data_url(size: tuple[int, int]) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, "blue").save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def _shape(conversation: tuple[Message, ...]) -> list[tuple[str, list[str]]]:
    """Each turn as (role, parts), an image part as 'img:<file name>' or 'img:<w>x<h>'."""

    def part(p: Any) -> str:
        if isinstance(p, TextPart):
            return p.text
        assert isinstance(p, ImagePart)
        return (
            f"img:{Path(p.image).name}"
            if isinstance(p.image, str)
            else f"img:{p.image.size[0]}x{p.image.size[1]}"
        )

    return [(m.role, [part(p) for p in m.content]) for m in conversation]


def test_messages_rows_fill_placeholders_in_order_and_read_every_image_source(tmp_path: Path) -> None:
    _png(tmp_path / "a.png")
    _png(tmp_path / "imgs" / "b.png")
    _png(tmp_path / "c.png")
    row = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}, {"type": "image"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "A square."}]},
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": "c.png"},
                    {"type": "image_url", "image_url": {"url": _data_url((5, 7))}},
                    {"type": "image_url", "image_url": {"url": "file://imgs/b.png"}},
                ],
            },
            {"role": "assistant", "content": "Three."},
        ],
        "images": ["imgs/b.png", "a.png"],
    }
    data = read_sft_data(_write(tmp_path / "d.jsonl", [row]))
    assert (data.format, data.rows, data.skipped) == ("messages", 1, 0)
    assert _shape(data.conversations[0]) == [
        ("system", ["Be brief."]),
        ("user", ["img:b.png", "What is it?", "img:a.png"]),
        ("assistant", ["A square."]),
        ("user", ["img:c.png", "img:5x7", "img:b.png"]),
        ("assistant", ["Three."]),
    ]
    first = data.conversations[0][1].content[0]
    assert isinstance(first, ImagePart) and first.image == str((tmp_path / "imgs" / "b.png").absolute())


def test_sharegpt_rows_split_image_tokens_and_map_llamafactory_roles(tmp_path: Path) -> None:
    _png(tmp_path / "p1.png")
    _png(tmp_path / "p2.png")
    rows = [
        {
            "conversations": [
                {"from": "human", "value": "<image>What does it show?"},
                {"from": "gpt", "value": "A chart."},
                {"from": "human", "value": "And this<image>one?"},
                {"from": "function_call", "value": '{"name": "zoom"}'},
                {"from": "observation", "value": "zoomed"},
                {"from": "gpt", "value": "A table."},
            ],
            "system": "You read documents.",
            "images": ["p1.png", "p2.png"],
        },
        {
            "conversations": [
                {"from": "system", "value": "Turn system."},
                {"from": "human", "value": "Hi"},
                {"from": "gpt", "value": "Hello"},
            ],
            "system": "Column system.",
        },
    ]
    data = read_sft_data(_write(tmp_path / "s.jsonl", rows))
    assert (data.format, len(data.conversations), data.skipped) == ("sharegpt", 2, 0)
    assert _shape(data.conversations[0]) == [
        ("system", ["You read documents."]),
        ("user", ["img:p1.png", "What does it show?"]),
        ("assistant", ["A chart."]),
        ("user", ["And this", "img:p2.png", "one?"]),
        ("assistant", ['{"name": "zoom"}']),
        ("user", ["zoomed"]),
        ("assistant", ["A table."]),
    ]
    # LLaMA-Factory: a first system turn overrides the system column
    assert _shape(data.conversations[1])[0] == ("system", ["Turn system."])


def test_format_detection_per_file() -> None:
    trl = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}
    openai_sharegpt = {"messages": [{"role": "user", "content": "<image>x"}], "images": ["a.png"]}
    plain = {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}
    evidra_row = {"id": "1", "accepted": True, "prompt": [], "response": "y"}
    assert detect_format([trl]) == "messages"
    assert detect_format([openai_sharegpt]) == "sharegpt"
    assert detect_format([plain, plain]) == "messages"  # text-only: both read it alike
    assert detect_format([plain, openai_sharegpt]) == "sharegpt"  # a later row decides
    assert detect_format([evidra_row]) == "evidra"
    with pytest.raises(
        ConfigError, match=r"cannot tell the format .*first row's keys: instruction, output\)"
    ):
        detect_format([{"instruction": "x", "output": "y"}], "alpaca.jsonl")


def test_bad_rows_are_skipped_with_one_warning_naming_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dataset = tmp_path / "set"
    _png(dataset / "ok.png")
    _png(tmp_path / "outside.png")

    def row(value: str, images: list[str], *, reply: bool = True) -> dict[str, Any]:
        turns = [{"from": "human", "value": value}] + ([{"from": "gpt", "value": "y"}] if reply else [])
        return {"conversations": turns, "images": images}

    rows: list[Any] = [
        row("<image>ok", ["ok.png"]),  # line 1: kept
        row("<image><image>two", ["ok.png"]),  # 2: 2 placeholders, 1 image
        row("<image>gone", ["missing.png"]),  # 3: no such file
        row("no reply", [], reply=False),  # 4: no assistant turn
        row("<image>escape", ["../outside.png"]),  # 5: leaves the dataset folder
        row("<image>absolute", [str(tmp_path / "outside.png")]),  # 6: absolute, outside
        row("<image>remote", ["https://example.com/a.png"]),  # 7: never downloaded
        {"conversations": [{"from": "gpt", "value": "y"}, {"from": "human", "value": "x"}]},  # 8: out of turn
        "",  # blank lines are no rows
        row("no image", []),  # 10: kept
    ]
    path = _write(dataset / "mix.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="evidra.rl.sft.files"):
        data = read_sft_data(path)
    assert (len(data.conversations), data.rows, data.skipped) == (2, 9, 7)
    lines = [r.getMessage() for r in caplog.records]
    assert [int(m.split(" line ")[1].split()[0]) for m in lines] == [2, 3, 4, 5, 6, 7, 8]
    assert all(m.startswith(f"{path} line ") for m in lines)
    reasons = "\n".join(lines)
    for expected in (
        "2 <image> placeholders but 1 images",
        "missing.png' does not exist",
        "no assistant turn",
        "'../outside.png' points outside the dataset folder",
        "outside.png' points outside",
        "is remote",
        "turn 1 is 'gpt'",
    ):
        assert expected in reasons
    assert data.summary() == f"{path} (sharegpt): 2 conversations from 9 rows, 7 skipped"


def test_messages_placeholder_count_and_assistant_images_are_checked(tmp_path: Path) -> None:
    _png(tmp_path / "a.png")
    user = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "q"}]}
    rows = [
        {"messages": [user, {"role": "assistant", "content": "a"}], "images": []},
        {"messages": [user, {"role": "assistant", "content": "a"}], "images": ["a.png", "a.png"]},
        {
            "messages": [user, {"role": "assistant", "content": [{"type": "image", "image": "a.png"}]}],
            "images": ["a.png"],
        },
        {"messages": [user, {"role": "assistant", "content": "a"}], "images": ["a.png"]},
    ]
    data = read_sft_data(_write(tmp_path / "m.jsonl", rows))
    assert (len(data.conversations), data.skipped) == (1, 3)


def test_a_file_with_nothing_to_train_on_is_one_error(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "x.jsonl",
        [{"conversations": [{"from": "human", "value": "<image>q"}, {"from": "gpt", "value": "a"}]}],
    )
    with pytest.raises(ConfigError, match=r"no row to train on as 'sharegpt' data .* 1 skipped"):
        read_sft_data(path)
    with pytest.raises(ConfigError, match=r"line 2 is not JSON"):
        read_sft_data(_write(tmp_path / "y.jsonl", [{"messages": []}, "{not json"]))
    rejected = _write(tmp_path / "r.jsonl", [{"id": "a", "accepted": False, "prompt": [], "response": "x"}])
    with pytest.raises(ConfigError, match="no accepted trajectory"):
        read_sft_data(rejected)


def test_a_named_format_overrides_detection(tmp_path: Path) -> None:
    """A text-only messages file read as ShareGPT keeps a literal '<image>' out of it: the
    placeholder count (1) differs from the images (0), so the row is skipped."""
    row = {
        "messages": [{"role": "user", "content": "<image> is a tag"}, {"role": "assistant", "content": "ok"}]
    }
    path = _write(
        tmp_path / "t.jsonl",
        [row, {**row, "messages": [row["messages"][0] | {"content": "q"}, row["messages"][1]]}],
    )
    assert read_sft_data(path, "sharegpt").skipped == 1
    assert detect_format([row]) == "sharegpt"
    as_messages = read_sft_data(path, "messages")
    assert as_messages.skipped == 0 and as_messages.conversations[0][0].plain_text == "<image> is a tag"


def test_loss_mask_covers_every_assistant_turn_and_nothing_else(
    tmp_path: Path, tiny_vlms: dict[str, Any]
) -> None:
    from evidra.rl.sft.finetune import make_example

    _png(tmp_path / "p.png", (56, 56))
    row = {
        "conversations": [
            {"from": "human", "value": "<image>First?"},
            {"from": "gpt", "value": "one"},
            {"from": "human", "value": "Second?"},
            {"from": "gpt", "value": "two"},
        ],
        "images": ["p.png"],
    }
    data = read_sft_data(_write(tmp_path / "s.jsonl", [row]))
    processor = tiny_vlms["qwen2_5_vl"].processor
    example = make_example(processor, data.conversations[0])
    ids = example.context.token_ids[example.prompt_len :]
    learned = [t for t, m in zip(ids, example.loss_mask, strict=True) if m]
    # each assistant turn's text and its closing <|im_end|>; prompt, image and user tokens are not
    assert processor.tokenizer.decode(learned) == "one<|im_end|>two<|im_end|>"


def test_the_documented_example_rows_are_detected_as_their_formats() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    section = doc.split("## SFT data you already have")[1].split("\n## ")[0]
    rows = [json.loads(block.split("\n")[0]) for block in section.split("```json\n")[1:]]
    assert [detect_format([row]) for row in rows] == ["messages", "sharegpt", "evidra"]


def test_images_over_the_pixel_cap_are_skipped_before_decoding(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, declared_png: Any
) -> None:
    """Six 13,000 x 13,000 data-URL images in a small file decoded to 6 GB before the cap; a
    400-megapixel one ended in PIL's DecompressionBombError traceback."""
    import time

    def url(side: int) -> str:
        return "data:image/png;base64," + base64.b64encode(declared_png(side, side)).decode()

    (tmp_path / "big.png").write_bytes(declared_png(13_000, 13_000))
    rows: list[Any] = [
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url(side)}}]},
                {"role": "assistant", "content": "blank"},
            ]
        }
        for side in (13_000,) * 6 + (20_000,)
    ]
    rows.append(
        {
            "messages": [
                {"role": "user", "content": [{"type": "image"}]},
                {"role": "assistant", "content": "y"},
            ],
            "images": ["big.png"],
        }
    )
    rows.append({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]})
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="evidra.rl.sft.files"):
        data = read_sft_data(_write(tmp_path / "bombs.jsonl", rows))
    assert time.monotonic() - start < 5
    assert (data.rows, data.skipped, len(data.conversations)) == (9, 8, 1)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 8 and all("over the cap of 50000000 pixels" in m and "\n" not in m for m in lines)


def test_messages_rows_of_hostile_shapes_are_skipped_with_a_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reply = {"role": "assistant", "content": "a"}
    rows: list[Any] = [
        {"messages": [{"role": ["user"], "content": "q"}, reply]},  # a role that is no string
        {"messages": [{"role": "user", "content": [3]}, reply]},  # a content part that is no object
        {"messages": ["user: q", reply]},  # a message that is no object
        {"messages": [{"role": "user", "content": None}, reply]},  # content neither text nor parts
        {"messages": [{"role": "user", "content": "q"}, reply]},  # kept
    ]
    with caplog.at_level(logging.WARNING, logger="evidra.rl.sft.files"):
        data = read_sft_data(_write(tmp_path / "m.jsonl", rows), "messages")
    assert (len(data.conversations), data.skipped) == (1, 4)
    reasons = [r.getMessage().split(" skipped: ")[1] for r in caplog.records]
    assert reasons == [
        "message {'role': ['user'], 'content': 'q'} has no role of system, user, assistant or tool",
        "unsupported content part 3",
        "message 'user: q' has no role of system, user, assistant or tool",
        "message content must be a string or a list of parts, got None",
    ]
