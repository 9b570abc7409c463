"""``evidra data distill|filter|toolbox`` and the training stages that read their files, from the
command line on the tiny model; teachers and curators are local fake OpenAI-compatible servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import main
from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.methods import check_config, task_for
from evidra.rl.run_config import RLConfig
from evidra.rl.tasks import task_samples

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "model.path=tiny:qwen2_5_vl",
    "model.min_pixels=3136",
    "model.max_pixels=50176",
    "rollout.max_new_tokens=6",
    "rollout.max_response_tokens=24",
    "rollout.group_size=2",
    "run.batch_size=1",
    "run.micro_batch_size=2",
    "algo.mini_batch_size=0",
    "run.steps=1",
    "algo.dynamic_sampling=false",
]
CURATION = (
    "DEFINE_TOOL: locate_table_row || row || Find a table row.\n"
    "DEFINE_TOOL: subtract_values || val1, val2 || Calculate difference.\n"
    '<tool name="locate_table_row" args="row \'Q3\'">Row 4</tool>'
    '<tool name="subtract_values" args="150, 100">50</tool>\nEND_OF_TOOLS'
)


def _data(tmp: Path, size: int = 2) -> list[str]:
    return [f"data.size={size}", f"data.path={tmp / 'data'}"]


def _samples(recipe: str, overrides: list[str]) -> list[Any]:
    cfg = load_config(RLConfig, ROOT / "configs" / f"{recipe}.yaml", overrides)
    return task_samples(task_for(cfg), cfg.data)


def test_distill_then_sft_on_the_kept_trajectories(
    tmp_path: Path, fake_judge: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """LAT: the teacher answers every question with the first sample's gold answer, so that one
    is kept (recall 1 >= gamma) and the others rejected; SFT trains on the kept row only."""
    config = str(ROOT / "configs" / "lat.yaml")
    data = _data(tmp_path, 3)
    first = _samples("lat", ["model.path=x", *data])[0]
    fake_judge.policy_reply = f"<think>It is on page 1.</think><answer>{first.answers[0]}</answer>"
    out = tmp_path / "lat-sft.jsonl"
    argv = [
        "-q",
        "data",
        "distill",
        "--config",
        config,
        "--method",
        "lat",
        "--teacher",
        fake_judge.url,
        "--teacher-model",
        "teacher",
        "--out",
        str(out),
        *data,
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and len(fake_judge.requests) == 3
    kept = [r for r in rows if r["accepted"]]
    assert [r["id"] for r in kept] == [first.id]
    assert "1 kept" in capsys.readouterr().out
    assert main(argv[1:]) == 0 and len(fake_judge.requests) == 3  # a rerun skips every id in the file
    assert "distill: 3/3 samples (100%)" in capsys.readouterr().err  # without -q: skipped ones fill it
    run = tmp_path / "sft"
    sft = [
        "-q",
        "train",
        "sft",
        "--config",
        config,
        "--data",
        str(out),
        *TINY,
        *data,
        f"run.output_dir={run}",
        "sft.run.batch_size=1",
        "sft.run.steps=1",
    ]
    assert main(sft) == 0
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1
    assert f"trajectories: {out}" in (run / "config.yaml").read_text()


def test_train_rl_refuses_data_and_sft_refuses_a_rejected_only_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(ROOT / "configs" / "lat.yaml")
    rejected = tmp_path / "none.jsonl"
    rejected.write_text(json.dumps({"id": "a", "accepted": False, "prompt": [], "response": "x"}) + "\n")
    assert main(["-q", "train", "rl", "--config", config, "--data", str(rejected), *TINY]) == 2
    assert "data.subset" in capsys.readouterr().err
    argv = [
        "-q",
        "train",
        "sft",
        "--config",
        config,
        "--data",
        str(rejected),
        *TINY,
        *_data(tmp_path),
        f"run.output_dir={tmp_path / 'run'}",
    ]
    assert main(argv) == 2
    assert "no accepted trajectory" in capsys.readouterr().err
    argv[6] = str(tmp_path / "missing.jsonl")
    assert main(argv) == 2
    assert "evidra data distill" in capsys.readouterr().err


def test_config_checks_toolbox_subset_and_trajectories(tmp_path: Path) -> None:
    def check(recipe: str, *over: str) -> None:
        check_config(load_config(RLConfig, ROOT / "configs" / f"{recipe}.yaml", ["model.path=x", *over]))

    with pytest.raises(ConfigError, match=r"method\.toolbox is no option of method 'lat'"):
        check("lat", f"method.toolbox={tmp_path / 'box.json'}")
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    with pytest.raises(ConfigError, match=r"method\.toolbox: toolbox .* non-empty"):
        check("lang2act_stage2", f"method.toolbox={bad}")
    with pytest.raises(ConfigError, match=r"data\.subset: cannot read"):
        check("lat", f"data.subset={tmp_path / 'missing.jsonl'}")
    traj = tmp_path / "t.jsonl"
    traj.write_text("")
    with pytest.raises(ConfigError, match=r"data\.trajectories is SFT data"):
        check("lat", f"data.trajectories={traj}")


def test_subset_keeps_the_files_ids_in_its_order(tmp_path: Path) -> None:
    from evidra.rl.subset import SubsetRow, write_subset

    data = _data(tmp_path, 3)
    samples = _samples("lang2act_stage2", ["model.path=x", *data])
    keep = write_subset(
        [
            SubsetRow(samples[0].id, 2, 2, False),
            SubsetRow(samples[2].id, 0, 2, True),
            SubsetRow(samples[1].id, 1, 2, True),
        ],
        tmp_path / "keep.jsonl",
    )
    kept = _samples("lang2act_stage2", ["model.path=x", *data, f"data.subset={keep}"])
    assert [s.id for s in kept] == [samples[2].id, samples[1].id]
    other = write_subset([SubsetRow("elsewhere", 0, 2, True)], tmp_path / "other.jsonl")
    with pytest.raises(ConfigError, match="keeps none of this run's 3 samples"):
        _samples("lang2act_stage2", ["model.path=x", *data, f"data.subset={other}"])


def test_filter_writes_a_subset_rl_trains_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny random policy solves nothing: every sample is inside the paper's band (fewer than
    all k correct) and kept; RL then trains on data.subset."""
    config = str(ROOT / "configs" / "evisrag.yaml")
    data, out = _data(tmp_path), tmp_path / "keep.jsonl"
    argv = ["-q", "data", "filter", "--config", config, "--k", "2", "--out", str(out), *TINY, *data]
    assert main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["kept"] and r["k"] == 2 and r["successes"] == 0 for r in rows)
    assert "kept 2 of 2" in capsys.readouterr().out
    run = tmp_path / "rl"
    rl = [
        "-q",
        "train",
        "rl",
        "--config",
        config,
        *TINY,
        *data,
        f"data.subset={out}",
        f"run.output_dir={run}",
    ]
    assert main(rl) == 0
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1


