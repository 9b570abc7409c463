"""The answer judge chosen from config: a rule, or an OpenAI-compatible endpoint.

A recipe's ``judge:`` section (``JudgeConfig``) is used by the training rewards that judge an
answer (VRAG-RL, Lang2Act, CAVE) and by ``evidra eval --judge ...``:

```yaml
judge:
  kind: openai                       # rule (offline, default) | openai
  base_url: http://localhost:8001/v1 # any OpenAI-compatible server (vLLM, SGLang, hosted)
  model: Qwen2.5-72B-Instruct
  api_key_env: JUDGE_API_KEY         # the key is read from this variable (default OPENAI_API_KEY)
  concurrency: 8
  timeout_s: 60                      # one request, wall clock
  max_retries: 3                     # bounded; a judgement that still fails is unscored, not 0
  max_wait_s: 120                    # total backoff of one request's retries
  fallback: rule                     # no endpoint configured or reachable: the rule judge, said once
```

``prompt`` picks a registered judge prompt (``evidra.rewards.judge_prompts``): ``vragrl`` (one
item per request, VRAG-RL's template), ``lang2act`` (Lang2Act's batched system prompt),
``lang2act.eval`` (Lang2Act's evaluation prompt, Figure 16) or ``cave`` (one short answer, exact
match); empty uses the task's own.

A recipe is a file, so the key in ``$api_key_env`` goes to its ``base_url`` only when the user's
environment allows the pair (``EVIDRA_KEY_HOSTS=JUDGE_API_KEY@host:port``, see ``evidra.safeio.keys``);
otherwise requests go without a key. ``evidra eval --judge-url`` is the user's own flag:
``build_judge(..., key_policy=KeyPolicy())``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from evidra.core.errors import ConfigError, RegistryError
from evidra.core.registry import Registry
from evidra.openai.client import DEFAULT_API_KEY_ENV, check_api_key_env
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_fallback import FallbackJudge, offline_fallback
from evidra.rewards.judge_http import HttpJudgeConfig, JudgeCache, OpenAIJudge
from evidra.rewards.judge_prompts import JUDGE_PROMPTS
from evidra.rewards.judge_protocol import Judge
from evidra.safeio.keys import KeyPolicy, check_key_hosts


@dataclass(frozen=True)
class JudgeConfig:
    kind: str = "rule"  # a JUDGES name: rule | openai
    rule: Literal["", "exact", "contains", "stripped_lower", "braced"] = (
        ""  # rule judge's match; "": the task's
    )
    base_url: str = ""  # openai: e.g. http://localhost:8001/v1
    model: str = ""  # openai: the model name the server serves
    # openai: environment variable holding the API key (sent as a Bearer token; none when unset); "": none
    api_key_env: str = DEFAULT_API_KEY_ENV
    prompt: str = ""  # a JUDGE_PROMPTS name (vragrl | lang2act | lang2act.eval | cave); "": the task's own
    batch_size: int = 10  # items per request with the lang2act prompt (toolrl 10, actionrl 5)
    concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 3
    max_wait_s: float = 120.0  # total wait between the retries of one request
    temperature: float = 0.0
    max_tokens: int = 0  # 0: the server's default
    # openai: what scores when no base_url is set, or the endpoint does not answer on first use
    # (``evidra.rewards.judge_fallback``): rule (the rule judge, one log line says so); "": nothing
    # (an unreachable endpoint leaves answers unscored)
    fallback: Literal["", "rule"] = ""

    @property
    def is_default(self) -> bool:
        """The offline rule judge with the task's own settings (what a task uses without config)."""
        return self.kind == "rule" and not self.rule


# (config, the task's default prompt style, who named base_url)
JudgeFactory = Callable[[JudgeConfig, str, KeyPolicy], Judge]
JUDGES: Registry[JudgeFactory] = Registry("judge")


@JUDGES.register("rule")
def _rule(cfg: JudgeConfig, default_prompt: str, key_policy: KeyPolicy) -> Judge:
    return RuleJudge(cfg.rule or "contains")


@JUDGES.register("openai")
def _openai(cfg: JudgeConfig, default_prompt: str, key_policy: KeyPolicy) -> Judge:
    if not cfg.base_url:  # validate_judge allows this only with a fallback
        return offline_fallback(_rule(cfg, default_prompt, key_policy), "no judge endpoint is configured")
    style = cfg.prompt or default_prompt
    http = HttpJudgeConfig(
        base_url=cfg.base_url,
        model=cfg.model,
        style=style,
        api_key_env=cfg.api_key_env,
        batch_size=cfg.batch_size,
        concurrency=cfg.concurrency,
        timeout_s=cfg.timeout_s,
        max_retries=cfg.max_retries,
        max_wait_s=cfg.max_wait_s,
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens or None,
        key_policy=key_policy,
    )
    judge = OpenAIJudge(http)
    judge.client_config.key()  # a withheld key is warned about now, before any work
    if cfg.fallback:
        return FallbackJudge(judge, _rule(cfg, default_prompt, key_policy), cfg.base_url)
    return judge


def validate_judge(cfg: JudgeConfig) -> None:
    """One-line ``ConfigError`` for the first bad field (no connection is made)."""
    if cfg.kind not in JUDGES:
        try:
            JUDGES.get(cfg.kind)
        except RegistryError as exc:
            raise ConfigError(f"judge.kind: {exc}") from None
    if cfg.prompt and cfg.prompt not in JUDGE_PROMPTS:
        try:
            JUDGE_PROMPTS.get(cfg.prompt)
        except RegistryError as exc:
            raise ConfigError(f"judge.prompt: {exc}") from None
    if cfg.kind == "openai" and (cfg.base_url or not cfg.fallback):
        if not cfg.base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"judge.base_url must be an http(s) URL of an OpenAI-compatible server, got {cfg.base_url!r}"
            )
        if not cfg.model:
            raise ConfigError("judge.model is empty: name the model the judge server serves")
        check_api_key_env(cfg.api_key_env, "judge.api_key_env")
        check_key_hosts()
    for name in ("batch_size", "concurrency"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"judge.{name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.max_retries < 0 or cfg.timeout_s <= 0 or cfg.max_tokens < 0 or cfg.max_wait_s < 0:
        raise ConfigError(
            f"judge.max_retries, max_tokens and max_wait_s must be >= 0 and timeout_s > 0, got "
            f"{cfg.max_retries}, {cfg.max_tokens}, {cfg.max_wait_s}, {cfg.timeout_s}"
        )


def build_judge(
    cfg: JudgeConfig,
    default_prompt: str = "vragrl",
    cache: JudgeCache | None = None,
    key_policy: KeyPolicy | None = None,
) -> Judge:
    """The judge ``cfg`` describes; ``default_prompt`` is the task's paper prompt style; an
    endpoint judge keeps its replies in ``cache`` (e.g. ``DiskCache``) when one is given.
    ``key_policy``: who named ``cfg.base_url``; by default a file (``judge.base_url`` of a recipe),
    whose key goes only where ``EVIDRA_KEY_HOSTS`` allows."""
    validate_judge(cfg)
    policy = key_policy if key_policy is not None else KeyPolicy.file("judge.base_url")
    judge = JUDGES.get(cfg.kind)(cfg, default_prompt, policy)
    endpoint = judge.primary if isinstance(judge, FallbackJudge) else judge
    if cache is not None and isinstance(endpoint, OpenAIJudge):
        endpoint.cache = cache
    return judge
