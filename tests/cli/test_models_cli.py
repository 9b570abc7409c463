"""`evidra models tiny KIND DIR` writes the tiny checkpoints the tests use; `evidra models resolve`
prints the directory a reference names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import main
from evidra.models.tiny import TINY_KINDS


@pytest.mark.parametrize(
    ("kind", "loader"), [("qwen2_5_vl", "policy"), ("qwen3", "policy"), ("colpali", "colpali")]
)
def test_models_tiny_writes_a_loadable_checkpoint(
    kind: str, loader: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / f"tiny-{kind}"
    assert main(["-q", "models", "tiny", kind, str(out)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"{kind}: {out}"
    if loader == "policy":
        from evidra.models.loading import load_vlm

        assert load_vlm(out).arch == kind
    else:
        from evidra.retrieval.encoders import load_encoder

        assert load_encoder(kind, out).embed_queries(["a question"])[0].shape[1] == 32


def test_models_tiny_refuses_a_full_directory_and_an_unknown_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["models", "tiny", "qwen2", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"evidra models tiny: error: {tmp_path} exists and is not empty; pass a new directory"
    with pytest.raises(SystemExit):
        main(["models", "tiny", "qwen9", str(tmp_path / "new")])
    err = capsys.readouterr().err
    assert all(k in err for k in TINY_KINDS), err  # argparse lists the kinds


def test_models_resolve_prints_the_snapshot(
    hub_cache: Any, tiny_dirs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = hub_cache.publish(tiny_dirs["colqwen2"], "tiny-org/retriever")
    assert main(["models", "resolve", "tiny-org/retriever"]) == 0
    assert capsys.readouterr().out.strip() == str(snapshot)
    assert main(["models", "resolve", "tiny-org/absent"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "`hf download tiny-org/absent`" in err
