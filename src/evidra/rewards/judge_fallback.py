"""A model-based judge with an offline stand-in, for recipes that ship the paper's judge.

VRAG-RL (§3.3, App. A) and Lang2Act (§3.1, §4) score answers with an LLM judge because a rule
such as containment is easy to hack: "London, Berlin, Paris, Rome, Madrid" contains "Paris". Their
recipes therefore name an OpenAI-compatible endpoint (``judge.kind: openai``) with
``judge.fallback: rule``: when no endpoint is configured (empty ``base_url``), or the configured
one does not accept a connection when the judge is first asked, the rule judge scores instead
and one log line says so. The recipes keep the reward-hacking guards on for exactly that case.

The check is made once, on first use (building a task or checking a config never connects).
An endpoint that answered once and fails later leaves its items unscored, as any endpoint
judge does: the reward's scale never switches in the middle of a run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from evidra.rewards.judge_protocol import Judge, JudgeItem, Verdict

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0  # connecting to a judge server on the same network takes milliseconds

# base_url -> None when the endpoint accepts a connection, else why not
Probe = Callable[[str], str | None]


def endpoint_unreachable(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why ``base_url`` cannot be reached, or None when its server answers at all (any HTTP status:
    a server that refuses the request is reachable, and its errors show on the first judgement).
    One ``GET {base_url}/models`` without a key; the reply's body is never read."""
    import httpx  # a core dependency, imported when a probe is made

    try:
        with httpx.stream("GET", base_url.rstrip("/") + "/models", timeout=timeout_s):
            return None
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class FallbackJudge:
    """``primary`` (an endpoint judge) when ``url`` answers on first use, else ``fallback``;
    ``probe`` checks ``url`` (default: ``endpoint_unreachable``)."""

    def __init__(self, primary: Judge, fallback: Judge, url: str, probe: Probe | None = None) -> None:
        self.primary, self.fallback, self.url, self.probe = primary, fallback, url, probe
        self._chosen: Judge | None = None
        self._lock = threading.Lock()

    def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return self.active().judge(items)

    def active(self) -> Judge:
        """The judge in use, chosen on the first call (one probe of ``url``)."""
        with self._lock:
            if self._chosen is None:
                reason = (self.probe or endpoint_unreachable)(self.url)
                self._chosen = self.primary if reason is None else self.fallback
                if reason is not None:
                    logger.warning(
                        "judge endpoint %s is not reachable (%s); answers are scored by the offline "
                        "fallback %r instead (start the judge server, or set method.judge.fallback='' "
                        "to leave them unscored)",
                        self.url,
                        reason,
                        self.fallback,
                    )
            return self._chosen

    def __getstate__(self) -> dict[str, object]:  # a copy in another process probes on its own
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def offline_fallback(fallback: Judge, reason: str) -> Judge:
    """``fallback`` itself, with the one log line that says it scores instead of an endpoint."""
    logger.warning("%s; answers are scored by the offline fallback %r", reason, fallback)
    return fallback
