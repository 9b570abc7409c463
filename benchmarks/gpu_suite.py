"""Every GPU check of evidra in one run: one table and one RESULT line, within a fixed time budget.

Rows (each in its own worker process, with its own time limit; see docs/performance.md):

* ``device``       the GPU, torch / CUDA / transformers / triton / trl / vllm versions
* ``fsdp2``        one bf16 step of a Qwen2.5-VL sharded by evidra's FSDP2 path, world size 1:
                   loss finite, every trainable shard moved (``gpu_suite_fsdp2.py``)
* ``maxsim``       exact MaxSim at 10k and 100k pages: the fused Triton kernel vs chunked torch vs
                   transformers' ``score_retrieval``: ms/query, memory, top-10 agreement with fp32
                   (``gpu_suite_maxsim.py``)
* ``build``        a randomly initialised Qwen2.5-VL-3B checkpoint the model rows share
* ``grpo_*``       one GRPO step at real size: evidra vs TRL's ``GRPOTrainer``, with transformers
                   generation and with colocated vLLM: s/step, tokens/s, peak GPU memory
                   (``gpu_suite_grpo.py``)
* ``rollout_*``    multi-turn VRAG-RL episodes with images: the prompt ids vLLM reports equal the
                   ids evidra tokenised (``gpu_suite_rollout.py``)

A row whose package is missing prints ``skipped: <package> not installed``; a row that fails
prints ``failed: <its last error line>`` (its whole log is under ``--out``); a row that would
start after the deadline prints ``skipped: time budget``. The table and the RESULT line are
always printed, also when the suite itself is interrupted (SIGTERM / SIGINT). ``--dry-run`` runs
every row on the CPU with tiny shapes (the kernel under ``TRITON_INTERPRET=1``, gloo instead of
NCCL), which is how CI keeps this script working without a GPU.

    PYTHONPATH=src python benchmarks/gpu_suite.py --out results/gpu         # on the GPU machine
    PYTHONPATH=src python benchmarks/gpu_suite.py --dry-run                 # anywhere, ~1-2 min
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpu_suite_common import Ctx, Entry, RowOutput, Skip

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Row:
    """One row: the worker function (``module:function``), what it needs, its time limits (s)."""

    target: str
    needs: tuple[str, ...] = ()  # importable packages
    gpu_s: int = 120
    dry_s: int = 120
    after: str = ""  # a row that must have succeeded first
    env: tuple[tuple[str, str], ...] = ()  # extra environment of the worker (both modes)
    dry_env: tuple[tuple[str, str], ...] = ()  # extra environment in the dry run


_DIST = (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"))
ROWS: dict[str, Row] = {
    "device": Row("gpu_suite:device_row", gpu_s=60, dry_s=60),
    "fsdp2": Row("gpu_suite_fsdp2:run", gpu_s=90, dry_s=60, env=_DIST),
    "maxsim": Row("gpu_suite_maxsim:run", gpu_s=150, dry_s=90, dry_env=(("TRITON_INTERPRET", "1"),)),
    "build": Row("gpu_suite_grpo:build", gpu_s=120, dry_s=60),
    "grpo_evidra_hf": Row("gpu_suite_grpo:evidra_hf", gpu_s=150, dry_s=90, after="build"),
    "grpo_trl_hf": Row("gpu_suite_grpo:trl_hf", ("trl", "datasets"), 150, 120, "build"),
    "rollout_vllm": Row("gpu_suite_rollout:vllm", ("vllm",), 150, 120, "build"),
    "grpo_evidra_vllm": Row("gpu_suite_grpo:evidra_vllm", ("vllm",), 180, 120, "build"),
    "grpo_trl_vllm": Row("gpu_suite_grpo:trl_vllm", ("trl", "datasets", "vllm"), 180, 120, "build", _DIST),
    "rollout_hf": Row("gpu_suite_rollout:hf", (), 90, 60, "build"),
}
MIN_START_S = 20  # a row is not started with less time than this left before the deadline


@dataclass
class Outcome:
    """What became of one row: ``ok`` / ``failed`` / ``skipped`` with a reason, and its output."""

    row: str
    status: str
    reason: str = ""
    seconds: float = 0.0
    output: dict[str, Any] | None = None

    @property
    def entries(self) -> list[Entry]:
        return [Entry(**e) for e in (self.output or {}).get("entries", [])]

    @property
    def result(self) -> dict[str, Any]:
        return dict((self.output or {}).get("result", {}))


def device_row(ctx: Ctx) -> RowOutput:
    """The machine: device name, memory and the versions every other row depends on."""
    import torch
    from gpu_suite_common import device_name

    versions = {p: _version(p) for p in ("transformers", "triton", "accelerate", "trl", "vllm")}
    if not ctx.dry:
        if not torch.cuda.is_available():
            raise Skip(f"CUDA is not available to torch {torch.__version__}; run with --dry-run")
        mem = torch.cuda.get_device_properties(0).total_memory / 2**30
        cap = ".".join(map(str, torch.cuda.get_device_capability(0)))
        hw = f"{mem:.0f} GiB, sm {cap}, CUDA {torch.version.cuda}, "
    else:
        hw = f"{os.cpu_count()} CPUs, "
    note = hw + f"torch {torch.__version__}, " + ", ".join(f"{p} {v}" for p, v in versions.items())
    return RowOutput([Entry("device", device_name(ctx.device), check="found", note=note)])


def installed(package: str) -> bool:
    """Whether ``package`` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken install, or one blocked in sys.modules
        return False


