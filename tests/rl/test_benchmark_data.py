"""Recipes train on published benchmarks (``data.source``): adaptation, checks, VRAG-RL search."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from evidra.cli.main import main
from evidra.core.errors import ConfigError, InvalidInputError
from evidra.core.types import Page, Sample
from evidra.methods import build_task
from evidra.rl.run_config import DataConfig
from evidra.rl.tasks import TASKS, task_samples, usable

FIX = Path(__file__).parents[1] / "fixtures" / "benchmarks"


def _visa(tmp_path: Path, task: str, **kw: object) -> DataConfig:
    options = {"pool": str(FIX / "visa" / "train.jsonl"), "image_dir": str(tmp_path / "img")}
    return DataConfig(
        task=task, source="visa_wiki", path=str(FIX / "visa" / "test.jsonl"), options=options, **kw
    )  # type: ignore[arg-type]


def _slides(task: str, **kw: object) -> DataConfig:
    return DataConfig(
        task=task,
        source="slidevqa",
        path=str(FIX / "slidevqa" / "test.jsonl"),
        options={"n_slides": "3"},
        **kw,
    )  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _ocr_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """VISA's pages are screenshots: task lat reads them by OCR (refused without it, tested below)."""
    monkeypatch.setattr("evidra.methods.lat.similarity.ocr_available", lambda: True)


def test_single_turn_recipes_take_benchmark_samples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evidra.methods.lat.similarity.ocr_available", lambda: False)
    with pytest.raises(ConfigError, match="visa_wiki: 5 pages have no text layer"):  # screenshots, no OCR
        task_samples(build_task(dict(name="lat")), _visa(tmp_path, "lat"))
    monkeypatch.setattr("evidra.methods.lat.similarity.ocr_available", lambda: True)
    lat = task_samples(build_task(dict(name="lat")), _visa(tmp_path, "lat"))
    assert [s.answerable for s in lat] == [True, False]  # "No Answer" items train LAT's refusal
    assert lat[0].gold_boxes and [p.id for p in lat[0].pages] == ["nq-7", "nq-1", "nq-9"]
    evisrag = task_samples(build_task(dict(name="evisrag")), _visa(tmp_path, "evisrag"))
    assert [s.sufficient for s in evisrag] == [True, False]  # derived from answerability
    (cave,) = task_samples(build_task(dict(name="cave")), _visa(tmp_path, "cave"))  # answerable ones only
    assert [p.id for p in cave.pages] == ["nq-1"]  # the gold page, zoomed on alone
    assert (
        len(task_samples(build_task(dict(name="lang2act", stage=2)), _visa(tmp_path, "lang2act.stage2"))) == 2
    )
    # the scoped variants carry the adaptation of the task they wrap
    assert len(task_samples(build_task(dict(name="lat", scoped=True)), _visa(tmp_path, "lat.rs_grpo"))) == 2


def test_data_size_subsamples_with_the_seed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = build_task(dict(name="lat"))
    with caplog.at_level(logging.WARNING, logger="evidra.rl.tasks"):
        one = task_samples(task, _visa(tmp_path, "lat", size=1, seed=0))
    assert len(one) == 1 and "training on 1 of 2 visa_wiki samples" in caplog.text
    again = task_samples(task, _visa(tmp_path, "lat", size=1, seed=0))
    assert [s.id for s in again] == [s.id for s in one]
    assert len(task_samples(task, _visa(tmp_path, "lat", size=0))) == 2


def test_benchmark_errors_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="own generated data"):
        task_samples(TASKS.get("toy.digits"), _visa(tmp_path, "toy.digits"))
    with pytest.raises(ConfigError, match=r"needs data\.path"):
        task_samples(build_task(dict(name="lat")), DataConfig(task="lat", source="slidevqa"))
    # VRAG-RL: image-only pages and no index -> BM25 would find nothing
    with pytest.raises(ConfigError, match=r"method\.index"):
        task_samples(build_task(dict(name="vragrl")), _slides("vragrl"))


def test_usable_counts_reasons_and_refuses_when_nothing_is_left(tmp_path: Path) -> None:
    from evidra.methods._benchmark import IMAGE_QA

    img = tmp_path / "p.png"
    img.write_bytes(b"not read here")
    good = Sample(id="a", question="q?", answers=("x",), pages=(Page("p", str(img), 10, 10),))
    gone = Sample(
        id="b", question="q?", answers=("x",), pages=(Page("g", str(tmp_path / "gone.png"), 10, 10),)
    )
    bare = Sample(id="c", question="q?", answers=("x",))
    assert usable([good, gone, bare], IMAGE_QA, "t") == [good]
    want = r"none of the 3 samples can train t: 2 without page images \(e\.g\. 'c'\), 1 with a missing image"
    with pytest.raises(ConfigError, match=want):
        usable([gone, bare, replace(bare, id="d")], IMAGE_QA, "t")


