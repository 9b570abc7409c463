"""The HTML reports' templates: shipped as package data, strict, and escaping every text a model
or a document controls (eval viewer, ``evidra ask --html``, the demo report)."""

from __future__ import annotations

import importlib.resources
from html.parser import HTMLParser
from pathlib import Path

import pytest
from jinja2 import UndefinedError
from markupsafe import escape
from PIL import Image

from evidra.core.templating import environment, render
from evidra.core.types import Box, EvidenceBox, Page, Sample

TEMPLATES = ("viewer.html.j2", "viewer.css", "demo_summary.html.j2", "eval_summary.html.j2")


def _evil(field: str) -> str:
    """A payload that breaks out of text (a script element) and of an attribute (an event handler)."""
    return f'<script>alert("{field}")</script>"onerror=alert(1) x=\'{field}'


class _Tags(HTMLParser):
    """Every start tag and attribute name of a document."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += [name for name, _ in attrs]


def _assert_only_escaped(html: str, fields: list[str]) -> None:
    for field in fields:
        assert _evil(field) not in html, field
        assert str(escape(_evil(field))) in html, f"{field} is not shown (escaped) in the report"
    parsed = _Tags()
    parsed.feed(html)
    assert "script" not in parsed.tags
    assert not [a for a in parsed.attributes if a.startswith("on") or a.startswith("x")]
    assert '"onerror=' not in html and "<script" not in html


def test_templates_ship_as_package_data() -> None:
    folder = importlib.resources.files("evidra") / "templates"
    for name in TEMPLATES:
        assert (folder / name).is_file(), name
        assert environment().get_template(name).filename is not None
    assert {n for n in TEMPLATES if n.endswith(".j2")} == {
        p.name for p in folder.iterdir() if p.name.endswith(".j2")
    }


def test_environment_escapes_and_refuses_undefined_names() -> None:
    env = environment()
    assert env is environment()  # one shared environment
    assert env.from_string("{{ x }}").render(x='<b a="1">') == "&lt;b a=&#34;1&#34;&gt;"
    with pytest.raises(UndefinedError, match="title"):
        render("viewer.html.j2", preamble="", cards=[], thumbnails=False)


def _image(tmp_path: Path) -> str:
    path = tmp_path / "page.png"
    Image.new("RGB", (200, 100), "white").save(path)
    return str(path)


def test_eval_viewer_escapes_every_field(tmp_path: Path) -> None:
    from evidra.eval.report import RunResult, write_report
    from evidra.eval.sample_scoring import Prediction, StepBox
    from evidra.eval.tables import ResultRow

    page = Page(_evil("page id"), _image(tmp_path), 200, 100, source=_evil("doc name"))
    sample = Sample(
        _evil("sample id"),
        _evil("question"),
        (_evil("gold"),),
        pages=(page,),
        gold_boxes=(EvidenceBox(page.id, Box(10, 10, 50, 30)),),
    )
    pred = Prediction(
        sample.id,
        (_evil("output"),),
        _evil("answer"),
        answer_page=0,
        answer_box=(12.0, 11.0, 48.0, 29.0),
        steps=(StepBox(_evil("step text"), 0, (0.0, 0.0, 100.0, 50.0)),),
        errors=(_evil("error"),),
        scores={_evil("metric"): 1.0},
    )
    row = ResultRow(_evil("bench"), "coe", _evil("model"), 1, {"exact_match": 1.0})
    write_report([RunResult(row, (sample,), (pred,))], tmp_path / "out", title=_evil("title"))
    html = (tmp_path / "out" / "viewer.html").read_text()
    fields = ["page id", "sample id", "question", "gold", "output", "answer", "step text", "error"]
    _assert_only_escaped(html, [*fields, "metric", "bench", "model", "title"])


def test_ask_html_escapes_every_field(tmp_path: Path) -> None:
    from evidra.rag import Answer, Citation
    from evidra.rag_view import write_html
    from evidra.retrieval.interfaces import Hit

    page = Page(_evil("page id"), _image(tmp_path), 200, 100, source=_evil("doc name"))
    step = Citation(1, _evil("step text"), page.id, 0, Box(10, 10, 50, 30), 0.5, False, _evil("reason"))
    answer = Answer(
        _evil("question"),
        _evil("answer"),
        (step,),
        None,
        (page,),
        (Hit(page.id, 1.0),),
        (_evil("index"),),
        _evil("output"),
        (),
        "eos",
    )
    html = write_html(answer, tmp_path / "answer.html").read_text()
    assert "data:image/png;base64," in html  # self-contained
    fields = ["page id", "step text", "reason", "question", "answer", "index", "output"]
    _assert_only_escaped(html, fields)
    # pages are cited by the file name (the source's last path part), escaped like the rest
    assert page.file_name == "script>\"onerror=alert(1) x='doc name"
    assert f"{escape(page.file_name)} p. 1" in html and page.file_name not in html


def test_demo_report_escapes_every_field(tmp_path: Path) -> None:
    from evidra.core.types import Parsed, Step
    from evidra.demo.summary import HeldOutPages, ModelAnswers, write_demo_report

    page = Page(_evil("page id"), _image(tmp_path), 200, 100, source=_evil("doc name"))
    sample = Sample("s1", _evil("question"), (_evil("gold"),), pages=(page,), gold_pages=(page.id,))
    text = f"<think>{_evil('step text')}</think><answer>{_evil('answer')}</answer>"
    parsed = Parsed(
        text,
        _evil("answer"),
        (Step(_evil("step text"), 0, Box(1, 1, 9, 9)),),
        answer_box=Box(2, 2, 8, 8),
        answer_page=0,
        errors=(_evil("error"),),
    )
    answers = ModelAnswers(_evil("model"), (parsed,), (False,), ("eos",))
    held = {_evil("stage"): {"reward": 0.5, "components": {_evil("component"): 0.25}, "samples": 2}}
    training = {
        "sft_steps": 3,
        "train_questions": 1,
        "rl_steps": 2,
        "held_out": held,
        "sft_loss": [2.0, 1.0],
        "rl_reward": [0.1, 0.2],
    }
    path = tmp_path / "report.html"
    held_out = HeldOutPages((sample,), (answers,), measured=2)  # a held-out section, its note too
    write_demo_report(
        path,
        [sample],
        [answers],
        {},
        model_name=_evil("model name"),
        training=training,
        given_model=False,
        held_out=held_out,
    )
    html = path.read_text()
    assert 'title="cited by step 1"' in html and 'title="cited by the answer"' in html
    assert 'class="section-note"' in html
    fields = ["doc name", "question", "gold", "step text", "answer", "error", "model", "model name"]
    _assert_only_escaped(html, [*fields, "stage", "component"])