def _version(package: str) -> str:
    if not installed(package):
        return "absent"
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


# worker ---------------------------------------------------------------------------------------
def worker(name: str, dry: bool, workdir: Path, result_file: Path) -> None:
    """Run one row in this process and write its outcome as JSON to ``result_file``."""
    module_name, func = ROWS[name].target.split(":")
    module = sys.modules[__name__] if module_name == "gpu_suite" else importlib.import_module(module_name)
    fn: Callable[[Ctx], RowOutput] = getattr(module, func)
    try:
        out = fn(Ctx(dry=dry, workdir=workdir))
    except Skip as why:
        result_file.write_text(json.dumps({"status": "skipped", "reason": str(why)}))
        return
    status = "ok" if out.ok else "failed"
    reason = "" if out.ok else "a check did not hold (see the check column)"
    result_file.write_text(json.dumps({"status": status, "reason": reason, "output": out.to_json()}))


# parent ---------------------------------------------------------------------------------------
class Suite:
    """Runs the rows one after another under one deadline; prints as it goes and at the end."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.start = time.monotonic()
        self.outcomes: list[Outcome] = []
        self.names: list[str] = list(args.rows)
        self.current = ""  # the row running now
        self.out = Path(args.out) if args.out else None
        self.child: subprocess.Popen[bytes] | None = None
        self.workdir = Path(args.workdir or tempfile.mkdtemp(prefix="evidra-gpu-suite-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.out is not None:
            (self.out / "logs").mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.args.deadline - (time.monotonic() - self.start)

    def run(self, names: list[str]) -> None:
        for name in names:
            self.current = name
            outcome = self.run_row(name)
            self.outcomes.append(outcome)
            self.current = ""
            reason = f": {outcome.reason}" if outcome.reason else ""
            print(f"[{time.monotonic() - self.start:5.0f} s] {name}: {outcome.status}{reason}", flush=True)
            for line in table([outcome], self.args.dry_run, 0.0)[4:]:  # its lines, in case of a kill
                print("  " + line, flush=True)
            self.save()

    def run_row(self, name: str) -> Outcome:
        row = ROWS[name]
        missing = [p for p in row.needs if not installed(p)]
        if missing:
            return Outcome(name, "skipped", f"{', '.join(missing)} not installed")
        if not self.args.dry_run and name != "device" and self.status("device") not in ("ok", None):
            return Outcome(name, "skipped", "no usable GPU (see the device row)")
        if row.after and self.status(row.after) != "ok":
            return Outcome(name, "skipped", f"needs the {row.after} row, which did not succeed")
        if self.left() < MIN_START_S:
            return Outcome(name, "skipped", "time budget")
        limit = min(row.dry_s if self.args.dry_run else row.gpu_s, self.left())
        return self.spawn(name, row, limit)

    def status(self, row: str) -> str | None:
        """The status of ``row`` if it has run, else None."""
        return next((o.status for o in self.outcomes if o.row == row), None)

    def spawn(self, name: str, row: Row, limit: float) -> Outcome:
        result_file = self.workdir / f"{name}.result.json"
        result_file.unlink(missing_ok=True)
        log_path = (self.out / "logs" if self.out else self.workdir) / f"{name}.log"
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            name,
            "--workdir",
            str(self.workdir),
            "--result",
            str(result_file),
        ]
        if self.args.dry_run:
            argv.append("--dry-run")
        start = time.monotonic()
        with open(log_path, "wb") as log:
            self.child = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=self.env(row), start_new_session=True
            )
            try:
                code = self.child.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                stop(self.child)
                return Outcome(name, "failed", f"timed out after {limit:.0f} s", time.monotonic() - start)
            except BaseException:  # the suite itself is being stopped: take the row's processes along
                stop(self.child)
                raise
            finally:
                self.child = None
        seconds = time.monotonic() - start
        if result_file.is_file():
            data = json.loads(result_file.read_text())
            return Outcome(name, data["status"], data.get("reason", ""), seconds, data.get("output"))
        return Outcome(name, "failed", f"exit {code}: {last_error(log_path)}", seconds)

    def env(self, row: Row) -> dict[str, str]:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        given = filter(None, env.get("PYTHONPATH", "").split(os.pathsep))
        paths = [str(HERE), *(os.path.abspath(p) for p in given)]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env.update(row.env)
        if dict(row.env).get("MASTER_ADDR"):  # a world of one process needs a free port
            env["MASTER_PORT"] = str(free_port())
        if self.args.dry_run:
            env.update(row.dry_env)
            env["CUDA_VISIBLE_DEVICES"] = ""
            env.setdefault("OMP_NUM_THREADS", "1")
        return env

    def save(self) -> None:
        if self.out is None:
            return
        data = {
            "mode": "dry-run" if self.args.dry_run else "gpu",
            "elapsed_s": round(time.monotonic() - self.start, 1),
            "rows": [asdict(o) for o in self.outcomes],
            "result": results(self.outcomes),
        }
        (self.out / "gpu_suite.json").write_text(json.dumps(data, indent=2))

    def finish(self, unreached: str = "time budget") -> None:
        """Print the table and the RESULT line (and write them under ``--out``)."""
        if self.child is not None:
            stop(self.child)
        if self.current:
            self.outcomes.append(Outcome(self.current, "failed", "the suite was stopped while it ran"))
            self.current = ""
        done = {o.row for o in self.outcomes}
        self.outcomes += [Outcome(n, "skipped", unreached) for n in self.names if n not in done]
        lines = table(self.outcomes, self.args.dry_run, time.monotonic() - self.start)
        lines.append("RESULT " + " ".join(f"{k}={v}" for k, v in results(self.outcomes).items()))
        print("\n".join(lines), flush=True)
        self.save()
        if self.out is not None:
            (self.out / "gpu_suite.txt").write_text("\n".join(lines) + "\n")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a worker and everything it started (its own process group): TERM, then KILL."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def last_error(log: Path) -> str:
    """The last non-empty line of a worker's log (a traceback's last line names the error)."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output")[:300]


