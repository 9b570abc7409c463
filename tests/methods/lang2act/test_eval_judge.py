"""Lang2Act evaluates answers with its own judge prompt (§4 "Evaluation Metrics", Figure 16), and
``evidra eval --method lang2act --judge openai`` asks it by default."""

from __future__ import annotations

import argparse
from pathlib import Path

from evidra.cli._eval_method import MethodEval
from evidra.cli.eval import _judge
from evidra.methods import METHODS
from evidra.rewards.judge_http import OpenAIJudge
from evidra.rewards.judge_prompts import build_messages
from evidra.rewards.judge_protocol import JudgeItem

# Figure 16, "VLM Judge Prompt", as printed
FIGURE_16_SYSTEM = (
    "You are an expert evaluation system for a question answering chatbot. You will be given one "
    "evaluation item. You will see a query, a reference answer, and a generated answer. Your task is "
    "to evaluate the correctness of the generated answer. Your response **MUST** be exactly one line, "
    "formatted as `<judge>True</judge>` if the generated answer is correct, or `<judge>False</judge>` "
    "otherwise. Do not add any other text or explanations."
)


def test_figure_16_prompt_is_registered_verbatim() -> None:
    item = JudgeItem("Which city? {query}", "Paris", "It is Paris.")
    assert build_messages("lang2act.eval", [item]) == [
        {"role": "system", "content": FIGURE_16_SYSTEM},
        {
            "role": "user",
            "content": "Query: Which city? {query}\n\nReference Answer: Paris\n\n"
            "Generated Answer: It is Paris.",
        },
    ]


def test_lang2act_evaluates_with_figure_16_and_trains_with_its_batched_prompt() -> None:
    lang2act = METHODS.get("lang2act")
    assert (lang2act.judge_prompt, lang2act.evaluation_judge_prompt) == ("lang2act", "lang2act.eval")
    assert METHODS.get("vragrl").evaluation_judge_prompt == "vragrl"  # the others evaluate as they train


def test_eval_cli_asks_the_methods_evaluation_prompt(tmp_path: Path) -> None:
    args = argparse.Namespace(
        judge="openai",
        judge_url="http://127.0.0.1:9/v1",  # never called: the judge is only built
        judge_model="judge",
        judge_api_key_env="",
        judge_prompt=None,
        judge_concurrency=1,
        judge_timeout=1.0,
        judge_retries=0,
    )
    method = MethodEval(METHODS.get("lang2act"), None)
    judge = _judge(args, tmp_path, method)
    assert isinstance(judge, OpenAIJudge) and judge.config.style == "lang2act.eval"
    args.judge_prompt = "lang2act"
    assert _judge(args, tmp_path, method).config.style == "lang2act"
