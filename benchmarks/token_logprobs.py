"""Chosen-token log-probs of a policy's logits, forward and backward: evidra vs two peers, in one run.

The RL update needs ``log p(y_t)`` of each completion token under the policy, differentiable, from
logits of shape (completions, tokens, vocabulary) in bf16. Three ways, each in its own process so
that its peak memory is its own:

- ``evidra``: ``evidra.models.token_logprobs`` (fp32 chunk by chunk, keeps only the logits);
- ``plain``: ``log_softmax(logits.float() / T).gather(ids)`` (what evidra did before);
- ``trl``: TRL's ``selective_log_softmax`` (where TRL is installed).

The table gives each way's peak memory from the moment the logits exist (process RSS on the CPU,
the allocator's peak on a GPU; every way holds the logits, the gradient of the slice and that of the
whole, 3 x 297 MB here) and the median seconds of forward + backward; the RESULT line gives the
peers' memory and time over evidra's. Defaults: 4 completions x 256 tokens x Qwen2.5-VL's 151,936 tokens.

    OMP_NUM_THREADS=1 python benchmarks/token_logprobs.py
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from statistics import median
from typing import Any

WAYS = ("evidra", "plain", "trl")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _ratio(a: float, b: float) -> str:
    """``a / b`` to two decimals; ``na`` where ``b`` is below what the measure resolves (tiny sizes)."""
    return f"{a / b:.2f}" if b > 0 else "na"


def _way(name: str) -> Any:
    import torch

    if name == "evidra":
        from evidra.models.token_logprobs import token_logprobs

        return token_logprobs
    if name == "plain":
        return lambda z, ids, t: torch.log_softmax(z.float() / t, -1).gather(-1, ids[..., None]).squeeze(-1)
    from trl.trainer.utils import selective_log_softmax

    return lambda z, ids, t: selective_log_softmax(z / t, ids)


def worker(args: argparse.Namespace) -> dict[str, float]:
    import torch

    try:
        fn = _way(args.worker)
    except ImportError as e:
        return {"skipped": 1.0, "why": str(e)}  # type: ignore[dict-item]
    device = args.device
    torch.manual_seed(0)
    base = torch.randn(args.completions, args.tokens + 1, args.vocab, dtype=torch.bfloat16, device=device)
    ids = torch.randint(0, args.vocab, (args.completions, args.tokens), device=device)
    weights = torch.randn(args.completions, args.tokens, device=device)
    seconds, peak, checksum = [], 0.0, 0.0
    for i in range(args.repeats):
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        else:
            before = max(_rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        logits = base.clone().requires_grad_()  # the model's output, as the update gets it
        start = time.perf_counter()
        lp = fn(logits[:, :-1], ids, args.temperature)  # position t predicts t + 1
        (lp.float() * weights).sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        if i == 0:  # above the state before the clone: the logits, their gradient and the way's own
            if device == "cuda":
                peak = (torch.cuda.max_memory_allocated() - before) / 2**20
            else:
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
            grad = logits.grad
            assert grad is not None
            checksum = float(lp.double().sum()) + float(torch.sum(grad.abs(), dtype=torch.float64))
        del logits, lp
    logits_mb = base[:, :-1].numel() * 2 / 2**20
    return {"seconds": median(seconds), "peak_mb": peak, "logits_mb": logits_mb, "checksum": checksum}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--completions", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default=None, help="cuda when available, else cpu")
    ap.add_argument("--worker", choices=WAYS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.worker:
        print(json.dumps(worker(args)))
        return
    flags = [f"--{k}={v}" for k, v in vars(args).items() if k not in ("worker",)]
    rows = {}
    for way in WAYS:
        cmd = [sys.executable, __file__, *flags, f"--worker={way}"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows[way] = json.loads(done.stdout.strip().splitlines()[-1])
    logits_mb = rows["evidra"]["logits_mb"]
    kind = "GPU allocator" if args.device == "cuda" else "process RSS"
    print(
        f"chosen-token log-probs, forward + backward: {args.completions} x {args.tokens} tokens x "
        f"{args.vocab} vocabulary, bf16 logits ({logits_mb:.0f} MB), {args.device}"
    )
    print(f"| way | peak MB from the logits on ({kind}) | seconds (median of {args.repeats}) | vs evidra |")
    print("|---|---|---|---|")
    ev = rows["evidra"]
    for way, r in rows.items():
        if r.get("skipped"):
            print(f"| {way} | skipped: {r['why']} | | |")
            continue
        mem, sec = _ratio(r["peak_mb"], ev["peak_mb"]), _ratio(r["seconds"], ev["seconds"])
        print(f"| {way} | {r['peak_mb']:.0f} | {r['seconds']:.3f} | memory {mem}x, time {sec}x |")
        agree = abs(r["checksum"] - ev["checksum"]) / max(1.0, abs(ev["checksum"]))
        assert agree < 1e-3, f"{way} disagrees with evidra: relative checksum gap {agree:.2e}"
    peers = [w for w in WAYS[1:] if not rows[w].get("skipped")]
    keys = [f"memory_{w}_vs_evidra={_ratio(rows[w]['peak_mb'], ev['peak_mb'])}" for w in peers]
    keys += [f"time_{w}_vs_evidra={_ratio(rows[w]['seconds'], ev['seconds'])}" for w in peers]
    print("RESULT " + " ".join(keys))


if __name__ == "__main__":
    main()
