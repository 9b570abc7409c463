"""Answers made by an OpenAI-compatible VLM server (``RAG.load(endpoint=..., model_name=...)``),
against the scripted loopback server of tests/scripted_vlm.py: a structured answer whose box,
written in each family's convention, lands on its word; malformed JSON shown as what it is; a
reply cut off mid-body retried; a server refusing ``response_format`` asked again without it; the
key read from the environment only and sent only to the endpoint."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import evidra.openai.client as openai_client
from evidra.cli.main import main
from evidra.core.box_formats import box_format_for
from evidra.core.errors import ConfigError, EvidraError, InvalidInputError
from evidra.core.geometry import iou as box_iou
from evidra.core.types import Box, Page
from evidra.corpus import PageStore
from evidra.data.synth.documents import generate_documents
from evidra.rag import RAG
from scripted_vlm import Reply, scripted_vlm

KEY = "sk-endpoint-0123456789"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two pages of a generated PDF (425 x 550 pixels at 50 dpi) with their words."""
    root = tmp_path_factory.mktemp("endpoint-answers")
    corpus = generate_documents(root / "gen", n_docs=1, seed=5, dpi=50)
    assert main(["-q", "ingest", str(corpus.docs_dir), "--store", str(root / "store"), "--dpi", "50"]) == 0
    return root / "store"


@pytest.fixture(autouse=True)
def _no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries without their backoff (the retry policy is tested in tests/test_openai_client.py)."""
    monkeypatch.setattr(openai_client, "retry_delay", lambda *args: 0.0)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def second_page(store: Path) -> Page:
    with PageStore.open(store) as opened:
        return opened.pages()[1]


def written(family_format: str, box: Box, page: Page) -> list[float]:
    """``box`` (page pixels) as a model of ``family_format``'s convention writes it, by hand."""
    w, h = page.width, page.height
    if family_format == "qwen2.5-vl":  # pixels of the image after smart_resize (multiples of 28)
        sw, sh = box_format_for(None, None, family_format).seen_size((w, h))
        return [box.x1 * sw / w, box.y1 * sh / h, box.x2 * sw / w, box.y2 * sh / h]
    unit = {"qwen2-vl": 1000, "qwen3-vl": 1000, "norm1000": 1000, "gemini": 1000, "molmo": 100, "norm1": 1}
    x1, y1, x2, y2 = (v * unit[family_format] for v in (box.x1 / w, box.y1 / h, box.x2 / w, box.y2 / h))
    return [y1, x1, y2, x2] if family_format == "gemini" else [x1, y1, x2, y2]


def structured(text: str, page: int | str, box: list[float], answer: str | None = "Polaris") -> str:
    return json.dumps({"answer": answer, "steps": [{"text": text, "page": page, "box": box}]})


FAMILIES = [
    ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2.5-vl"),
    ("Qwen/Qwen2-VL-7B-Instruct", "qwen2-vl"),
    ("Qwen/Qwen3-VL-8B-Instruct", "qwen3-vl"),
    ("OpenGVLab/InternVL3-8B", "norm1000"),
    ("gemini-2.0-flash", "gemini"),
    ("allenai/Molmo-7B-D-0924", "molmo"),
    ("llava-hf/llava-1.5-7b-hf", "norm1"),
]


@pytest.mark.parametrize(("model_name", "family_format"), FAMILIES)
def test_a_structured_box_of_each_family_lands_on_its_word(
    store: Path, model_name: str, family_format: str
) -> None:
    page = second_page(store)
    word = page.words[5]
    reply = structured(word.text, 2, written(family_format, word.box, page))
    first = second_page_neighbour(store)
    with (
        scripted_vlm(Reply(reply)) as server,
        RAG.load(store, endpoint=server.url, model_name=model_name) as rag,
    ):
        answer = rag.ask("Which star?", pages=[first.id, page.id])
        assert rag.box_format.name == family_format
    (step,) = answer.steps
    assert answer.parsed and answer.text == "Polaris" and answer.errors == ()
    assert (step.page_id, step.file, step.page_number) == (page.id, page.file_name, page.page_number)
    assert step.box is not None and box_iou(step.box, word.box) > 0.9, (step.box, word.box)
    body = server.requests[0]["body"]
    assert body["model"] == model_name and body["response_format"]["type"] == "json_schema"
    images = [p for p in body["messages"][0]["content"] if p["type"] == "image_url"]
    assert len(images) == 2 and images[0]["image_url"]["url"].startswith("data:image/png;base64,")