def test_toolbox_from_trajectories_file(
    tmp_path: Path, fake_judge: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_judge.policy_reply = CURATION
    traj = tmp_path / "stage1.jsonl"
    traj.write_text(
        "".join(json.dumps({"response": f"<description>step {i}</description>"}) + "\n" for i in range(3))
    )
    out = tmp_path / "box.json"
    argv = [
        "-q",
        "data",
        "toolbox",
        "--trajectories",
        str(traj),
        "--curator",
        fake_judge.url,
        "--curator-model",
        "curator",
        "--top-k",
        "7",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    rows = json.loads(out.read_text())
    assert [(r["name"], r["numeric"], r["count"]) for r in rows] == [
        ("locate_table_row", False, 3),
        ("subtract_values", True, 3),
    ]
    out_text, err = capsys.readouterr()
    assert "coverage 100.0%" in out_text and "curating" not in err  # -q: no bar
    assert main(argv[1:]) == 0  # without -q: a bar over the three trajectories
    assert "curating: 3/3 trajectories (100%)" in capsys.readouterr().err
    assert main([*argv[:5], "--out", str(out)]) == 2  # no curation model given
    assert "--curator URL" in capsys.readouterr().err


def test_lang2act_sequence_stage1_toolbox_stage2(tmp_path: Path, fake_judge: Any) -> None:
    """docs/methods.md's Lang2Act commands: stage 1 RL -> export -> tool curation over the stage-1
    policy's trajectories -> stage 2 RL on the curated toolbox (its prompt and tool reward)."""
    fake_judge.policy_reply = CURATION
    data = _data(tmp_path)
    stage1, box = tmp_path / "l2a-stage1", tmp_path / "toolbox.json"
    argv = [
        "-q",
        "train",
        "rl",
        "--config",
        str(ROOT / "configs" / "lang2act_stage1.yaml"),
        *TINY,
        *data,
        f"run.output_dir={tmp_path / 'rl1'}",
        "--export",
        str(stage1),
    ]
    assert main(argv) == 0
    argv = [
        "-q",
        "data",
        "toolbox",
        "--config",
        str(ROOT / "configs" / "lang2act_stage1.yaml"),
        "--model",
        str(stage1),
        "--curator",
        fake_judge.url,
        "--curator-model",
        "curator",
        "--out",
        str(box),
        *TINY,
        *data,
    ]
    assert main(argv) == 0
    assert len(fake_judge.requests) == 2  # one curation request per stage-1 trajectory
    stage2 = [
        "-q",
        "train",
        "rl",
        "--config",
        str(ROOT / "configs" / "lang2act_stage2.yaml"),
        *TINY,
        *data,
        f"model.path={stage1}",
        f"method.toolbox={box}",
        f"run.output_dir={tmp_path / 'rl2'}",
    ]
    assert main(stage2) == 0
    assert f"toolbox: {box}" in (tmp_path / "rl2" / "config.yaml").read_text()
    assert len((tmp_path / "rl2" / "metrics.jsonl").read_text().splitlines()) == 1
    over = ["model.path=x", f"method.toolbox={box}", *data]
    cfg = load_config(RLConfig, ROOT / "configs" / "lang2act_stage2.yaml", over)
    task = task_for(cfg)
    sample = task_samples(task, cfg.data)[0]
    prompt = task.make_env(sample).reset(sample)[0].content[0].text
    assert 'name="subtract_values" args="val1, val2"' in prompt and "read_text_element" not in prompt
    assert task.reward.numeric_tools == frozenset({"subtract_values"})


def _completion(text: str) -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]
    }


