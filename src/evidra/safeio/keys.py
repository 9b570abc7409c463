"""Where an API key read from the environment may go: only where the person running evidra said.

A recipe is a file people download. It may name a server (``judge.base_url``, ``method.index``)
and even the variable a key is read from (``judge.api_key_env``), but it must not decide that a
secret of the user's environment travels there. So a key read from an environment variable is
attached to a request only when

* the destination was named by the user: a command-line flag (``--endpoint``, ``--judge-url``,
  ``--teacher``, ``--index``) or an argument of evidra's Python API (``KeyPolicy()``, the default
  of the clients), the variable then named beside it in the same way; or
* a file named the destination (``KeyPolicy.file("judge.base_url")``) and the user's own
  environment allows that pair: ``EVIDRA_KEY_HOSTS`` lists ``VARIABLE@host`` or
  ``VARIABLE@host:port`` entries, separated by commas or spaces, e.g.
  ``EVIDRA_KEY_HOSTS="JUDGE_KEY@judge.example.org OPENAI_API_KEY@api.openai.com:443"``.

Otherwise the request goes **without** a key, and one warning per variable and host says which
entry would allow it. A refusal was the other choice; withholding keeps every keyless server (a
local ``vllm serve``, the demo, the tests) working whatever secrets the environment happens to
hold, never trusts the recipe, and costs a server that does need the key one 401, whose error
names the variable, the host and the entry to add (``withheld_hint``).

A key given explicitly (``api_key=`` in Python) goes where its caller sends it. Wherever a
server's text reaches an error message, ``redact`` first replaces the key sent with ``***``, so a
server that echoes it back cannot put it in a log or a verdict.

>>> allowed("JUDGE_KEY", "https://judge.example.org/v1", "JUDGE_KEY@judge.example.org")
True
>>> allowed("HF_TOKEN", "https://judge.example.org/v1", "JUDGE_KEY@judge.example.org")
False
>>> allowed("K", "http://127.0.0.1:8001/v1", "K@127.0.0.1:8000")
False
>>> redact("bad key sk-123 given", ("sk-123",))
'bad key *** given'
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from evidra.core.errors import ConfigError

logger = logging.getLogger(__name__)

KEY_HOSTS_ENV = "EVIDRA_KEY_HOSTS"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_ENTRY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)@(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$")
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True)
class KeyRule:
    """One ``VARIABLE@host[:port]`` entry of ``EVIDRA_KEY_HOSTS``; no port: any port."""

    variable: str
    host: str  # lower case, IPv6 without brackets
    port: int | None = None


def parse_key_hosts(text: str) -> tuple[KeyRule, ...]:
    """The entries of an ``EVIDRA_KEY_HOSTS`` value; ``ConfigError`` naming a malformed one.

    >>> parse_key_hosts("K@Example.org, J@[::1]:8000")
    (KeyRule(variable='K', host='example.org', port=None), KeyRule(variable='J', host='::1', port=8000))
    """
    rules = []
    for entry in re.split(r"[,\s]+", text.strip()):
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if match is None:
            raise ConfigError(
                f"{KEY_HOSTS_ENV} entry {entry!r} is not VARIABLE@host or VARIABLE@host:port; "
                f"e.g. JUDGE_KEY@judge.example.org:443"
            )
        variable, host, port = match.groups()
        rules.append(KeyRule(variable, host.strip("[]").lower(), int(port) if port else None))
    return tuple(rules)


def check_key_hosts() -> None:
    """``ConfigError`` when ``$EVIDRA_KEY_HOSTS`` holds a malformed entry (called before work starts)."""
    parse_key_hosts(os.environ.get(KEY_HOSTS_ENV, ""))


def destination(url: str) -> tuple[str, int | None]:
    """The host (lower case) and port a URL connects to; the scheme's port when none is written."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(parts.scheme.lower())


def _host_port(url: str) -> str:
    host, port = destination(url)
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port else host


def allowed(variable: str, url: str, key_hosts: str | None = None) -> bool:
    """Whether ``key_hosts`` (default ``$EVIDRA_KEY_HOSTS``) lets ``$variable`` go to ``url``;
    malformed entries allow nothing."""
    text = os.environ.get(KEY_HOSTS_ENV, "") if key_hosts is None else key_hosts
    try:
        rules = parse_key_hosts(text)
    except ConfigError:
        return False
    host, port = destination(url)
    return any(r.variable == variable and r.host == host and r.port in (None, port) for r in rules)


@dataclass(frozen=True)
class KeyPolicy:
    """Who named a request's destination, and so whether a key from the environment may go there.

    ``KeyPolicy()``: the user did (a flag, a Python argument). ``KeyPolicy.file(option)``: a file
    did, through ``option`` (e.g. ``"judge.base_url"``); its key needs an ``EVIDRA_KEY_HOSTS`` entry.
    """

    named_by: str = "the user"
    by_user: bool = True

    @classmethod
    def file(cls, option: str) -> KeyPolicy:
        return cls(named_by=option, by_user=False)

    def key(self, variable: str, url: str) -> str | None:
        """``$variable`` when it is set and may go to ``url``; else None (warned once when withheld)."""
        value = (os.environ.get(variable) or None) if variable else None
        if value is None or self.by_user or allowed(variable, url):
            return value
        where = (variable, _host_port(url))
        with _warned_lock:
            first = where not in _warned
            _warned.add(where)
        if first:
            hint = self.withheld_hint(variable, url)
            logger.warning("%s%s", hint[0].upper(), hint[1:])
        return None

    def withheld(self, variable: str, url: str) -> bool:
        """True when ``$variable`` is set but is not sent to ``url``."""
        return bool(variable and os.environ.get(variable)) and self.key(variable, url) is None

    def withheld_hint(self, variable: str, url: str) -> str:
        """One clause naming the variable, the host and the ``EVIDRA_KEY_HOSTS`` entry to add."""
        return (
            f"the key in ${variable} was not sent to {_host_port(url)}, which {self.named_by} names; "
            f"to send it, set {KEY_HOSTS_ENV}={variable}@{_host_port(url)}"
        )


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every occurrence of each non-empty secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
