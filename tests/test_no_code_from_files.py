"""No file evidra reads can run code: planted payloads stay inert, caches are private."""

from __future__ import annotations

import os
import pickle
import re
import shutil
from pathlib import Path

import pytest

from evidra.core.config import load_config
from evidra.core.errors import CheckpointError, ConfigError
from evidra.rl.run_config import DataConfig, RLConfig

ROOT = Path(__file__).resolve().parents[1]


class _Payload:
    """Unpickling this creates ``marker``: proof that a loader executed the file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (str(self.marker),))  # type: ignore[return-value]


def test_a_planted_corpus_cache_is_never_executed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from evidra.methods.vragrl.method import _build, corpus_dir, synth_once

    cfg = DataConfig(task="vragrl", path=str(tmp_path / "cache"), size=2)
    root = corpus_dir(cfg, "vragrl")
    root.mkdir(parents=True)
    marker = tmp_path / "owned"
    (root / "corpus.pkl").write_bytes(pickle.dumps(_Payload(marker)))  # the old cache name
    (root / "corpus.json").write_bytes(pickle.dumps(_Payload(marker)))  # and the new one
    with caplog.at_level("WARNING"):
        corpus = synth_once(root, lambda r: _build(r, 2, 0))
    assert not marker.exists()
    assert "rebuilding the unreadable corpus cache" in caplog.text and corpus.questions
    assert synth_once(root, lambda r: pytest.fail("rebuilt a valid cache")) == corpus  # read back as JSON


def test_a_planted_checkpoint_is_never_executed(tmp_path: Path) -> None:
    import torch

    from evidra.rl.trainer import RLTrainer

    over = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={tmp_path}",
        "run.steps=1",
        "run.batch_size=1",
        "rollout.group_size=2",
        "rollout.max_new_tokens=2",
        "data.size=2",
        "data.task=toy.length",
    ]
    RLTrainer(load_config(RLConfig, None, over)).train()
    ckpt = tmp_path / "checkpoints" / "step-000001"
    marker = tmp_path / "owned"
    torch.save({"optimizer": _Payload(marker)}, ckpt / "trainer.pt")
    (ckpt / "checksums.json").unlink()  # a forged checkpoint: no checksums to catch it first
    from evidra.rl.runs.checkpoint import load_checkpoint

    trainer = RLTrainer(load_config(RLConfig, None, [*over, "run.steps=2"]))
    assert trainer.state.step == 0 and not marker.exists()  # refused, named in a warning, fresh start
    with pytest.raises(CheckpointError, match="unreadable"):
        load_checkpoint(ckpt, trainer.vlm.model, trainer.optimizer, trainer.scheduler)
    assert not marker.exists()


def test_a_cache_folder_others_can_write_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evidra.methods._synth import private_cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert (
        private_cache_dir() == tmp_path / "evidra" and (tmp_path / "evidra").stat().st_mode & 0o777 == 0o700
    )
    os.chmod(tmp_path / "evidra", 0o777)
    with pytest.raises(ConfigError, match="writable by others"):
        private_cache_dir()


def test_no_unsafe_deserialisation_in_the_source() -> None:
    unsafe = re.compile(r"pickle\.loads?\(|marshal\.loads?\(|shelve\.open\(|yaml\.load\(|allow_pickle=True")
    hits = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if unsafe.search(line) or ("torch.load(" in line and "weights_only=True" not in line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_planted_bm25_index_files_are_never_executed(tmp_path: Path) -> None:
    import numpy as np

    from evidra.core.errors import CorpusError
    from evidra.retrieval.encoders.bm25 import BM25Retriever

    marker = tmp_path / "owned"
    payload = np.array([_Payload(marker)], dtype=object)
    BM25Retriever.build({"a": "orion budget", "b": "vega"}).save(tmp_path / "clean")
    files = sorted(
        p.name for p in next((tmp_path / "clean").glob("bm25-*")).iterdir() if p.suffix in {".npy", ".npz"}
    )
    assert {"counts.npz", "data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy"} <= set(files)
    for name in files:  # each array file in turn holds a pickled object instead of numbers
        root = tmp_path / name
        shutil.copytree(tmp_path / "clean", root)
        target = next(root.glob("bm25-*")) / name
        if name.endswith(".npz"):
            with open(target, "wb") as f:
                np.savez(f, indptr=payload, terms=payload, counts=payload, allow_pickle=True)
        else:
            with open(target, "wb") as f:
                np.save(f, payload, allow_pickle=True)
        with pytest.raises(CorpusError, match="cannot read the BM25 index"):
            BM25Retriever.load(root)
        assert not marker.exists(), name
