"""Every ``evidra`` command shown in the README and the docs parses with the real CLI parser; the
README's "Ask your documents" walk-through runs as written, on generated documents and a tiny model."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import build_parser, main

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def shown_commands(text: str) -> list[str]:
    """The ``evidra ...`` lines of fenced code blocks, continuation lines joined, comments cut."""
    commands = []
    blocks = re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)  # every fence pairs, any language
    for block in (body for lang, body in blocks if lang in ("", "bash", "sh")):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("evidra ") or "-m evidra.cli.main " in line:
                commands.append(line.split("evidra.cli.main ", 1)[-1].removeprefix("evidra "))
    return commands


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_documented_commands_parse(doc: Path) -> None:
    parser = build_parser()
    for command in shown_commands(doc.read_text()):
        argv = shlex.split(command)
        try:
            args, extra = parser.parse_known_args(argv)
        except SystemExit as exc:
            raise AssertionError(f"{doc.name}: `evidra {command}` does not parse") from exc
        assert args.command == argv[0], command
        assert all("=" in e and hasattr(args, "overrides") for e in extra), f"{doc.name}: {command}: {extra}"


def test_the_readme_shows_export_and_eval_of_a_run() -> None:
    commands = shown_commands((ROOT / "README.md").read_text())
    assert any(c.startswith("export runs/") for c in commands)
    assert any(c.startswith("eval ") and "--model runs/" in c for c in commands)


def _section(text: str, heading: str) -> str:
    return text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_ask_walkthrough_runs_as_written(
    tmp_path: Path,
    tiny_dirs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/ holds generated PDFs, ckpt/Qwen2.5-VL-7B is the tiny model: then every command and
    the Python lines of the section run unchanged, in that order."""
    from evidra.data.synth.documents import generate_documents
    from evidra.rag import Answer

    section = _section((ROOT / "README.md").read_text(), "Ask your documents")
    commands = [c for c in shown_commands(section) if c.split()[0] in ("ingest", "index", "ask")]
    assert [c.split()[0] for c in commands] == ["ingest", "index", "index", "ask"]  # serve, mcp: tests/app
    generate_documents(tmp_path, n_docs=2, seed=2, dpi=50)  # writes tmp_path/docs/*.pdf
    first = sorted((tmp_path / "docs").glob("*.pdf"))[0]
    first.rename(first.with_name("report.pdf"))  # the section's file name
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "Qwen2.5-VL-7B").symlink_to(tiny_dirs["qwen2_5_vl"], target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    for command in commands:
        assert main(["-q", *shlex.split(command)]) == 0, command
        if command.startswith("index search"):
            hits = capsys.readouterr().out.split("query: Orion founded\n", 1)[1].splitlines()
            assert hits and all(" report.pdf p. " in line for line in hits), hits
    out = capsys.readouterr().out.splitlines()
    assert out[-5:-4] == ["retrieved: top 3 of idx/"] and out[-1] == "html:   answer.html"
    assert "data:image/png;base64," in (tmp_path / "answer.html").read_text()

    (python,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    namespace: dict[str, Any] = {}
    exec(compile(python, "README.md", "exec"), namespace)  # the README's own lines, nothing else
    answer = namespace["answer"]
    assert isinstance(answer, Answer) and len(answer.retrieved) == 3
    assert [p.id for p in answer.pages] == [h.page_id for h in answer.retrieved]
    namespace["rag"].close()


def test_the_readme_model_references_run_as_written(
    tmp_path: Path,
    tiny_dirs: dict[str, Path],
    hub_cache: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The hub ids of the section are tiny models this test puts in an offline hub cache; every
    command then runs unchanged, in order (the training run cut to one step)."""
    from evidra.data.synth.documents import generate_documents

    commands = shown_commands(_section((ROOT / "README.md").read_text(), "Model references"))
    assert [" ".join(c.split()[:2]) for c in commands] == [
        "models tiny",
        "models tiny",
        "index build",
        "ask --store",
        "ask --store",
        "models resolve",
        "train rl",
    ]
    hub_cache.publish(tiny_dirs["colqwen2"], "vidore/colqwen2-v1.0-hf")
    snapshot = hub_cache.publish(tiny_dirs["qwen2_5_vl"], "Qwen/Qwen2.5-VL-3B-Instruct")
    generate_documents(tmp_path, n_docs=1, seed=2, dpi=50)  # writes tmp_path/docs/*.pdf
    (tmp_path / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    assert main(["-q", "ingest", "docs/", "--store", "store/"]) == 0
    for command in commands:
        # the training run cut to one step after a cold start of two
        extra = ["run.steps=1", "model.cold_start.steps=2"] if command.startswith("train ") else []
        capsys.readouterr()
        assert main(["-q", *shlex.split(command), *extra]) == 0, command
        out = capsys.readouterr().out
        if command.startswith("ask "):
            assert "retrieved: top 2 of idx-vis/" in out, out  # the one document's two pages
        if command.startswith("models resolve "):
            assert out.strip().splitlines()[-1] == str(snapshot)
    assert (
        json.loads((tmp_path / "idx-vis" / "retriever.json").read_text())["encoder_path"]
        == "vidore/colqwen2-v1.0-hf"
    )
    assert (tmp_path / "ckpt" / "tiny-colqwen2" / "config.json").is_file()
    assert (tmp_path / "runs" / "tiny" / "lat" / "metrics.jsonl").read_text().count("\n") == 1