def test_vragrl_searches_a_benchmark_index_built_over_the_loader_pages(
    tiny_dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    idx = tmp_path / "idx"
    build = [
        "index",
        "build",
        "--dataset",
        "slidevqa",
        "--data",
        str(FIX / "slidevqa" / "test.jsonl"),
        "--option",
        "n_slides=3",
        "--out",
        str(idx),
        "--encoder",
        "colqwen2",
        "--model",
        str(tiny_dirs["colqwen2"]),
    ]
    assert main(build) == 0
    assert "indexed 3 pages" in capsys.readouterr().out  # the deck's 3 slides, loader page ids
    # the loader's questions with their gold pages as qrels: 3 pages, so both gold pages are in the top 3
    evaluate = ["index", "eval", "--index", str(idx), "--dataset", "slidevqa", "--json", "-k", "1", "3"]
    assert main([*evaluate, "--data", str(FIX / "slidevqa" / "test.jsonl"), "--option", "n_slides=3"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["n_queries"] == 1 and metrics["recall@3"] == 1.0 and metrics["recall@1"] in (0.0, 0.5)
    task = build_task(dict(name="vragrl", index=str(idx)))
    (sample,) = task_samples(task, _slides("vragrl"))
    assert sample.gold_pages == ("deck-a_2", "deck-a_3")
    env = task.make_env(sample)
    env.reset(sample)
    step = env.step(f"<search>{sample.question}</search>")
    assert step.info.page_id in {"deck-a_1", "deck-a_2", "deck-a_3"} and not step.done
    # the same index behind `evidra serve-index`: rollout workers share it over HTTP
    from evidra.retrieval.lifecycle.index_folder import open_index
    from evidra.retrieval.service.server import SearchService

    with open_index(idx) as engine, SearchService(engine.retriever, n_pages=3).running() as url:
        served_task = build_task(dict(name="vragrl", index=url))
        (remote,) = task_samples(served_task, _slides("vragrl"))
        served = served_task.make_env(remote)
        served.reset(remote)
        assert served.step(f"<search>{sample.question}</search>").info.page_id == step.info.page_id
    # an index that lacks a gold page can never earn VRAG-RL's retrieval reward: refused
    assert main(["index", "delete", "--index", str(idx), "deck-a_3"]) == 0
    with pytest.raises(InvalidInputError, match=r"lacks 1 gold pages.*deck-a_3"):
        task_samples(build_task(dict(name="vragrl", index=str(idx))), _slides("vragrl"))


def test_index_build_dataset_options_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ["index", "build", "--out", str(tmp_path / "i"), "--encoder", "bm25"]
    assert main([*out, "--dataset", "slidevqa"]) == 2
    assert "needs --data" in capsys.readouterr().err
    assert (
        main([*out, "--dataset", "slidevqa", "--data", str(FIX / "slidevqa" / "test.jsonl"), "--option", "x"])
        == 2
    )
    assert "KEY=VALUE" in capsys.readouterr().err
    data = ["--dataset", "slidevqa", "--data", str(FIX / "slidevqa" / "test.jsonl"), "--option", "n_slides=3"]
    assert main([*out, *data]) == 2  # slide images have no text layer
    assert "bm25 needs --ocr" in capsys.readouterr().err
    assert main([*out, *data, "--store", str(tmp_path)]) == 2
    assert "exactly one of" in capsys.readouterr().err
    evaluate = ["index", "eval", "--index", str(tmp_path / "none"), "--dataset", "slidevqa", "--queries", "q"]
    assert main(evaluate) == 2
    assert "pass one of" in capsys.readouterr().err


@pytest.mark.slow
def test_lat_recipe_trains_on_a_benchmark_from_its_yaml(tmp_path: Path) -> None:
    import math

    from evidra.core.config import load_config
    from evidra.methods import rl_trainer
    from evidra.rl.run_config import RLConfig

    root = Path(__file__).resolve().parents[2]
    overrides = [
        "model.path=tiny:qwen2_5_vl",
        "model.min_pixels=3136",
        "model.max_pixels=50176",
        "run.steps=1",
        "run.batch_size=2",
        "run.micro_batch_size=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=6",
        "algo.mini_batch_size=0",
        "rollout.max_response_tokens=6",
        "algo.dynamic_sampling=false",
        "data.size=0",
        "data.source=visa_wiki",
        f"data.path={FIX / 'visa' / 'test.jsonl'}",
        f"data.options.pool={FIX / 'visa' / 'train.jsonl'}",
        f"data.options.image_dir={tmp_path / 'img'}",
        f"run.output_dir={tmp_path / 'run'}",
    ]
    cfg = load_config(RLConfig, root / "configs" / "lat.yaml", overrides)
    trainer = rl_trainer(cfg)
    assert sorted(s.id for s in trainer.samples) == sorted(
        s.id for s in task_samples(build_task(dict(name="lat")), cfg.data)
    )
    (row,) = trainer.train()
    assert math.isfinite(row["loss"]) and {"reward/accuracy", "reward/ground"} <= set(row)


def test_sft_writes_oracles_for_benchmark_samples_with_gold_evidence(tmp_path: Path) -> None:
    from evidra.rl.run_config import SFTConfig
    from evidra.rl.sft.finetune import _task_conversations

    convs = _task_conversations(SFTConfig(data=_visa(tmp_path, "lat")), build_task(dict(name="lat")))
    assert len(convs) == 2 and all(c[-1].role == "assistant" for c in convs)
    assert "No answer" in convs[1][-1].plain_text
    # SlideVQA has no answer boxes: LAT's oracle cannot cite evidence for any sample
    with pytest.raises(ConfigError, match="cannot build an SFT conversation"):
        _task_conversations(SFTConfig(data=_slides("lat")), build_task(dict(name="lat")))


@pytest.mark.slow
def test_vragrl_recipe_trains_on_a_benchmark_with_an_index(
    tiny_dirs: dict[str, Path], tmp_path: Path
) -> None:
    import math

    from evidra.core.config import load_config
    from evidra.methods import rl_trainer
    from evidra.rl.run_config import RLConfig

    idx = tmp_path / "idx"
    assert (
        main(
            [
                "index",
                "build",
                "--dataset",
                "slidevqa",
                "--data",
                str(FIX / "slidevqa" / "test.jsonl"),
                "--option",
                "n_slides=3",
                "--out",
                str(idx),
                "--encoder",
                "colqwen2",
                "--model",
                str(tiny_dirs["colqwen2"]),
            ]
        )
        == 0
    )
    root = Path(__file__).resolve().parents[2]
    overrides = [
        "model.path=tiny:qwen2_5_vl",
        "model.min_pixels=3136",
        "model.max_pixels=50176",
        "run.steps=1",
        "run.batch_size=1",
        "run.micro_batch_size=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
        "algo.mini_batch_size=0",
        "rollout.max_response_tokens=24",
        "rollout.max_turns=2",
        "algo.kl=none",
        "data.size=0",
        "data.source=slidevqa",
        f"data.path={FIX / 'slidevqa' / 'test.jsonl'}",
        "data.options.n_slides=3",
        f"method.index={idx}",
        f"run.output_dir={tmp_path / 'run'}",
    ]
    (row,) = rl_trainer(load_config(RLConfig, root / "configs" / "vragrl.yaml", overrides)).train()
    assert math.isfinite(row["loss"]) and {"reward/retrieval", "reward/answer", "reward/pattern"} <= set(row)


def test_oracles_refuse_answerable_samples_without_gold_evidence(tmp_path: Path) -> None:
    from evidra.core.errors import InvalidInputError
    from evidra.methods.evisrag.paradigm import evidence_oracle_text
    from evidra.methods.lang2act.paradigm import toolchain_oracle_text
    from evidra.methods.lat.paradigm import coe_oracle_text

    bare = Sample(
        id="s", question="who?", answers=("Ann",), pages=(Page("p", str(tmp_path / "p.png"), 9, 9),)
    )
    for write in (coe_oracle_text, evidence_oracle_text, lambda s: toolchain_oracle_text(s, 1)):
        with pytest.raises(InvalidInputError, match="'s'"):
            write(bare)
    assert "Ann" in toolchain_oracle_text(bare, 2)  # stage 2 reads the answer off the page
    refusal = replace(bare, answerable=False, answers=())
    assert "No answer" in coe_oracle_text(refusal) and "No answer" in toolchain_oracle_text(refusal, 1)
