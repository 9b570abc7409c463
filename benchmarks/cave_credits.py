"""CAVE's teacher-forced credits: forward passes and wall time per group, four ways.

A group of CAVE episodes (TRACER/Tunnel-style samples, scripted zooms, then an answer) is
scored with the tiny Qwen2.5-VL: every turn boundary is a state, the targets are the gold answer
and the perception evidence. The four ways give the same numbers (checked here):

* ``per target x16``: every state x target its own row (context re-run with its images), 16 rows
  per padded forward (evidra's earlier path, the peer);
* ``per target, one forward per episode``: the same rows, one padded forward per episode;
* ``KV cache``: the longest state once with a KV cache, then every (state, target) row on a copy
  of the cache with the columns past its state masked out: two forwards per episode;
* ``packed``: the longest state once with every (state, target) packed behind it under a mask
  (``evidra.models.branches``): one forward per episode (evidra's default), or 8 episodes' rows
  padded into one forward.

    OMP_NUM_THREADS=1 python benchmarks/cave_credits.py [--episodes 8] [--zooms 2 3] [--repeats 3]

The last line is ``RESULT packed_vs_peer=<x> packed_8_vs_peer=<y> same_numbers=yes`` at the most
zooms: the peer's time over evidra's packed forward per episode, and over 8 episodes per forward.
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from evidra.methods import build_task
from evidra.methods.cave.credits import StateScore
from evidra.methods.cave.states import ANSWER_PREFIX, ANSWER_SUFFIX, make_target, score_states
from evidra.models.branches import _positions, prefix_context
from evidra.models.generation import Generation, SamplingParams
from evidra.models.loading import VLM, load_vlm
from evidra.models.prefix import cache_kwargs, output_cache
from evidra.models.tiny import build_tiny
from evidra.rl.run_config import DataConfig
from evidra.rl.tasks import task_samples
from evidra.rollout import RolloutLimits, rollout

Row = tuple[Any, int, Sequence[int], str, Sequence[str]]


class _Script:
    """Plays ``zooms`` zoom calls on growing boxes, then the gold answer."""

    def __init__(self, vlm: VLM, zooms: int, answers: Sequence[str]) -> None:
        self.vlm, self.zooms, self.answers, self.turn = vlm, zooms, answers, 0

    @property
    def processor(self) -> Any:
        return self.vlm.processor

    def generate(self, contexts: Sequence[Any], params: SamplingParams) -> list[Generation]:
        out = []
        for j, ctx in enumerate(contexts):
            if self.turn < self.zooms:
                box = [0, 0, 60 + 40 * self.turn, 60 + 40 * self.turn]
                call = json.dumps({"name": "image_zoom_in_tool", "arguments": {"bbox_2d": box}})
                text = f"<think>zoom {self.turn}</think><tool_call>{call}</tool_call>"
            else:
                text = f"<think>read it</think><answer>{self.answers[j]}</answer>"
            ids = tuple(self.vlm.tokenizer(text, add_special_tokens=False)["input_ids"])
            out.append(Generation(ctx.token_ids, ids, (0.0,) * len(ids), text, "stop"))
        self.turn += 1
        return out


def _group(vlm: VLM, root: Path, n: int, zooms: int) -> list[Row]:
    task = build_task(dict(name="cave"))
    samples = task_samples(task, DataConfig(task="cave", size=n, path=str(root)))
    script = _Script(vlm, zooms, [s.answers[0] for s in samples])
    limits = RolloutLimits(zooms + 1, 64, 100_000)
    episodes = rollout(script, task.make_env, samples, 1, SamplingParams(max_new_tokens=64), limits)
    return [
        (
            ep.context,
            len(ep.trajectory.prompt_ids),
            [s.start for s in ep.trajectory.turns],
            ep.sample.answers[0],
            [t for t in ep.sample.gold_evidence.values() if t],
        )
        for ep in episodes
    ]


def _kv_cache(vlm: VLM, rows: Sequence[Row], top_k: int) -> list[list[StateScore]]:
    """The KV-cache peer: per episode, the longest state once, then all rows on cache copies."""
    tok, out = vlm.tokenizer, []
    for ctx, plen, starts, answer, units in rows:
        targets = [
            make_target(tok, answer, ANSWER_PREFIX, ANSWER_SUFFIX),
            *(make_target(tok, u) for u in units),
        ]
        lens = [plen + s for s in starts]
        head = prefix_context(ctx, max(lens), vlm.image_token_id)
        pos = _positions(vlm, head)  # (3, L)
        ids = torch.tensor([head.token_ids])
        with torch.no_grad():
            first = vlm.model(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                position_ids=pos[:, None],
                pixel_values=head.pixel_values,
                image_grid_thw=head.image_grid_thw,
                mm_token_type_ids=(ids == vlm.image_token_id).long(),
                use_cache=True,
                logits_to_keep=torch.tensor([n - 1 for n in lens]),
            )
            pairs = [(t, j) for t in range(len(lens)) for j in range(len(targets))]
            width, length = max(len(targets[j].ids) for _, j in pairs), len(head)
            tail = torch.full((len(pairs), width), vlm.pad_token_id)
            mask = torch.zeros(len(pairs), length + width, dtype=torch.long)
            positions = torch.zeros(3, len(pairs), width, dtype=torch.long)
            for r, (t, j) in enumerate(pairs):
                n, tids = lens[t], targets[j].ids
                tail[r, : len(tids)] = torch.tensor(tids)
                mask[r, :n] = 1
                mask[r, length : length + len(tids)] = 1
                positions[:, r] = int(pos[:, :n].max()) + 1 + torch.arange(width)
            cache = output_cache(first)
            cache.reorder_cache(torch.zeros(len(pairs), dtype=torch.long))
            rest = vlm.model(
                input_ids=tail,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                cache_position=torch.arange(length, length + width),
                **cache_kwargs(vlm.model, cache),
            )
        per: dict[tuple[int, int], tuple[float, float]] = {}
        for r, (t, j) in enumerate(pairs):
            tg = targets[j]
            logits = torch.cat([first.logits[0, t : t + 1], rest.logits[r, : len(tg.ids) - 1]]).float()
            lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(tg.ids)[:, None])[:, 0]
            top = torch.log_softmax(logits.topk(top_k, -1).values, -1)
            ent = -(top.exp() * top).sum(-1) / math.log(top_k)
            per[(t, j)] = (float(lp[tg.start : tg.end].mean()), float(ent[tg.start : tg.end].mean()))
        out.append(
            [
                StateScore(*per[(t, 0)], tuple(per[(t, j)][0] for j in range(1, len(targets))))
                for t in range(len(lens))
            ]
        )
    return out


def _ways(vlm: VLM, rows: Sequence[Row], k: int) -> list[tuple[str, Callable[[], Any]]]:
    per_episode = max(len(st) * (1 + len(u)) for _, _, st, _, u in rows)
    return [
        ("per target x16", lambda: score_states(vlm, rows, top_k=k, packed=False, batch_size=16)),
        (
            "per target, one forward per episode",
            lambda: score_states(vlm, rows, top_k=k, packed=False, batch_size=per_episode),
        ),
        ("KV cache (2 forwards per episode)", lambda: _kv_cache(vlm, rows, k)),
        ("packed, one episode per forward (evidra)", lambda: score_states(vlm, rows, top_k=k, packed=True)),
        (
            "packed, 8 episodes per forward",
            lambda: score_states(vlm, rows, top_k=k, packed=True, episodes_per_forward=8),
        ),
    ]


def _measure(vlm: VLM, run: Callable[[], Any], repeats: int) -> tuple[int, int, float, Any]:
    """(forward calls, sequences through the model, median seconds, result) of ``run``."""
    seen = [0, 0]

    def count(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        seen[0] += 1
        seen[1] += int(kwargs["input_ids"].shape[0])

    hook = vlm.model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        result, times = None, []
        for _ in range(repeats):
            seen[:] = [0, 0]
            start = time.perf_counter()
            result = run()
            times.append(time.perf_counter() - start)
    finally:
        hook.remove()
    return seen[0], seen[1], statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--zooms", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--top-k", type=int, default=10)
    args = ap.parse_args()
    torch.manual_seed(0)
    root = Path(tempfile.mkdtemp(prefix="cave-bench-"))
    atexit.register(shutil.rmtree, root, True)  # checkpoints and data of this run only
    vlm = load_vlm(build_tiny("qwen2_5_vl", root / "tiny"))
    print(f"tiny Qwen2.5-VL, {args.episodes} episodes per group, torch threads {torch.get_num_threads()}")
    print("| zooms | states x targets | method | forward calls | sequences | seconds (median) | vs peer |")
    print("|---|---|---|---|---|---|---|")
    speedups: dict[str, float] = {}
    for zooms in args.zooms:
        rows = _group(vlm, root / "data", args.episodes, zooms)
        cells = sum(len(st) * (1 + len(u)) for _, _, st, _, u in rows)
        ways = _ways(vlm, rows, args.top_k)
        peer, reference = 0.0, None
        for name, run in ways:
            calls, sequences, seconds, result = _measure(vlm, run, args.repeats)
            flat = _flat(result)
            reference = reference or flat
            gap = max(abs(a - b) for a, b in zip(flat, reference, strict=True))
            assert gap < 1e-4, f"{name} differs from the peer by {gap}"
            peer = peer or seconds
            speedups[name] = peer / seconds
            ratio = f"{peer / seconds:.2f}x"
            print(f"| {zooms} | {cells} | {name} | {calls} | {sequences} | {seconds:.3f} | {ratio} |")
    packed, packed_8 = (
        speedups[n] for n in ("packed, one episode per forward (evidra)", "packed, 8 episodes per forward")
    )
    print(
        f"RESULT packed_vs_peer={packed:.2f} packed_8_vs_peer={packed_8:.2f} same_numbers=yes"
    )  # gaps asserted


def _flat(result: Sequence[Sequence[StateScore]]) -> list[float]:
    """Every number of every state: answer log-likelihood, uncertainty, evidence log-likelihoods."""
    return [v for per in result for st in per for v in (st.answer, st.uncertainty, *st.evidence)]


if __name__ == "__main__":
    main()
