"""Every export carries a model card (README.md) and world-readable files."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from evidra.core.config import load_config
from evidra.methods import METHODS, method_facts, rl_trainer
from evidra.rl.run_config import RLConfig
from evidra.rl.runs.export import PROVENANCE, export_model
from evidra.rl.runs.model_card import CardInput, MethodFacts, Paper, base_license, hub_id, model_card
from evidra.safeio.sink import read_metrics

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lat_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two steps of the tiny LAT recipe."""
    run = tmp_path_factory.mktemp("lat-run")
    cfg = load_config(
        RLConfig,
        ROOT / "configs" / "tiny" / "lat.yaml",
        [
            f"run.output_dir={run}",
            "run.steps=2",
            "run.batch_size=2",
            "run.save_every=2",
            "data.size=4",
            "rollout.group_size=2",
            "rollout.max_new_tokens=8",
            "model.cold_start.steps=0",  # the card names the base model the recipe gives
        ],
    )
    rl_trainer(cfg).train()
    return run


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def _front_matter(card: str) -> dict[str, object]:
    assert card.startswith("---\n")
    front = yaml.safe_load(card.split("---\n", 2)[1])
    assert isinstance(front, dict)
    return front


def test_the_card_names_method_paper_recipe_steps_and_metrics(lat_run: Path, tmp_path: Path) -> None:
    out = export_model(lat_run, tmp_path / "lat-7b", method_facts=method_facts)
    card = (out / "README.md").read_text()
    front = _front_matter(card)
    assert front["library_name"] == "transformers" and front["pipeline_tag"] == "image-text-to-text"
    assert {"evidra", "lat", "reinforcement-learning", "lora"} <= set(front["tags"])  # type: ignore[call-overload]
    assert "base_model" not in front  # tiny:qwen2_5_vl is no hub model
    paper = METHODS.get("lat").citation
    assert paper is not None and paper.title.startswith("Look as You Think")
    assert "Trained with evidra's `lat` method" in card and f'"{paper.title}"' in card
    assert "https://arxiv.org/abs/2511.12003" in card
    digest = hashlib.sha256((out / PROVENANCE).read_bytes()).hexdigest()
    assert f"sha256 of `evidra_config.yaml`: `{digest}`" in card
    assert "- steps trained: 2 (run.steps: 2; RL, prompts per step: 2)" in card
    final = read_metrics(lat_run / "metrics.jsonl")[-1]
    assert final["step"] == 2
    assert f"| `reward/mean` | {final['reward/mean']:.6g} |" in card
    assert f"| `entropy` | {final['entropy']:.6g} |" in card
    assert "tiny:qwen2_5_vl" in card and "LoRA (r=64, alpha=64), merged into the weights" in card
    assert f'AutoModelForImageTextToText.from_pretrained("{tmp_path / "lat-7b"}")' in card
    assert f"evidra eval --synthetic documents --method lat --model {tmp_path / 'lat-7b'}" in card
    load_config(RLConfig, out / PROVENANCE)  # "train again with --config evidra_config.yaml" holds


def test_every_exported_file_gets_the_modes_of_the_umask(lat_run: Path, tmp_path: Path, umask: None) -> None:
    for mask, file_mode, dir_mode in ((0o022, 0o644, 0o755), (0o027, 0o640, 0o750)):
        os.umask(mask)
        for adapter in (False, True):
            out = export_model(lat_run, tmp_path / f"m{mask:o}-{adapter}", adapter_only=adapter)
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*")}
            weights = "adapter_model.safetensors" if adapter else "model.safetensors"
            assert weights in modes and "README.md" in modes
            assert {name: mode for name, mode in modes.items() if mode != file_mode} == {}, mask
            assert stat.S_IMODE(out.stat().st_mode) == dir_mode


def test_an_adapter_card_loads_with_peft_and_a_plain_task_names_no_paper(
    lat_run: Path, tmp_path: Path
) -> None:
    card = (export_model(lat_run, tmp_path / "lora", adapter_only=True) / "README.md").read_text()
    assert _front_matter(card)["library_name"] == "peft"
    assert "PeftModel.from_pretrained(base, " in card and "merged" not in card
    assert "Paper to cite" not in card  # no method_facts handed in: the registry was not asked
    assert "Trained with evidra on `lat` (`method.name`, else `data.task`, of `evidra_config.yaml`)." in card


def test_method_facts_come_from_the_registry() -> None:
    lat = method_facts({"method": {"name": "lat", "scoped": True}})
    assert lat is not None and lat.paper is METHODS.get("lat").citation and lat.paradigm == "coe"
    for config in (
        {"method": {}, "data": {"task": "toy.digits"}},
        {"method": {"name": "nope"}},
        {"method": {}, "data": {"task": "lang2act.stage2"}},  # a former task name names none
        {"method": "lat"},
        {"method": {"name": ["lat"]}},
        {},
    ):
        assert method_facts(config) is None, config


def test_a_hostile_run_cannot_shape_the_card(tmp_path: Path) -> None:
    config = {
        "method": {"name": "x\n---\nlicense: evil"},
        "data": {"task": "t", "path": "a`b\n# injected\n```", "source": "s"},
        "model": {"path": "ckpt/base\n## injected", "dtype": "float32", "lora": {"enabled": False}},
        "run": {"steps": 3, "batch_size": 2},
    }
    facts = CardInput(config, "0" * 64, 3, {"a|b\n## evil": 1.0}, tmp_path, "out\n# x", False, None)
    card = model_card(facts)
    assert set(_front_matter(card)) == {"library_name", "tags", "pipeline_tag"}
    headings = [line for line in card.splitlines() if line.startswith("#")]
    assert headings == [
        "# out # x",
        "## Method",
        "## Base model",
        "## Recipe",
        "## Data",
        "## Training",
        "## How to load",
    ], headings


def test_base_model_and_license_come_from_the_hub_id_and_the_base_card(tmp_path: Path) -> None:
    snapshot = tmp_path / "models--Qwen--Qwen2.5-VL-7B-Instruct" / "snapshots" / "abc"
    assert hub_id(str(snapshot), snapshot) == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert hub_id("Qwen/Qwen2.5-VL-3B-Instruct@main", tmp_path) == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert hub_id(str(tmp_path), tmp_path) == ""
    (tmp_path / "README.md").write_text("---\nlicense: apache-2.0\ntags: [a]\n---\n# Base\n")
    assert base_license(tmp_path) == "apache-2.0"
    for front in ("license: 'a b\\nc'", "license: {x: 1}", "- a list", "license: [apache-2.0]"):
        (tmp_path / "README.md").write_text(f"---\n{front}\n---\n")
        assert base_license(tmp_path) == ""
    paper = Paper("T", "A et al.", 2025, "V", "https://p")
    config = {"model": {"path": "Qwen/Qwen2.5-VL-3B-Instruct"}}
    facts = CardInput(config, "0" * 64, 1, {}, tmp_path, "o", False, MethodFacts("m", "s", "coe", paper))
    (tmp_path / "README.md").write_text("---\nlicense: apache-2.0\n---\n")
    front = _front_matter(model_card(facts))
    assert front["base_model"] == "Qwen/Qwen2.5-VL-3B-Instruct" and front["license"] == "apache-2.0"
