"""Text primitives: each normaliser and score against hand-computed values."""

from __future__ import annotations

import pytest

from evidra.metrics.text import (
    bow_f1,
    dpr_tokens,
    exact_match,
    is_insufficient,
    is_no_answer,
    normalize_lat,
    normalize_squad,
    set_f1,
    soft_exact_match,
    substring_em,
    token_recall,
    visa_answer_match,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Answer", "answer"),
        ("U.S.A.", "usa"),
        ("“Quoted” text", "“quoted” text"),  # Unicode quotes are not ASCII punctuation
        ("a-b", "ab"),
        ("  many   spaces\n", "many spaces"),
        ("then there", "then there"),  # 'the' only as a whole word
        ("50%", "50"),
    ],
)
def test_normalize_squad(text: str, expected: str) -> None:
    assert normalize_squad(text) == expected


@pytest.mark.parametrize(
    ("text", "upstream", "paper"),
    [
        ("The Answer", "answer", "answer"),
        ("A", "", ""),
        ("Hello—World", "helloworld", "helloworld"),  # em dash is \p{Pd}
        ("€5 “x”", "5 x", "5 x"),  # currency symbol \p{Sc} and curly quotes removed
        ("1 - 2", "1  2", "1 2"),  # upstream leaves a double space
        ("the cat", "cat", "cat"),
    ],
)
def test_normalize_lat(text: str, upstream: str, paper: str) -> None:
    assert normalize_lat(text) == upstream
    assert normalize_lat(text, upstream=False) == paper


def test_dpr_tokens_nfd_and_uncased() -> None:
    # NFD splits "é" into e + combining acute, which stays in the alphanumeric run (\p{M})
    assert dpr_tokens("Café 5%") == ["cafe\u0301", "5", "%"]
    assert dpr_tokens("") == []


def test_visa_answer_match() -> None:
    assert visa_answer_match("The answer is John Williams.", "John Williams")
    assert visa_answer_match("Williams", "John Williams")  # prediction inside gold
    assert not visa_answer_match("John", "Williams")
    # 26 characters longer than the gold: rejected despite containing it
    assert not visa_answer_match("John Williams wrote the music", "Jo")
    assert not visa_answer_match("", "")  # empty token lists never match


def test_soft_em_and_recall() -> None:
    assert soft_exact_match("john williams", "williams")
    assert not soft_exact_match("john", "paris")
    assert token_recall("john", "john williams") == 0.5
    assert token_recall("", "john") == 0.0
    assert token_recall("a a a", "a") == 1.0  # multiset overlap capped by gold counts


def test_f1_variants() -> None:
    assert set_f1("a a b", "b") == 1.0  # 'a' is an article and is removed: {b} vs {b}
    # sets {x, y} vs {y}: P = 1/2, R = 1 -> F1 = 2/3 (duplicates ignored)
    assert set_f1("x x y", "y") == pytest.approx(2 / 3)
    # bag of words: "x x y" vs "x y y": overlap 2, P = R = 2/3
    assert bow_f1("x x y", "x y y") == pytest.approx(2 / 3)
    assert bow_f1("john williams", "john williams", eps=1e-7) == pytest.approx(0.99999995, abs=1e-12)
    assert set_f1("", "") == 0.0 and bow_f1("", "") == 0.0


def test_substring_and_exact() -> None:
    assert substring_em("concatenate", "cat") == 1.0  # character-level, as upstream
    assert substring_em("anything", "") == 1.0
    assert substring_em("5 %", "5%") == 1.0
    assert exact_match("The Beatles", "beatles") == 1.0
    assert exact_match("Beatles!", "Beatle") == 0.0


def test_refusal_detection() -> None:
    assert is_insufficient("Insufficient to answer the question.")
    assert is_insufficient("No relevant information")
    assert not is_insufficient("The answer is insufficient to answer")
    assert is_no_answer("NO ANSWER")
    assert not is_no_answer("not sure")
