"""Lang2Act: stage 1 (action exploration) and stage 2 (tool-based RL) over synthetic documents
(Lang2Act §3.1-3.2, Eq. 12, App. A.4); ``method.stage`` picks one.

* stage 1: r_ans alone (Eq. 2, the objective of action exploration); the format of the three
  blocks is a logged component of weight 0. A.4's alpha = 0.8, beta = 0.2 weigh Eq. 12 (stage
  2); ``method.weights={answer: 0.8, format: 0.2}`` scores stage 1 as the released
  ``actionrl.py`` does (the weights apply); a ``tool`` weight is refused, stage 1 has no tools.
* stage 2: 0.8 * r_ans + 0.2 * r_tool, r_tool = I_valid(z | T_box) against the default toolbox
  (Figure 10), or the curated one of ``method.toolbox`` (``evidra data toolbox``).

r_ans comes from an LLM judge in the paper (``method.judge``); offline, a ``RuleJudge``
(normalised reference contained in the answer) stands in, so the recipes run without an
endpoint. ``method.pages_per_question`` shows each question its top pages (§4: 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from evidra.core.errors import ConfigError
from evidra.core.types import Message, Sample
from evidra.env.single_turn import SingleTurnEnv
from evidra.methods._benchmark import IMAGE_QA, adapter
from evidra.methods._synth import synth_samples
from evidra.methods.lang2act.paradigm import (
    DEFAULT_TOOLBOX,
    Tool,
    Toolchain,
    parse_toolchain,
    toolchain_oracle_text,
)
from evidra.methods.lang2act.reward import LANG2ACT_RULES, lang2act_reward
from evidra.methods.method import (
    METHODS,
    Method,
    Resources,
    load_tools,
    merged_weights,
    method_judge,
    page_budget,
)
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_config import JudgeConfig
from evidra.rewards.judge_protocol import Judge
from evidra.rl.run_config import DataConfig
from evidra.rl.runs.model_card import Paper
from evidra.rl.tasks import Task


def lang2act_samples(cfg: DataConfig) -> list[Sample]:
    return synth_samples(cfg, "synth.lang2act")


def make_lang2act_task(
    name: str,
    stage: int,
    toolbox: tuple[Tool, ...] = DEFAULT_TOOLBOX,
    judge: Judge | None = None,
    weights: Mapping[str, float] | None = None,
) -> Task:
    """A Lang2Act task for ``stage`` (1 or 2) whose prompt lists ``toolbox`` and whose tool
    reward accepts exactly its names (e.g. a curated box from ``load_toolbox(path)``); ``judge``
    defaults to the offline ``RuleJudge``; ``weights`` (answer, format, tool) replace the stage
    reward's defaults."""
    paradigm = Toolchain(name=f"toolchain.stage{stage}", stage=stage, toolbox=toolbox)
    reward = lang2act_reward(
        "actionrl" if stage == 1 else "toolrl",
        judge=judge if judge is not None else RuleJudge(),
        toolbox=paradigm.tool_names,
        numeric_tools=paradigm.numeric_names,
    )
    reward = reward.reweighted(weights or {})

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
        from_benchmark=adapter(IMAGE_QA, name=name),
        from_synthetic=adapter(IMAGE_QA, name=name),  # e.g. data.synthetic=[reading]
    )


@dataclass(frozen=True)
class Lang2ActOptions:
    """The ``method:`` section of a Lang2Act recipe."""

    stage: int = 0  # 1: action exploration (answer; format logged); 2: tool-based RL (answer + tool validity)
    judge: JudgeConfig = field(default_factory=JudgeConfig)  # r_ans's judge; default: the offline rule
    toolbox: str = ""  # stage 2: a toolbox file (evidra data toolbox); empty: the paper's Figure 10 box
    index: str = ""  # ranks the pages for pages_per_question; empty: the sample's own page order
    pages_per_question: int = 0  # pages shown per question (the paper: the top 3); 0: every page
    # reward component -> weight over the stage's defaults (stage 1: answer 1, format 0;
    # stage 2: answer 0.8, tool 0.2)
    weights: Mapping[str, float] = field(default_factory=dict)


def build_lang2act(cfg: Lang2ActOptions, resources: Resources) -> Task:
    """Lang2Act's task of ``cfg.stage``, with its toolbox, judge, weights and page budget."""
    if cfg.stage not in (1, 2):
        raise ConfigError(f"method.stage must be 1 or 2 for lang2act, got {cfg.stage}; set method.stage=1|2")
    if cfg.toolbox and cfg.stage != 2:
        raise ConfigError("method.toolbox is for lang2act stage 2; set method.stage=2 or remove the toolbox")
    if cfg.index and not cfg.pages_per_question:
        raise ConfigError("method.index ranks the pages of method.pages_per_question for lang2act; set both")
    select = page_budget(cfg.pages_per_question, cfg.index, resources)
    default = LANG2ACT_RULES.get("actionrl" if cfg.stage == 1 else "toolrl").weights
    weights = merged_weights("lang2act", default, cfg.weights)
    toolbox = load_tools(cfg.toolbox) if cfg.toolbox else DEFAULT_TOOLBOX
    judge = method_judge(cfg.judge, resources, LANG2ACT.judge_prompt, RuleJudge())
    name = f"lang2act.stage{cfg.stage}"
    task = make_lang2act_task(name, cfg.stage, toolbox, judge, weights)
    return replace(task, select_pages=select)


LANG2ACT = Method(
    name="lang2act",
    options=Lang2ActOptions,
    build=build_lang2act,
    paradigm="toolchain",
    summary="Lang2Act: linguistic tools emerge in stage 1, curated into a toolbox, used in stage 2",
    judge_prompt="lang2act",
    eval_judge_prompt="lang2act.eval",  # §4 and Figure 16: the evaluation judge's own prompt
    stages=("filter", "toolbox"),
    citation=Paper(
        "Lang2Act: Fine-Grained Visual Reasoning through Self-Emergent Linguistic Toolchains",
        "Xiong et al.",
        code="https://github.com/NEUIR/Lang2Act",
    ),
)
METHODS.add("lang2act", LANG2ACT)
