"""Every parser, reward and helper that reads model text is total and linear on hostile input.

Model output is hostile input: tag soup, tags opened and never closed thousands of times, NaN and
infinities, digit runs past Python's int-conversion limit, digits of other scripts. For every
family (paradigm parsers, rewards and their helpers, environments) a fixed-seed generator builds
such strings; each target must return (no exception), keep its numbers finite, and take time
proportional to the length of its input (64 KB of an unclosed tag costs at most ~16x 8 KB).
The default run checks hundreds of strings per target; ``-m slow`` checks thousands and every
target against every repeated fragment.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from PIL import Image

from evidra.core.types import Parsed, Sample
from evidra.env.toy import KeyValueEnv
from evidra.methods.cave.paradigm import parse_zoom_call
from evidra.methods.evisrag import reward as evisrag
from evidra.methods.evisrag.paradigm import evidence_entries
from evidra.methods.lang2act import format as l2a
from evidra.methods.lang2act import reward as lang2act
from evidra.methods.lat import parse as lat_parse
from evidra.methods.lat import rules as lat_scoring
from evidra.methods.lat import upstream_boxes
from evidra.methods.unidoc import paradigm as unidoc_paradigm
from evidra.methods.unidoc import reward as unidoc
from evidra.methods.vragrl import reward as vragrl
from evidra.metrics import qa
from evidra.paradigms import PARADIGMS, search_agent
from evidra.paradigms.paradigm import first_tag
from evidra.rewards import boxes, judge_protocol, toy
from evidra.rewards.judge import RuleJudge

GOLD = (
    "<evidence>[1]: revenue was 5 million dollars\n[2]: no relevant information</evidence><answer>5</answer>"
)
PAGES = [Image.new("RGB", (1000, 1400)), Image.new("RGB", (300, 200))]
SAMPLE = Sample(id="s", question="q?", answers=("Image 1",), gold_pages=("p2",))
HUGE = "9" * 5000  # past the 4,300-digit limit of int()
WIDE = "1" * 400  # an integer that int() reads but float() cannot hold

FRAGMENTS = [
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<search>",
    "</search>",
    "<bbox>",
    "</bbox>",
    "<observe>",
    "</observe>",
    "<select>",
    "</select>",
    "<information>",
    "</information>",
    "<evidence>",
    "</evidence>",
    "<description>",
    "</description>",
    "<judge>",
    "</judge>",
    "<tool_call>",
    "</tool_call>",
    "<THINK>",
    "</Tool>",
    "</tool>",
    '<tool name="read_text_element" args="Image 1: x">',
    "<tool name='a' args='",
    '<tool name="',
    ' args="',
    '">',
    "<|im_start|>user",
    "<|im_end|>",
    "<|box_start|>(1,2),(",
    "<|box_end|>",
    "Bounding box: {",
    'Bounding box: {"bbox_2d": [1, 2, 30, 40], "Image_index": 1}',
    '{"bbox_2d": [',
    '"Image_index": ',
    "(bbox_2d: (",
    "Target Document: ",
    "Bounding Box: (1, 2), (",
    "[1]:",
    "[",
    "]",
    "{",
    "}",
    "(",
    ")",
    "Image 2",
    "Image ",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "Infinity",
    "1e309",
    "-0",
    "1e-400",
    "\u0661\u0662\u0663",
    "\u0967",
    "\uff11",
    HUGE,
    "[" + HUGE + "]:",
    "Image " + HUGE,
    '"Image_index": ' + HUGE,
    '"',
    "'",
    ",",
    ":",
    "<bbox>[" + WIDE + ", 0, 1e999, 1]</bbox>",
    '{"bbox_2d": [0, 0, 1e300, 1e300], "Image_index": 1}',
    '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": ['
    + WIDE
    + ", 0, 5, 5]}}"
    + "</tool_call>",
    '{"bbox_2d": [0, 0, ' + WIDE + ', 9], "Image_index": 1}',
    "<answer>" + HUGE + "</answer>",
    " ",
    "\n",
    "\x1c",
    "\u00a0",
    "\u017f",
    "\u212a",
    "\u0130",
    "\x00",
    "\ud7ff",
    "No answer",
    "True",
    "false",
]
# Fragments a model can repeat without ever closing them: the superlinear cases of the regexes.
REPEATED = [
    "<think>",
    "<answer>",
    "<search>",
    "<bbox>",
    "<evidence>",
    "<judge>",
    "<tool_call>",
    '<tool name="a" args="Image 1: x">',
    '<tool name="',
    "<tool name='a' args='",
    "{",
    "(",
    "Bounding box: {",
    "<|im_start|>user",
    "[1]:",
    "Image 1",
    "9",
]
WRAPPERS = [
    ("", ""),
    ("<think>x</think><description>", "</description><answer>a</answer>"),
    ("<observe>o</observe><evidence>", "</evidence><think>t</think><answer>a</answer>"),
    ("<think>", "</think><answer>a</answer>"),
]


class ConstantSimilarity:
    def score(self, crops: Any, texts: Any) -> list[float]:
        return [0.5 for _ in texts]


def _toy_env(text: str) -> object:
    env = KeyValueEnv({"k": "v"})
    env.reset(SAMPLE)
    return env.step(text)


def _targets() -> dict[str, Callable[[str], object]]:
    t: dict[str, Callable[[str], object]] = {}
    for name in PARADIGMS.names():
        t[f"paradigms/{name}"] = PARADIGMS.get(name)().parse
    t["paradigms/first_tag"] = lambda s: first_tag(s, "think")
    t["paradigms/evidence_entries"] = evidence_entries
    t["paradigms/zoom_call"] = parse_zoom_call
    t["env/key_value"] = _toy_env
    helpers: dict[str, Callable[[str], object]] = {
        "boxes.lat": boxes.parse_lat_boxes,
        "boxes.visa": boxes.parse_visa_box,
        "boxes.vrag": boxes.parse_vrag_boxes,
        "boxes.qwen2": boxes.parse_qwen2_boxes,
        "boxes.extract_tag": lambda s: boxes.extract_tag(s, "think", "all"),
        "upstream_boxes.lat_extract_metadata": upstream_boxes.lat_extract_metadata,
        "evisrag.entries": evisrag.evidence_entries,
        "unidoc.region": unidoc_paradigm.parse_region,
        "unidoc.format": lambda s: unidoc.format_score([s]),
        "lat.strip_cited_boxes": lat_parse.strip_cited_boxes,
        "lat.strip_answer_boxes": lat_parse.strip_answer_boxes,
        "lat.plan_upstream": lambda s: lat_parse.plan_steps_upstream(s, PAGES, single_image=False),
        "lat.plan_paper": lambda s: lat_parse.plan_steps_paper(s, PAGES, single_image=False),
        "lang2act.strict_format": l2a.check_strict_format,
        "lang2act.parse_tools": l2a.parse_tools,
        "lang2act.quoted_tool_calls": l2a.quoted_tool_calls,
        "lang2act.parse_generation": l2a.parse_generation,
        "lang2act.judge_batch": lambda s: lang2act.parse_judge_batch_upstream(s, 2),
        "judge.verdicts": lambda s: judge_protocol.parse_verdicts(s, 2),
        "vragrl.remove_user_turns": vragrl.remove_text_between_tags,
        "vragrl.extract_tags": vragrl.extract_tags,
        "vragrl.postprocess": lambda s: vragrl.postprocess_predictions([s]),
        "vragrl.validate_bbox": search_agent.validate_bbox_action,
        "vragrl.judge_upstream": vragrl.parse_judge_response_upstream,
        "toy.parse_answer": toy.parse_answer,
    }
    t.update({f"helpers/{k}": v for k, v in helpers.items()})
    rewards: dict[str, Callable[[str], object]] = {
        "evisrag.perception": lambda s: evisrag.perception_paper(s, GOLD),
        "evisrag.perception.upstream": lambda s: evisrag.perception_upstream(s, GOLD),
        "evisrag.derivation": lambda s: evisrag.derivation_paper(s, GOLD),
        "evisrag.sum_all": lambda s: evisrag.sum_all(s, 500, GOLD),
        "evisrag.paper": lambda s: evisrag.paper_rewards(s, GOLD),
        "evisrag.evaluate": lambda s: qa.evaluate_predictions(s, ["5"]),
        "lat.format": lat_scoring.format_reward,
        "lat.eval_accuracy": lambda s: lat_scoring.eval_accuracy(s, "John"),
        "lang2act.validate_tools": lambda s: l2a.validate_tool_content(s, s, 3),
        "lang2act.tool_validity": lambda s: l2a.tool_validity(s, 3),
        "lang2act.actionrl_format": l2a.actionrl_format_score,
        "vragrl.format_only": vragrl.compute_format_reward_only,
        "vragrl.intended": lambda s: vragrl.compute_score_intended(s, "Paris"),
        "vragrl.pattern": lambda s: vragrl.pattern_reward([s, s]),
    }
    for mode in ("paper", "upstream"):
        rules = lat_scoring.LAT_RULES.get(mode)
        rewards[f"lat.accuracy.{mode}"] = lambda s, r=rules: r.accuracy(s, "John")
        rewards[f"lat.ground.{mode}"] = lambda s, r=rules: r.ground(s, [10, 10, 200, 60], 0)
        rewards[f"lat.step.{mode}"] = lambda s, r=rules: lat_scoring.step_reward(
            s, "John", PAGES, ConstantSimilarity(), rules=r
        )
        rewards[f"vragrl.{mode}"] = lambda s, m=mode: vragrl.vragrl_reward(m, judge=RuleJudge())(
            Parsed(text=s, retrieved=("p1", "p2")), SAMPLE
        )
        for stage in ("actionrl", "toolrl"):
            variant = stage if mode == "paper" else f"{stage}.upstream"
            reward = lang2act.lang2act_reward(variant, judge=RuleJudge())
            rewards[f"lang2act.{stage}.{mode}"] = lambda s, r=reward: r(Parsed(text=s), SAMPLE)
    t.update({f"rewards/{k}": v for k, v in rewards.items()})
    return t


TARGETS = _targets()


def hostile_strings(seed: int, count: int, max_repeat: int) -> Iterator[str]:
    """``count`` adversarial strings: fragment soup, random characters, repeated fragments."""
    rng = random.Random(seed)
    alphabet = "".join(FRAGMENTS[:40]) + "0123456789 \n\"'{}[]()<>/:,.-+eE"
    for i in range(count):
        kind = i % 3
        if kind == 0:
            yield "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 30)))
        elif kind == 1:
            yield "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        else:
            prefix, suffix = rng.choice(WRAPPERS)
            yield prefix + rng.choice(REPEATED) * rng.randint(1, max_repeat) + suffix


def _finite(value: object, depth: int = 0) -> bool:
    """Every float reachable in ``value`` (containers, dataclasses) is finite."""
    if depth > 6:
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v, depth + 1) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(_finite(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    return True


def _run_all(strings: list[str]) -> list[str]:
    failures = []
    for name, target in TARGETS.items():
        for s in strings:
            try:
                result = target(s)
            except Exception as exc:  # the property: nothing raises on model output
                failures.append(f"{name}: {type(exc).__name__} on {s[:60]!r}")
                continue
            if not _finite(result):
                failures.append(f"{name}: non-finite value on {s[:60]!r}")
    return failures


def test_targets_cover_every_family() -> None:
    families = {name.split("/")[0] for name in TARGETS}
    assert families == {"paradigms", "env", "helpers", "rewards"}
    assert {f"paradigms/{n}" for n in PARADIGMS.names()} <= set(TARGETS)


def test_hostile_strings_total_and_finite() -> None:
    failures = _run_all(list(hostile_strings(seed=0, count=600, max_repeat=40)))
    assert not failures, f"{len(failures)} failures, e.g. {failures[:5]}"


@pytest.mark.slow
def test_hostile_strings_total_and_finite_thorough() -> None:
    failures = _run_all(list(hostile_strings(seed=1, count=3000, max_repeat=400)))
    assert not failures, f"{len(failures)} failures, e.g. {failures[:5]}"


def _seconds(target: Callable[[str], object], text: str) -> float:
    best = math.inf
    for _ in range(5):  # the best of five: other processes only ever add time
        start = time.perf_counter()
        target(text)
        best = min(best, time.perf_counter() - start)
    return best


def _repeated(fragment: str, kib: int, wrapper: tuple[str, str]) -> str:
    n = kib * 1024
    return wrapper[0] + (fragment * (n // len(fragment) + 1))[:n] + wrapper[1]


def assert_linear(name: str, fragment: str, wrapper: tuple[str, str], sizes: tuple[int, ...]) -> None:
    """Time per KB stays under a generous constant, and from the smallest size to the largest
    time grows at most 3x faster than the size (8 KB -> 64 KB: under 24x; a quadratic parser
    grows 64x, the old tool-call pattern 4096x). The margin over linear absorbs cache effects
    (measured up to 2x on an idle machine) and a loaded one."""
    target = TARGETS[name]
    small, large = sizes[0], sizes[-1]
    floor = 0.001  # below this, timer noise and fixed costs dominate
    for _attempt in range(2):  # a second measurement before failing: a busy machine adds spikes
        times = {kib: _seconds(target, _repeated(fragment, kib, wrapper)) for kib in sizes}
        linear = times[large] / max(times[small], floor) < 3 * large / small
        if linear and times[large] / large < 0.02:  # and 20 ms per KB at most
            return
    raise AssertionError((name, fragment, times))


# The cases that grew superlinearly (the tool-call pattern as n^4), one per family at least.
WORST = [
    ("paradigms/toolchain", '<tool name="a" args="Image 1: x">', WRAPPERS[1]),
    ("rewards/lang2act.tool_validity", '<tool name="a" args="Image 1: x">', WRAPPERS[1]),
    ("rewards/lang2act.toolrl.paper", "<tool name='a' args='", WRAPPERS[1]),
    ("paradigms/search_agent", "<bbox>", WRAPPERS[3]),
    ("paradigms/direct", "<think>", WRAPPERS[0]),
    ("helpers/upstream_boxes.lat_extract_metadata", "{", WRAPPERS[0]),
    ("helpers/lat.strip_answer_boxes", "Bounding box: {", WRAPPERS[0]),
    ("rewards/evisrag.perception", "<evidence>", WRAPPERS[0]),
    ("rewards/vragrl.pattern", "<search>", WRAPPERS[0]),
    ("rewards/lat.ground.upstream", "{", WRAPPERS[3]),
    ("env/key_value", "<search>", WRAPPERS[0]),
]


@pytest.mark.parametrize(("name", "fragment", "wrapper"), WORST, ids=[f"{n}:{f[:12]}" for n, f, _ in WORST])
def test_worst_cases_linear(name: str, fragment: str, wrapper: tuple[str, str]) -> None:
    assert_linear(name, fragment, wrapper, (8, 64))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_target_linear_on_repeated_fragments(name: str) -> None:
    for wrapper in WRAPPERS:
        for fragment in REPEATED:
            assert_linear(name, fragment, wrapper, (8, 16, 32, 64))
