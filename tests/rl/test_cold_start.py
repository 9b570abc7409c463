"""model.cold_start: the base model's SFT on the task's oracle, built once, cached under a key of
everything that determines it, and read back only when the cached folder checks out."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.rl.run_config import RLConfig
from evidra.rl.sft import cold_start
from evidra.rl.sft.cold_start import (
    MANIFEST,
    ColdStart,
    cold_start_key,
    read_cached,
    with_cold_start,
    write_manifest,
)
from evidra.rl.tasks import TASKS

KEY = "ab" * 32


def _cfg(*extra: str) -> RLConfig:
    over = [
        "model.path=tiny:qwen2_5_vl",
        "data.task=toy.key_value",
        "model.cold_start.steps=2",
        "model.cold_start.batch_size=2",
        "model.cold_start.data.size=4",
    ]
    return load_config(RLConfig, None, [*over, *extra])


def _cached_folder(root: Path, key: str = KEY) -> Path:
    """A folder laid out as a built cold start: model files and their manifest."""
    folder = root / "toy.key_value-abababababababab"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    (folder / "model.safetensors").write_bytes(b"\x00" * 64)
    write_manifest(folder, ColdStart(folder, key, 2, 6.5, 3.25, 1.0))
    return folder


def test_the_key_changes_with_every_input_and_only_then(monkeypatch: pytest.MonkeyPatch) -> None:
    base = cold_start_key(_cfg())
    assert base == cold_start_key(_cfg()) and len(base) == 64
    others = [
        _cfg("model.cold_start.steps=3"),
        _cfg("model.cold_start.lr=1e-3"),
        _cfg("model.cold_start.data.seed=7"),
        _cfg("model.cold_start.data.synthetic=[reading]"),
        _cfg("model.path=tiny:qwen2_vl"),
        _cfg("model.max_pixels=12544"),
        _cfg("data.task=toy.digits"),
    ]
    keys = {cold_start_key(c) for c in others}
    assert len(keys) == len(others) and base not in keys
    # what RL alone reads does not rebuild the cold start
    assert cold_start_key(_cfg("optim.lr=1e-2", "run.steps=3", "rollout.group_size=8")) == base
    monkeypatch.setattr(cold_start, "evidra_version", lambda: "9.9.9")
    assert cold_start_key(_cfg()) != base


def test_a_cached_folder_is_read_back_with_its_measurements(tmp_path: Path) -> None:
    folder = _cached_folder(tmp_path)
    got = read_cached(folder, KEY)
    assert got is not None and (got.steps, got.loss_first, got.loss_last) == (2, 6.5, 3.25)
    assert read_cached(tmp_path / "absent", KEY) is None


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda f: (f / "model.safetensors").write_bytes(b"\x01" * 64), "another content"),
        (lambda f: (f / "model.safetensors").write_bytes(b"\x00" * 65), "another size"),
        (lambda f: (f / "pytorch_model.bin").write_bytes(b"pickle"), "differ from the manifest"),
        (lambda f: (f / "config.json").unlink(), "differ from the manifest"),
        (lambda f: (f / MANIFEST).write_text("{not json"), "not JSON"),
        (lambda f: (f / MANIFEST).write_text('{"key": "' + "cd" * 32 + '"}'), "other inputs"),
        (lambda f: (f / MANIFEST).write_bytes(b"\xff\xfe"), "utf-8"),
    ],
)
def test_a_damaged_or_planted_cache_is_built_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: object, reason: str
) -> None:
    folder = _cached_folder(tmp_path)
    damage(folder)  # type: ignore[operator]
    with caplog.at_level(logging.WARNING, logger="evidra.rl.sft.cold_start"):
        assert read_cached(folder, KEY) is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert str(folder) in line and reason in line and "building it again" in line


def test_a_manifest_that_lists_a_pickle_or_a_link_is_refused(tmp_path: Path) -> None:
    folder = _cached_folder(tmp_path)
    (folder / "model.bin").write_bytes(b"pickle")
    write_manifest(folder, ColdStart(folder, KEY, 2, 6.5, 3.25, 1.0))  # a manifest that lists it
    assert read_cached(folder, KEY) is None
    (folder / "model.bin").unlink()
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    (folder / "linked.json").symlink_to(outside)
    write_manifest(folder, ColdStart(folder, KEY, 2, 6.5, 3.25, 1.0))
    assert read_cached(folder, KEY) is None
    link = tmp_path / "link"
    link.symlink_to(_cached_folder(tmp_path / "other"))
    assert read_cached(link, KEY) is None


def test_no_cold_start_leaves_the_config_alone() -> None:
    cfg = _cfg("model.cold_start.steps=0")
    assert with_cold_start(cfg, TASKS.get("toy.key_value")) == (cfg, None)


def test_what_cannot_cold_start_is_refused_in_one_line() -> None:
    key_value, digits = TASKS.get("toy.key_value"), TASKS.get("toy.digits")
    with pytest.raises(
        ConfigError, match=r"no oracle conversations to cold-start from; set model\.cold_start"
    ):
        with_cold_start(_cfg("data.task=toy.digits"), digits)
    with pytest.raises(ConfigError, match=r"steps >= 0, batch_size >= 1"):
        with_cold_start(_cfg("model.cold_start.batch_size=0"), key_value)
    with pytest.raises(ConfigError, match=r"model\.cold_start\.lr must be > 0"):
        with_cold_start(_cfg("model.cold_start.lr=0"), key_value)
    with pytest.raises(ConfigError, match=r"needs vision_steps >= 0 and vision_lr > 0, got vision_steps -1"):
        with_cold_start(_cfg("model.cold_start.vision_steps=-1"), key_value)
    with pytest.raises(
        ConfigError, match=r"own generated data only; remove model\.cold_start\.data\.synthetic"
    ):
        with_cold_start(_cfg("model.cold_start.data.synthetic=[reading]"), key_value)


def test_several_processes_do_not_build_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"is not built yet and 2 processes would each build it"):
        with_cold_start(_cfg(), TASKS.get("toy.key_value"), processes=2)


@pytest.mark.slow  # an SFT of two steps and an export: about 5 s alone, more on a loaded machine
def test_the_cold_start_is_built_once_and_rl_starts_from_it(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, task = _cfg(), TASKS.get("toy.key_value")
    started, made = with_cold_start(cfg, task)
    assert made is not None and made.steps == 2 and made.loss_first > 0
    assert started.model.path == str(made.folder) and made.folder.name.startswith("toy.key_value-")
    assert replace(started.model, path=cfg.model.path) == cfg.model  # nothing else changes
    record = json.loads((made.folder / MANIFEST).read_text())
    assert record["key"] == cold_start_key(cfg) and "model.safetensors" in record["files"]
    assert not [p for p in made.folder.parent.iterdir() if p.name.startswith(".tmp-")]

    def no_second_build(*args: object) -> None:
        raise AssertionError("a cached cold start was built again")

    monkeypatch.setattr(cold_start, "build", no_second_build)
    again, cached = with_cold_start(cfg, task, processes=2)  # cached: several processes may read it
    assert again == started and cached is not None and cached.loss_last == made.loss_last


def test_a_warmed_tower_stays_frozen_in_the_sft_and_an_unwarmed_one_trains(tmp_path: Path) -> None:
    cfg = _cfg("model.cold_start.vision_steps=5")
    plain = cold_start.sft_config(cfg, tmp_path / "run")
    warmed = cold_start.sft_config(cfg, tmp_path / "run", tmp_path / "warm")
    assert plain.model.path == "tiny:qwen2_5_vl" and not plain.model.freeze_vision
    assert warmed.model.path == str(tmp_path / "warm") and warmed.model.freeze_vision
    assert cold_start_key(cfg) != cold_start_key(_cfg())  # a warm-up is part of what is cached


@pytest.mark.slow  # a tiny model's tower warmed 3 steps on 8 generated pages: a few seconds
def test_the_warm_up_writes_a_model_whose_tower_alone_changed(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    cfg = _cfg(
        "method.name=lat",
        "data.synthetic=[reading]",
        "model.cold_start.vision_steps=3",
        "model.cold_start.data.synthetic=[reading]",
        f"model.cold_start.data.path={tmp_path / 'pages'}",
        "model.cold_start.data.size=8",
        "model.min_pixels=28224",
        "model.max_pixels=28224",
    )
    from evidra.methods import build_task

    warm = cold_start.warm_vision(cfg, build_task({"name": "lat"}), tmp_path / "work")
    base = load_file(next((tmp_path / "work" / "models").rglob("model.safetensors")))
    after = load_file(warm / "model.safetensors")
    assert (warm / "tokenizer.json").is_file() and (warm / "config.json").is_file()
    changed = {k for k in base if not base[k].equal(after[k])}
    assert changed and all("visual" in k for k in changed)