# output ---------------------------------------------------------------------------------------
COLUMNS = ("row", "device", "status", "ms/query", "s/step", "tok/s", "peak MB", "check", "note")


def _cell(value: float, fmt: str) -> str:
    return "-" if value != value else format(value, fmt)


def table(outcomes: list[Outcome], dry: bool, elapsed: float) -> list[str]:
    """One markdown table: a line per entry (a row without entries: its status and reason)."""
    mode = "dry run on the CPU, tiny shapes: not performance" if dry else "GPU"
    lines = [
        f"evidra GPU suite ({mode}), {elapsed:.0f} s",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for o in outcomes:
        status = o.status if not o.reason else f"{o.status}: {o.reason}"
        entries = o.entries or [Entry(o.row)]
        for e in entries:
            cells = (
                e.name,
                e.device or "-",
                status,
                _cell(e.ms_query, ".3f"),
                _cell(e.s_step, ".2f"),
                _cell(e.tok_s, ".0f"),
                _cell(e.peak_mb, ".0f"),
                e.check or "-",
                e.note or "-",
            )
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return lines


def _ratio(a: Any, b: Any) -> str:
    """``a / b`` to 2 decimals, or ``na`` when either is missing."""
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b or math.isnan(a / b):
        return "na"
    return f"{a / b:.2f}"


def results(outcomes: list[Outcome]) -> dict[str, str]:
    """The RESULT keys: speed-ups as peer time over evidra time (> 1: evidra is faster)."""
    got = {o.row: o.result for o in outcomes if o.status in ("ok", "failed")}

    def val(row: str, key: str) -> Any:
        return got.get(row, {}).get(key)

    def flag(row: str, key: str) -> str:
        v = val(row, key)
        return "na" if v is None else str(int(v))

    out = {
        k: str(val("maxsim", k) if val("maxsim", k) is not None else "na")
        for k in ("maxsim_triton_vs_torch", "maxsim_triton_vs_score_retrieval", "maxsim_agreement")
    }
    out["grpo_hf_vs_trl"] = _ratio(val("grpo_trl_hf", "s_step"), val("grpo_evidra_hf", "s_step"))
    out["grpo_vllm_vs_trl_vllm"] = _ratio(val("grpo_trl_vllm", "s_step"), val("grpo_evidra_vllm", "s_step"))
    out["grpo_vllm_vs_hf"] = _ratio(val("grpo_evidra_hf", "s_step"), val("grpo_evidra_vllm", "s_step"))
    out["vllm_ids_equal"] = flag("rollout_vllm", "ids_equal")
    out["fsdp2_ok"] = flag("fsdp2", "fsdp2_ok")
    out["rows_ok"] = f"{sum(o.status == 'ok' for o in outcomes)}/{len(outcomes)}"
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="every row on the CPU with tiny shapes")
    p.add_argument("--out", help="folder for gpu_suite.json, gpu_suite.txt and each row's log")
    p.add_argument("--deadline", type=float, default=470.0, help="seconds for the whole suite")
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS), help="rows to run, in order")
    p.add_argument("--workdir", help="scratch folder (the 3B checkpoint: ~8 GB); default: a new temp folder")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder")
    p.add_argument("--worker", choices=list(ROWS), help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.worker:
        worker(args.worker, args.dry_run, Path(args.workdir), Path(args.result))
        return
    suite = Suite(args)

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    unreached = "time budget"
    try:
        suite.run(suite.names)
    except KeyboardInterrupt:
        print("interrupted: printing what finished", flush=True)
        unreached = "the suite was stopped first"
    finally:
        suite.finish(unreached)
        if not args.keep and not args.workdir:
            import shutil

            shutil.rmtree(suite.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