def second_page_neighbour(store: Path) -> Page:
    with PageStore.open(store) as opened:
        return opened.pages()[0]


def test_malformed_json_is_shown_as_what_it_is(store: Path) -> None:
    page = second_page(store)
    cut = structured("a step", 1, [1, 2, 3, 4])[:40]
    with scripted_vlm(Reply(cut)) as server, RAG.load(store, endpoint=server.url, model_name="m") as rag:
        answer = rag.ask("Which star?", pages=[page.id])
    assert not answer.parsed and answer.text is None and answer.steps == ()
    assert answer.output == cut and answer.errors[0].startswith("the answer is not JSON")


def test_a_reply_cut_mid_body_and_a_500_are_retried(store: Path) -> None:
    page = second_page(store)
    good = structured("a step", 1, [100, 100, 200, 200])
    replies = (Reply(good, cut=True), Reply(status=500, error="overloaded"), Reply(good))
    with scripted_vlm(*replies) as server, RAG.load(store, endpoint=server.url, model_name="m") as rag:
        answer = rag.ask("Which star?", pages=[page.id])
    assert answer.parsed and len(server.requests) == 3


def test_a_500_that_persists_is_one_error_naming_the_endpoint(store: Path) -> None:
    page = second_page(store)
    with (
        scripted_vlm(Reply(status=500, error="overloaded")) as server,
        RAG.load(store, endpoint=server.url, model_name="m") as rag,
        pytest.raises(openai_client.ChatUnavailableError, match="overloaded") as failed,
    ):
        rag.ask("Which star?", pages=[page.id])
    assert server.url in str(failed.value) and "\n" not in str(failed.value)


