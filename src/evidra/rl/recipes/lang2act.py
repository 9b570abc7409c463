"""Lang2Act tasks: stage 1 (action exploration) and stage 2 (tool-based RL) over synthetic
documents (Lang2Act §3.1-3.2, Eq. 12, App. A.4).

* ``lang2act.stage1``: 0.8 * r_ans + 0.2 * format (three non-empty blocks).
* ``lang2act.stage2``: 0.8 * r_ans + 0.2 * r_tool, r_tool = I_valid(z | T_box) against the
  default toolbox (Figure 10), or the curated one of ``data.toolbox`` (``evidra data toolbox``).

r_ans comes from an LLM judge in the paper; offline, a ``RuleJudge`` (normalised reference
contained in the answer) stands in, so the recipes run without an endpoint.
"""

from __future__ import annotations

from evidra.env.single_turn import SingleTurnEnv
from evidra.paradigms.toolchain import (
    DEFAULT_TOOLBOX,
    Tool,
    Toolchain,
    parse_toolchain,
    toolchain_oracle_text,
)
from evidra.rewards.judge import Judge, RuleJudge
from evidra.rewards.lang2act import Lang2ActReward
from evidra.rl.config import DataConfig
from evidra.rl.recipes._benchmark import IMAGE_QA, adapter
from evidra.rl.recipes._synth import synth_samples
from evidra.rl.tasks import TASKS, Task
from evidra.types import Message, Sample


def lang2act_samples(cfg: DataConfig) -> list[Sample]:
    return synth_samples(cfg, "synth.lang2act")


def make_lang2act_task(
    name: str, stage: int, toolbox: tuple[Tool, ...] = DEFAULT_TOOLBOX, judge: Judge | None = None
) -> Task:
    """A Lang2Act task for ``stage`` (1 or 2) whose prompt lists ``toolbox`` and whose tool
    reward accepts exactly its names (e.g. a curated box from ``load_toolbox(path)``); ``judge``
    defaults to the offline ``RuleJudge``."""
    paradigm = Toolchain(name=f"toolchain.stage{stage}", stage=stage, toolbox=toolbox)
    reward = Lang2ActReward(
        stage="actionrl" if stage == 1 else "toolrl",
        judge=judge if judge is not None else RuleJudge(),
        toolbox=paradigm.tool_names,
        numeric_tools=paradigm.numeric_names,
    )

    def oracle(sample: Sample) -> list[Message]:
        prompt = paradigm.build_messages(sample, sample.pages)
        return [*prompt, Message.text("assistant", toolchain_oracle_text(sample, stage))]

    return Task(
        name=name,
        samples=lang2act_samples,
        make_env=lambda sample: SingleTurnEnv(paradigm),
        parse=parse_toolchain,
        reward=reward,
        oracle=oracle,
        from_benchmark=adapter(IMAGE_QA),
        with_judge=lambda other: make_lang2act_task(name, stage, toolbox, other),
        with_toolbox=(lambda tools: make_lang2act_task(name, stage, tools, judge)) if stage == 2 else None,
        judge_prompt="lang2act",
        ranks_pages=True,  # §4: the top-3 pages per question (data.pages_per_question)
    )


TASKS.add("lang2act.stage1", make_lang2act_task("lang2act.stage1", 1))
TASKS.add("lang2act.stage2", make_lang2act_task("lang2act.stage2", 2))
