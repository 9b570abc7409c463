"""``evidra.safeio.keys``: the allow-list of the user's environment, matched by variable, host and port,
and redaction (hand-written cases)."""

from __future__ import annotations

import logging

import pytest

from evidra.core.errors import ConfigError
from evidra.safeio.keys import KeyPolicy, KeyRule, allowed, parse_key_hosts, redact


@pytest.mark.parametrize(
    ("variable", "url", "hosts", "expected"),
    [
        ("K", "https://api.example.org/v1", "K@api.example.org", True),  # no port: any port
        ("K", "https://API.Example.org:8443/v1", "K@api.example.org", True),  # host case is not significant
        ("K", "https://api.example.org/v1", "K@api.example.org:443", True),  # the scheme's port
        ("K", "http://api.example.org/v1", "K@api.example.org:443", False),
        ("K", "https://api.example.org.evil.net/v1", "K@api.example.org", False),  # a suffix is another host
        ("K", "https://evil.net/?h=api.example.org", "K@api.example.org", False),
        ("K", "https://api.example.org@evil.net/v1", "K@api.example.org", False),  # userinfo is not the host
        ("J", "https://api.example.org/v1", "K@api.example.org", False),  # another variable
        ("K", "http://[::1]:8000/v1", "K@[::1]:8000", True),
        ("K", "http://127.0.0.1:8000/v1", "", False),
        ("K", "http://127.0.0.1:8000/v1", "bad-entry K@127.0.0.1", False),  # malformed: allows nothing
    ],
)
def test_allow_list_matches_variable_host_and_port(
    variable: str, url: str, hosts: str, expected: bool
) -> None:
    assert allowed(variable, url, hosts) is expected


def test_entries_parse_and_a_bad_one_is_named() -> None:
    assert parse_key_hosts(" A@h.org,B@h.org:81\nC@[::1] ") == (
        KeyRule("A", "h.org"),
        KeyRule("B", "h.org", 81),
        KeyRule("C", "::1"),
    )
    with pytest.raises(ConfigError, match=r"EVIDRA_KEY_HOSTS entry 'A@h.org/v1' is not VARIABLE@host"):
        parse_key_hosts("A@h.org/v1")


def test_a_files_url_gets_the_key_only_when_allowed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("K", "secret-value")
    monkeypatch.delenv("EVIDRA_KEY_HOSTS", raising=False)
    caplog.set_level(logging.WARNING)
    filed = KeyPolicy.file("judge.base_url")
    assert KeyPolicy().key("K", "http://h.example:9/v1") == "secret-value"
    assert filed.key("K", "http://h.example:9/v1") is None and filed.withheld("K", "http://h.example:9/v1")
    assert filed.key("K", "http://h.example:9/v1") is None
    assert caplog.text.count("The key in $K was not sent to h.example:9") == 1  # warned once
    assert "secret-value" not in caplog.text
    monkeypatch.setenv("EVIDRA_KEY_HOSTS", "K@h.example:9")
    assert filed.key("K", "http://h.example:9/v1") == "secret-value"
    monkeypatch.delenv("K")
    assert filed.key("K", "http://h.example:9/v1") is None and not filed.withheld(
        "K", "http://h.example:9/v1"
    )
    assert filed.key("", "http://h.example:9/v1") is None


def test_redact_replaces_every_occurrence_and_ignores_empty_secrets() -> None:
    assert redact("k=abc; again abc", ("abc", None, "")) == "k=***; again ***"
    assert redact("nothing here", ()) == "nothing here"