def test_a_server_refusing_response_format_is_asked_again_without_it_once(
    store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    page = second_page(store)
    reply = Reply(structured("a step", 1, [100, 100, 200, 200]), refuse_schema=True)
    with (
        scripted_vlm(reply) as server,
        RAG.load(store, endpoint=server.url, model_name="m") as rag,
        caplog.at_level(logging.WARNING, logger="evidra.models.endpoint"),
    ):
        first = rag.ask("Which star?", pages=[page.id])
        second = rag.ask("Which star again?", pages=[page.id])
    assert first.parsed and second.parsed
    sent = ["response_format" in r["body"] for r in server.requests]
    assert sent == [True, False, False]  # refused once, then never sent again
    (line,) = [r.getMessage() for r in caplog.records if "response_format" in r.getMessage()]
    assert server.url in line and "not supported" in line


def test_no_structured_reads_the_paradigm_format_and_its_page_boxes_stay(store: Path) -> None:
    page = second_page(store)
    word = page.words[3]
    coords = ", ".join(str(round(c)) for c in word.box.as_tuple())
    cite = f'Bounding box: {{"bbox_2d": [{coords}], "Image_index": 1}}'
    coe = f"<think>It says so. {cite}</think><answer>Polaris</answer>"
    with scripted_vlm(Reply(coe)) as server:
        with RAG.load(
            store, endpoint=server.url, model_name="Qwen/Qwen2-VL-7B-Instruct", structured=False
        ) as rag:
            answer = rag.ask("Which star?", pages=[page.id])
        assert "response_format" not in server.requests[0]["body"]
        (step,) = answer.steps
        assert answer.text == "Polaris" and step.box is not None
        assert step.box.as_tuple() == tuple(round(c) for c in word.box.as_tuple())  # as written
        # named by the user, a box format applies to the page-pixel boxes too (0-1000 here: elsewhere)
        with RAG.load(
            store, endpoint=server.url, model_name="m", structured=False, box_format="norm1000"
        ) as rag:
            (moved,) = rag.ask("Which star?", pages=[page.id]).steps
        assert moved.box is not None and box_iou(moved.box, word.box) < 0.5


def test_a_box_that_cannot_be_placed_is_dropped_with_its_reason(store: Path) -> None:
    page = second_page(store)
    with (
        scripted_vlm(Reply(structured("far away", 1, [10, 10, 5000, 20]))) as server,
        RAG.load(store, endpoint=server.url, model_name="Qwen/Qwen3-VL-8B-Instruct") as rag,
    ):
        answer = rag.ask("Which star?", pages=[page.id])
    (step,) = answer.steps
    assert answer.parsed and step.box is None and step.page_id == page.id
    (error,) = answer.errors
    assert error.startswith("step 1: box (10, 10, 5000, 20) lies outside"), error


def test_the_key_comes_from_the_named_variable_only_and_goes_to_the_endpoint_only(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    page = second_page(store)
    good = Reply(structured("a step", 1, [100, 100, 200, 200]))
    for planted in (tmp_path / ".env", tmp_path / "openai_api_key", tmp_path / ".openai"):
        planted.write_text(f"OPENAI_API_KEY={KEY}\n")  # a key in a file is never read
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    with scripted_vlm(good) as server, RAG.load(store, endpoint=server.url, model_name="m") as rag:
        rag.ask("Which star?", pages=[page.id])
    assert server.requests[0]["authorization"] is None

    monkeypatch.setenv("OPENAI_API_KEY", "sk-default-not-this-one")
    monkeypatch.setenv("MY_VLM_KEY", KEY)
    with (
        caplog.at_level(logging.DEBUG),
        scripted_vlm(good) as server,
        RAG.load(store, endpoint=server.url, model_name="m", api_key_env="MY_VLM_KEY") as rag,
    ):
        answer = rag.ask("Which star?", pages=[page.id])
    assert [r["authorization"] for r in server.requests] == [f"Bearer {KEY}"]
    assert KEY not in repr(answer) and KEY not in caplog.text


def test_the_model_is_checked_before_the_store_opens(tmp_path: Path) -> None:
    missing = tmp_path / "no-store"
    with pytest.raises(InvalidInputError, match="model_name"):
        RAG.load(missing, endpoint="http://127.0.0.1:9/v1")
    with pytest.raises(InvalidInputError, match="not both"):
        RAG.load(missing, model="tiny:qwen2_5_vl", endpoint="http://127.0.0.1:9/v1", model_name="m")
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE"):
        RAG.load(missing, endpoint="http://127.0.0.1:9/v1", model_name="m", api_key_env="NOT_SET_ANYWHERE")
    with pytest.raises(EvidraError, match=r"qwen2\.5-vl"):
        RAG.load(missing, endpoint="http://127.0.0.1:9/v1", model_name="m", box_format="qwen25-vl")
    assert not missing.exists()


def test_verify_checks_structured_steps_on_their_page_boxes(store: Path) -> None:
    page = second_page(store)
    line = [w for w in page.words if abs(w.box.y1 - page.words[0].box.y1) < 1]  # the first line's words
    x1, y1 = min(w.box.x1 for w in line), min(w.box.y1 for w in line)
    x2, y2 = max(w.box.x2 for w in line), max(w.box.y2 for w in line)
    text = " ".join(w.text for w in line)
    box = [x1 * 1000 / page.width, y1 * 1000 / page.height, x2 * 1000 / page.width, y2 * 1000 / page.height]
    far = [0, 950, 40, 999]  # a corner of the page with no words
    reply = json.dumps(
        {
            "answer": "x",
            "steps": [{"text": text, "page": 1, "box": box}, {"text": text, "page": 1, "box": far}],
        }
    )
    with scripted_vlm(Reply(reply)) as server, RAG.load(store, endpoint=server.url, model_name="m") as rag:
        supported, unsupported = rag.ask("Which star?", pages=[page.id], verify=True).steps
    assert supported.supported is True and unsupported.supported is False


def test_from_documents_answers_with_an_endpoint(tmp_path: Path) -> None:
    docs = generate_documents(tmp_path / "gen", n_docs=1, seed=5, dpi=50).docs_dir
    reply = Reply(
        json.dumps({"answer": "Polaris", "steps": [{"text": "t", "page": 1, "box": [10, 10, 500, 90]}]})
    )
    with (
        scripted_vlm(reply) as server,
        RAG.from_documents(docs, endpoint=server.url, model_name="Qwen/Qwen3-VL-8B-Instruct", dpi=50) as rag,
    ):
        answer = rag.ask("What is Polaris?", k=1)
    (step,) = answer.steps
    assert answer.text == "Polaris" and answer.retrieved and step.page_id == answer.retrieved[0].page_id
    assert step.box is not None and step.file == "doc_000.pdf"