@pytest.mark.slow
def test_multiexpert_then_sft_on_the_kept_episode(
    tmp_path: Path, fake_judge: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """VRAG-RL: the teacher searches the question, then answers it right; the episode (2 steps,
    a search) is kept and ``train sft --data`` trains on its conversation."""
    config = str(ROOT / "configs" / "vragrl.yaml")
    data = _data(tmp_path, 1)
    sample = _samples("vragrl", ["model.path=x", *data])[0]
    fake_judge.script = [
        fake_judge.Scripted(200, _completion(f"<think>look it up</think><search>{sample.question}</search>")),
        fake_judge.Scripted(200, _completion(f"<think>found</think><answer>{sample.answers[0]}</answer>")),
    ]
    out = tmp_path / "vragrl-sft.jsonl"
    argv = [
        "-q",
        "data",
        "multiexpert",
        "--config",
        config,
        "--teacher",
        fake_judge.url,
        "--teacher-model",
        "teacher",
        "--concurrency",
        "1",
        "--out",
        str(out),
        *data,
    ]
    assert main(argv) == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["accepted"] and row["meta"]["actions"] == ["search", "answer"]
    assert "1 of 1 episodes kept" in capsys.readouterr().out
    run = tmp_path / "sft"
    sft = [
        "-q",
        "train",
        "sft",
        "--config",
        config,
        "--data",
        str(out),
        *TINY,
        *data,
        f"run.output_dir={run}",
        "sft.run.batch_size=1",
        "sft.run.steps=1",
    ]
    assert main(sft) == 0
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1
    bad = [
        "-q",
        "data",
        "multiexpert",
        "--config",
        config,
        "--teacher",
        fake_judge.url,
        "--teacher-model",
        "t",
        "--expert",
        fake_judge.url,
        "--out",
        str(out),
        *data,
    ]
    assert main(bad) == 2
    assert "--expert-model" in capsys.readouterr().err
