from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidra.cli.main import SUBCOMMANDS, main


@pytest.mark.parametrize("command", [[], *[[name] for name in SUBCOMMANDS]])
def test_help_everywhere(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*command, "--help"])
    assert exc.value.code == 0
    assert "usage: evidra" in capsys.readouterr().out


def test_errors_are_one_line_and_nonzero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ingest", str(tmp_path / "nowhere"), "--store", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "does not exist" in err and err.startswith("evidra ingest: error:")
    assert main(["pages", str(tmp_path / "missing-store")]) == 2
    assert "evidra ingest" in capsys.readouterr().err  # the fix is named
    assert main(["ask", "--store", str(tmp_path), "--model", str(tmp_path), "Q?"]) == 2


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from evidra.data.synth.documents import generate_documents

    root = tmp_path_factory.mktemp("cli")
    corpus = generate_documents(root / "docs", n_docs=2, seed=1, dpi=72)
    assert main(["-q", "ingest", str(corpus.docs_dir), "--store", str(root / "store"), "--dpi", "72"]) == 0
    return Path(corpus.docs_dir), root / "store"


def test_ingest_is_idempotent_and_pages_lists(
    corpus_store: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    docs, store = corpus_store
    capsys.readouterr()
    assert main(["-q", "ingest", str(docs), "--store", str(store), "--dpi", "72"]) == 0
    assert capsys.readouterr().out.startswith("0 pages added")
    assert main(["pages", str(store), "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert records and all(r["width"] > 0 and r["id"].endswith(f"p{r['page_number']:04d}") for r in records)
    assert any(r["words"] > 0 for r in records)


def test_ask_answers_over_given_pages(
    corpus_store: tuple[Path, Path], tiny_dirs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, store = corpus_store
    main(["pages", str(store), "--json"])
    ids = [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]
    model = str(tiny_dirs["qwen2_5_vl"])
    code = main(
        [
            "-q",
            "ask",
            "--store",
            str(store),
            "--model",
            model,
            "--page",
            ids[0],
            "--json",
            "--max-new-tokens",
            "8",
            "Who founded it?",
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["pages"] == [ids[0]] and result["finish_reason"] in {"eos", "stop", "length"}
    assert result["answer"] is None or isinstance(result["answer"], str)
    assert main(["ask", "--store", str(store), "--model", model, "--max-pages", "1", "Q?"]) == 2
    assert "--page" in capsys.readouterr().err


def test_train_overrides_may_follow_options(capsys: pytest.CaptureFixture[str]) -> None:
    from evidra.cli.main import build_parser

    args, extra = build_parser().parse_known_args(["train", "rl", "--config", "c.yaml", "a.b=1", "c=2"])
    assert (args.mode, args.config, args.overrides + extra) == ("rl", "c.yaml", ["a.b=1", "c=2"])
    with pytest.raises(SystemExit):
        main(["pages", "store", "--bogus"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
