"""Pages go to an OpenAI-compatible server at the resolution the model's family expects, and a box
written in pixels of the image as sent lands on the right words of the stored page (against the
scripted loopback server of tests/scripted_vlm.py)."""

from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import evidra.openai.client as openai_client
from evidra.cli.main import main
from evidra.core.geometry import iou as box_iou
from evidra.core.types import Box, Page
from evidra.corpus import PageStore
from evidra.data.synth.documents import generate_documents
from evidra.rag import RAG
from scripted_vlm import Reply, scripted_vlm


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated page at 200 dpi, whose long side is past the 2048 pixels of an unknown family."""
    root = tmp_path_factory.mktemp("endpoint-images")
    corpus = generate_documents(root / "gen", n_docs=1, seed=5, dpi=200, max_pages=1)
    assert main(["-q", "ingest", str(corpus.docs_dir), "--store", str(root / "store"), "--dpi", "200"]) == 0
    return root / "store"


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_client, "retry_delay", lambda *args: 0.0)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def first_page(store: Path) -> Page:
    with PageStore.open(store) as opened:
        return opened.pages()[0]


def by_hand(model_name: str, width: int, height: int) -> tuple[int, int]:
    """The size each family expects, worked out by hand (every page here is far under the families'
    pixel maxima, so the resize only rounds): Qwen2/2.5-VL sides to multiples of 28, Qwen3-VL of 32,
    any other family the long side cut to 2048."""
    factor = {
        "Qwen/Qwen2.5-VL-7B-Instruct": 28,
        "Qwen/Qwen2-VL-7B-Instruct": 28,
        "Qwen/Qwen3-VL-8B-Instruct": 32,
    }
    if model_name in factor:
        f = factor[model_name]
        return round(width / f) * f, round(height / f) * f
    scale = 2048 / max(width, height)
    return round(width * scale), round(height * scale)


def sent_sizes(body: dict[str, Any]) -> list[tuple[int, int]]:
    """The (w, h) of every image in a recorded request body."""
    sizes = []
    for message in body["messages"]:
        for part in message["content"]:
            if part["type"] == "image_url":
                data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                sizes.append(Image.open(io.BytesIO(data)).size)
    return sizes


def answer_citing(word_box: Box, page: Page, sent: tuple[int, int]) -> str:
    """A structured answer whose step cites ``word_box`` in pixels of the page as sent at ``sent``."""
    sx, sy = sent[0] / page.width, sent[1] / page.height
    box = [word_box.x1 * sx, word_box.y1 * sy, word_box.x2 * sx, word_box.y2 * sy]
    return json.dumps({"answer": "x", "steps": [{"text": "a fact", "page": 1, "box": box}]})


@pytest.mark.parametrize(
    "model_name",
    ["Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct", "my-vlm"],
)
def test_the_server_receives_the_page_at_its_family_s_resolution(store: Path, model_name: str) -> None:
    page = first_page(store)
    assert max(page.width, page.height) > 2048
    reply = json.dumps({"answer": "x", "steps": []})
    with (
        scripted_vlm(Reply(reply)) as server,
        RAG.load(store, endpoint=server.url, model_name=model_name) as rag,
    ):
        rag.ask("What is on the page?", pages=[page.id])
    (size,) = sent_sizes(server.requests[0]["body"])
    assert size == by_hand(model_name, page.width, page.height)
    assert size != (page.width, page.height)


@pytest.mark.parametrize(
    ("model_name", "box_format"), [("Qwen/Qwen2.5-VL-7B-Instruct", None), ("my-vlm", "pixels")]
)
def test_a_box_in_pixels_of_the_image_sent_lands_on_its_word(
    store: Path, model_name: str, box_format: str | None
) -> None:
    """Qwen2.5-VL writes pixels of the image after its resize, which is the image sent; ``pixels``
    is the image as sent, here 2048 pixels high instead of the page's 2200."""
    page = first_page(store)
    word = max(page.words, key=lambda w: w.box.y2)  # the lowest word: where a wrong scale lands furthest off
    sent = by_hand(model_name, page.width, page.height)
    with (
        scripted_vlm(Reply(answer_citing(word.box, page, sent))) as server,
        RAG.load(store, endpoint=server.url, model_name=model_name, box_format=box_format) as rag,
    ):
        answer = rag.ask("What is on the page?", pages=[page.id])
    assert sent_sizes(server.requests[0]["body"]) == [sent]
    (step,) = answer.steps
    assert step.box is not None and box_iou(step.box, word.box) > 0.9, (step.box, word.box)
    assert all(
        math.isclose(a, b, abs_tol=1.0) for a, b in zip(step.box.as_tuple(), word.box.as_tuple(), strict=True)
    )
