"""Benchmark metrics: hand-computed values for each official rule and its edge cases."""

from __future__ import annotations

import pytest

from evidra.core.errors import InvalidInputError, RegistryError
from evidra.eval.metrics import METRICS
from evidra.metrics.anls import anls, anls_vrag_upstream, levenshtein, normalize_docvqa
from evidra.metrics.mmlongbench import (
    NOT_ANSWERABLE,
    ScoredAnswer,
    mmlongbench_acc_f1,
    mmlongbench_clean,
    mmlongbench_is_exact_type,
    mmlongbench_score,
)
from evidra.metrics.qa import (
    normalize_slidevqa,
    normalize_vqa,
    relaxed_accuracy,
    slidevqa_em,
    slidevqa_f1,
    token_f1,
    visrag_accuracy,
)


def test_levenshtein() -> None:
    assert levenshtein("", "") == 0
    assert levenshtein("abc", "") == 3
    assert levenshtein("flaw", "lawn") == 2
    assert levenshtein("naïve", "naive") == 1


def test_anls_docvqa_rules() -> None:
    assert normalize_docvqa("  A  b\tC ") == "a b c"
    assert anls(" PARIS ", ["paris"]) == 1.0
    # "abcde" vs "abcxy": lev 2 / 5 = 0.4 < 0.5 -> 0.6
    assert anls("abcde", ["abcxy"]) == pytest.approx(0.6)
    # exactly 0.5: kept by lmms-eval, zeroed by MMLongBench
    assert anls("ab", ["abcd"]) == 0.5
    assert anls("ab", ["abcd"], edge="zero") == 0.0
    assert anls("x", ["abcd"]) == 0.0  # NL = 1
    assert anls("", [""]) == 1.0
    assert anls("x", []) == 0.0
    assert anls("cat", ["dog", "cat"]) == 1.0  # max over answers


def test_anls_vrag_upstream_is_case_sensitive() -> None:
    assert anls_vrag_upstream(["Paris"], "paris", threshold=0.5) == pytest.approx(0.8)  # lev 1 / 5
    assert anls_vrag_upstream(["Paris"], " Paris", threshold=0.5) == pytest.approx(5 / 6)
    # default threshold 0.7: NL = 0.6 passes -> 0.4
    assert anls_vrag_upstream(["abcde"], "abxyz") == pytest.approx(0.4)
    with pytest.raises(InvalidInputError):
        anls_vrag_upstream([], "x")


def test_relaxed_accuracy() -> None:
    assert relaxed_accuracy("105", "100") == 1.0  # 5% exactly
    assert relaxed_accuracy("105.1", "100") == 0.0
    assert relaxed_accuracy("50%", "0.5") == 1.0
    assert relaxed_accuracy("0", "0") == 1.0  # zero target: string compare
    assert relaxed_accuracy("0.0", "0") == 0.0
    assert relaxed_accuracy("Blue", "blue") == 1.0
    assert relaxed_accuracy(" blue", "blue") == 0.0  # no other normalisation


def test_mmlongbench_clean_and_exact_types() -> None:
    assert mmlongbench_clean("'Hello (world)'") == "hello"
    assert mmlongbench_clean("$5%") == "5"
    for s in ("https://x.org", "run.py", "page 3", "555-1234", "10 a.m.", "2020-01-02", "2020-01", "a@b.co"):
        assert mmlongbench_is_exact_type(s), s
    assert not mmlongbench_is_exact_type("blue whale")


def test_mmlongbench_score_types() -> None:
    assert mmlongbench_score("3", "3.0", "Int") == 1.0
    assert mmlongbench_score("3", "three", "Int") == 0.0
    # Float: gold 12.5, pred 12.51 -> isclose(rel 1%) -> 1
    assert mmlongbench_score("12.5", "12.51", "Float") == 1.0
    assert mmlongbench_score("12.5", "13", "Float") == 0.0
    assert mmlongbench_score("0.4", "40%", "Float") == 1.0  # gold*100 candidate
    assert mmlongbench_score("abc", "1", "Float") == 0.0  # released code raised here
    # Str: ANLS zeroed at <= 0.5; "apple" vs "apples": lev 1 / 6 -> 0.8333
    assert mmlongbench_score("Apple", "apples", "Str") == pytest.approx(5 / 6)
    assert mmlongbench_score("2020-01-02", "2020-01-03", "Str") == 0.0  # exact-match type
    assert mmlongbench_score(NOT_ANSWERABLE, "not answerable", "None") == 1.0
    with pytest.raises(InvalidInputError, match="Bool"):
        mmlongbench_score("1", "1", "Bool")


