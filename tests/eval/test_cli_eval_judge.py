"""``evidra eval --judge openai``: judge accuracy and the count of unscored answers, against the
fake OpenAI-compatible server of conftest.py (which also serves the evaluated policy)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import main

pytest.importorskip("httpx")


def _argv(url: str, out: Path, *judge: str) -> list[str]:
    return [
        "eval",
        "--synthetic",
        "tunnel.chain",
        "--n",
        "3",
        "--paradigm",
        "direct",
        "--endpoint",
        url,
        "--model-name",
        "policy-m",
        "--out",
        str(out),
        *judge,
    ]


def _row(out: Path) -> dict[str, Any]:
    (row,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return dict(row)


def _judge_requests(fake: Any) -> list[dict[str, Any]]:
    return [r for r in fake.requests if r["body"]["model"] == "judge-m"]


def test_eval_reports_llm_judge_accuracy_and_unscored_answers(fake_judge: Any, tmp_path: Path) -> None:
    judge = [
        "--judge",
        "openai",
        "--judge-url",
        fake_judge.url,
        "--judge-model",
        "judge-m",
        "--judge-retries",
        "1",
        "--judge-concurrency",
        "2",
    ]
    fake_judge.policy_reply = "<think>t</think><answer>{1}</answer>"  # the judge compares it with the gold
    assert main(_argv(fake_judge.url, tmp_path / "ok", *judge)) == 0
    row = _row(tmp_path / "ok")
    assert row["metrics"]["judge_unscored"] == 0.0 and 0.0 <= row["metrics"]["judge_accuracy"] <= 1.0
    asked = _judge_requests(fake_judge)
    # one request per answer (VRAG-RL prompt), at most 2 at once (the policy's requests to the same
    # server are counted apart)
    assert len(asked) == 3 and fake_judge.max_in_flight_by_model["judge-m"] <= 2
    assert "## Generated Answer\n{1}" in asked[0]["body"]["messages"][0]["content"]
    table = (tmp_path / "ok" / "tables.md").read_text()
    assert "Judge Acc" in table and "Judge unscored" in table

    fake_judge.mode, before = "fail", len(fake_judge.requests)
    assert main(_argv(fake_judge.url, tmp_path / "down", *judge)) == 0
    row = _row(tmp_path / "down")
    assert row["metrics"]["judge_unscored"] == 3.0  # counted, not scored 0
    assert "judge_accuracy" not in row["metrics"]
    assert len(_judge_requests(fake_judge)) - 3 == 3 * 2  # each answer: 1 attempt + 1 retry
    assert len(fake_judge.requests) - before == 3 + 3 * 2  # the policy's 3 answers, then the judge's


def test_bad_judge_options_fail_before_the_model_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "eval",
        "--synthetic",
        "tunnel.chain",
        "--n",
        "1",
        "--paradigm",
        "direct",
        "--model",
        str(tmp_path / "no-such-checkpoint"),
        "--out",
        str(tmp_path / "o"),
    ]
    assert main([*argv, "--judge", "openai", "--judge-model", "m"]) == 2
    assert "judge.base_url" in capsys.readouterr().err
    assert main([*argv, "--judge", "gpt"]) == 2
    assert "unknown judge 'gpt'" in capsys.readouterr().err
    assert (
        main(
            [
                *argv,
                "--judge",
                "openai",
                "--judge-url",
                "http://127.0.0.1:9/v1",
                "--judge-model",
                "m",
                "--judge-concurrency",
                "-1",
            ]
        )
        == 2
    )
    assert "judge.concurrency must be >= 1, got -1" in capsys.readouterr().err


def test_endpoint_and_judge_keys_come_from_their_variables(
    fake_judge: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POLICY_KEY", "sk-policy")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    judge = ["--judge", "openai", "--judge-url", fake_judge.url, "--judge-model", "judge-m"]
    fake_judge.policy_reply = "<think>t</think><answer>{1}</answer>"  # an answer, so the judge is asked
    assert main([*_argv(fake_judge.url, tmp_path / "k", *judge), "--api-key-env", "POLICY_KEY"]) == 0
    keys = {(r["body"]["model"], r["authorization"]) for r in fake_judge.requests}
    assert keys == {("policy-m", "Bearer sk-policy"), ("judge-m", None)}  # $OPENAI_API_KEY is unset
    before = len(fake_judge.requests)
    assert main([*_argv(fake_judge.url, tmp_path / "m"), "--api-key-env", "NO_SUCH_KEY_VAR"]) == 2
    assert "--api-key-env NO_SUCH_KEY_VAR: that environment variable is not set" in capsys.readouterr().err
    assert len(fake_judge.requests) == before  # refused before any request
