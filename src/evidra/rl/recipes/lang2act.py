"""Lang2Act tasks: stage 1 (action exploration) and stage 2 (tool-based RL) over synthetic
documents (Lang2Act §3.1-3.2, Eq. 12, App. A.4).

* ``lang2act.stage1``: 0.8 * r_ans + 0.2 * format (three non-empty blocks).
* ``lang2act.stage2``: 0.8 * r_ans + 0.2 * r_tool, r_tool = I_valid(z | T_box) against the
  default toolbox (Figure 10).

r_ans comes from an LLM judge in the paper; offline, a ``RuleJudge`` (normalised reference
contained in the answer) stands in, so the recipes run without an endpoint.
"""

from __future__ import annotations

from collections.abc import Callable

from evidra.env.single_turn import SingleTurnEnv
from evidra.paradigms.toolchain import Toolchain, parse_toolchain, toolchain_oracle_text
from evidra.rewards.judge import RuleJudge
from evidra.rewards.lang2act import Lang2ActReward
from evidra.rl.config import DataConfig
from evidra.rl.recipes._synth import synth_samples
from evidra.rl.tasks import TASKS, Task
from evidra.types import Message, Sample


def lang2act_samples(cfg: DataConfig) -> list[Sample]:
    return synth_samples(cfg, "synth.lang2act")


def _env(stage: int) -> Callable[[Sample], SingleTurnEnv]:
    return lambda sample: SingleTurnEnv(Toolchain(stage=stage))


def _oracle(stage: int) -> Callable[[Sample], list[Message]]:
    def oracle(sample: Sample) -> list[Message]:
        prompt = Toolchain(stage=stage).build_messages(sample, sample.pages)
        return [*prompt, Message.text("assistant", toolchain_oracle_text(sample, stage))]

    return oracle


for _stage, _reward_stage in ((1, "actionrl"), (2, "toolrl")):
    TASKS.add(
        f"lang2act.stage{_stage}",
        Task(
            name=f"lang2act.stage{_stage}",
            samples=lang2act_samples,
            make_env=_env(_stage),
            parse=parse_toolchain,
            reward=Lang2ActReward(stage=_reward_stage, judge=RuleJudge()),  # type: ignore[arg-type]
            oracle=_oracle(_stage),
        ),
    )