def test_mmlongbench_list_no_eval() -> None:
    assert mmlongbench_score("['b', 'a']", "['A', 'B']", "List") == 1.0
    assert mmlongbench_score("['a', 'b']", "['a']", "List") == 0.0  # length mismatch
    assert mmlongbench_score("[1.5, 2]", "[2, 1.5]", "List") == 1.0  # float-like: joined equality
    # ANLS branch takes the minimum: "apple"/"apples" 0.8333 and "kiwi"/"kiwi" 1 -> 0.8333
    assert mmlongbench_score("['apple', 'kiwi']", "['apples', 'kiwi']", "List") == pytest.approx(5 / 6)
    # not a literal: scalar fallback, never eval()
    assert mmlongbench_score("[__import__('os')]", "x", "List") == 0.0
    assert mmlongbench_score('["a"]', "a", "List") == 1.0  # JSON list vs scalar


def test_mmlongbench_acc_f1() -> None:
    items = [
        ScoredAnswer("a", "a", 1.0),
        ScoredAnswer("b", NOT_ANSWERABLE, 0.0),
        ScoredAnswer(NOT_ANSWERABLE, NOT_ANSWERABLE, 1.0),
        ScoredAnswer("c", "x", 0.0),
    ]
    acc, f1 = mmlongbench_acc_f1(items)
    # acc 2/4; R = 1/3 (answerable a,b,c); P = 1/2 (preds != NA: a, x) -> F1 = 2*(1/3)(1/2)/(5/6) = 0.4
    assert acc == 0.5
    assert f1 == pytest.approx(0.4)
    assert mmlongbench_acc_f1([]) == (0.0, 0.0)


def test_slidevqa() -> None:
    assert normalize_slidevqa("Twelve", "") == "12"
    assert normalize_slidevqa("5 employees", "how many employees joined?") == "5"
    # released rule: the question is not lowercased, so "How many" removes no unit
    assert normalize_slidevqa("5 employees", "How many employees joined?") == "5 employees"
    assert normalize_slidevqa("No, never.", "") == "no"
    assert normalize_slidevqa("Northern area", "") == "northern"  # "no" prefix rule, as released
    assert normalize_slidevqa("The Apple", "which company is it?") == "apple"
    assert normalize_slidevqa("Salt & pepper", "") == "salt pepper"  # & -> "," -> removed
    assert normalize_slidevqa("80 percent", "") == "80"
    assert normalize_slidevqa("x", "how many") == "x"  # no word after the cue: skipped
    assert slidevqa_em("Three.", "3") == 1.0
    assert slidevqa_em("", "") == 0.0  # no overlap: skipped (0) by the released script
    # pred "red big car", gold "red car": overlap 2, P 2/3, R 1 -> F1 0.8
    assert slidevqa_f1("red big car", "a red car") == pytest.approx(0.8)
    assert token_f1([], []) == 0.0 and token_f1(["a"], []) == 0.0


def test_vqa_normalisation_and_visrag_accuracy() -> None:
    assert normalize_vqa("The two cats!") == "2 cats"
    assert normalize_vqa("1,000") == "1000"  # digit-grouping comma dropped (VQA eval)
    assert normalize_vqa("3.5 m.") == "3.5 m"
    assert normalize_vqa("dont") == "don't"
    assert visrag_accuracy("Ten", ["10"]) == 1.0
    assert visrag_accuracy("45%", ["45"]) == 1.0  # one-sided % dropped
    assert visrag_accuracy("104", ["100"], dataset="PlotQA") == 1.0
    assert visrag_accuracy("104", ["100"]) == 0.0
    assert visrag_accuracy("(B) a cat", ["B"], dataset="arxivqa") == 1.0
    assert visrag_accuracy("x", ["y", "x"], dataset="infovqa") == 1.0


def test_metric_registry_metadata() -> None:
    assert METRICS.get("anls").fn("a", ["a"]) == 1.0
    assert METRICS.get("anls_mmlongbench").fn("ab", ["abcd"]) == 0.0
    assert METRICS.get("levenshtein").higher_is_better is False
    assert METRICS.get("mmlongbench_score").aggregation == "f1"
    with pytest.raises(RegistryError, match="did you mean"):
        METRICS.get("anlss")
