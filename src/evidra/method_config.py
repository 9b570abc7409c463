"""The ``method:`` section of a training config: which paper method to train and its options.

It lives below every layer because the RL and SFT configs carry it, while only
``evidra.methods`` reads it (``evidra.methods.build_task``); the trainer sees the ``Task`` it
builds. Checked by ``evidra.methods.check_method`` before anything heavy loads.

```yaml
method:
  name: lat                     # lat | evisrag | lang2act | vragrl | cave
  similarity: colqwen2          # LAT's R_step similarity
  similarity_checkpoint: /models/colqwen2
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from evidra.rewards.judge_config import JudgeConfig


@dataclass(frozen=True)
class MethodConfig:
    # a paper method (evidra.methods.METHODS): lat | evisrag | lang2act | vragrl | cave; empty: the
    # run trains the plain task data.task names (the toy tasks)
    name: str = ""
    # paper: the reward as the paper writes it; upstream: as the method's released code computes
    # it (evisrag, vragrl; docs/methods.md lists the differences)
    reward_mode: Literal["paper", "upstream"] = "paper"
    # reward component -> weight, replacing the method's default weight of that component
    # (lat: accuracy step ground format; evisrag: its components; lang2act: answer and tool or
    # format; vragrl: retrieval answer pattern); empty: the paper's weights
    weights: dict[str, float] = field(default_factory=dict)
    # lat: R_step's similarity of a cropped box and a reasoning step: text_overlap (offline, the
    # page's text layer inside the box) or colqwen2 (late interaction, as the paper)
    similarity: Literal["text_overlap", "colqwen2"] = "text_overlap"
    # lat with similarity=colqwen2: the ColQwen2 checkpoint directory (loaded on first use)
    similarity_checkpoint: str = ""
    # lat: route the rewards to token scopes (evidence rewards on the reasoning, accuracy on the
    # answer) for algo.advantage=rs_grpo
    scoped: bool = False
    # lang2act: 1 (action exploration, answer + format) or 2 (tool-based RL, answer + tool validity)
    stage: int = 0
    # the answer judge of the methods that judge answers (lang2act, vragrl, cave); default: the
    # offline rule judge
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    # lang2act stage 2: a toolbox file (evidra data toolbox); empty: the paper's Figure 10 box
    toolbox: str = ""
    # vragrl: the search index (evidra index build) or a serve-index URL; lang2act: ranks the pages
    # for pages_per_question; empty: BM25 over the pages' text layer / the sample's own page order
    index: str = ""
    # lang2act: pages shown per question (the paper: the top 3); 0 shows every page of the sample
    pages_per_question: int = 0
