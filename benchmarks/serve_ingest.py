"""Does ``evidra serve`` keep answering while a large upload is ingested?

A generated ``--pages``-page PDF (Letter pages, a line of text each, ``evidra.corpus.pdfwriter``;
10,000 pages is ingest's page cap and about 1.6 MB) is uploaded to ``evidra serve`` running in
its own process (the real CLI on a free loopback port, search only). Before the upload, a
one-page document is added and indexed, so a search has something to find. Then, for
``--window`` seconds after the upload starts, one client times ``GET /health`` and
``GET /api/search`` in turn, each with a ``--timeout`` (a request that times out counts at the
timeout, and is counted apart). The same requests are timed at rest first, so the comparison
is *during ingest / at rest*. Where the server runs uploads as jobs (``202`` with a job id),
the job's progress at the end of the window gives the pages ingested per second; the job is
then cancelled, and the time until the server reports it cancelled is printed.

The last line is ``RESULT health_idle_ms=<median> health_ingest_ms=<median>
health_ingest_max_ms=<max> health_timeouts=<n>/<n> search_ingest_ms=<median>
search_timeouts=<n>/<n> pages_per_s=<rate or nan>``. Run::

    OMP_NUM_THREADS=1 python benchmarks/serve_ingest.py                  # 10,000 pages, 30 s window
    python benchmarks/serve_ingest.py --pages 2000 --window 10 --timeout 5
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

LETTER = (612.0, 792.0)  # points
NEEDLE = "needle"


@dataclass
class Timings:
    """Latencies (seconds) of one kind of request; a timed-out request counts at the timeout."""

    label: str
    seconds: list[float] = field(default_factory=list)
    timeouts: int = 0

    def add(self, client: httpx.Client, url: str, timeout: float) -> None:
        start = time.perf_counter()
        try:
            client.get(url, timeout=timeout).raise_for_status()
        except httpx.TimeoutException:
            self.timeouts += 1
            self.seconds.append(timeout)
            return
        self.seconds.append(time.perf_counter() - start)

    def median_ms(self) -> float:
        return statistics.median(self.seconds) * 1e3 if self.seconds else math.nan

    def row(self) -> str:
        ms = sorted(s * 1e3 for s in self.seconds)
        p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))] if ms else math.nan
        top = ms[-1] if ms else math.nan
        return (
            f"| {self.label} | {len(ms)} | {self.median_ms():.1f} | {p90:.1f} | {top:.1f} | {self.timeouts} |"
        )


def big_pdf(pages: int) -> bytes:
    canvases = []
    for i in range(pages):
        canvas = PdfCanvas(*LETTER)
        canvas.text(72, 96, f"Benchmark page {i + 1} of {pages}: quarterly figures and notes", size=12)
        canvases.append(canvas)
    return write_pdf(canvases)


def small_pdf() -> bytes:
    canvas = PdfCanvas(*LETTER)
    canvas.text(72, 96, f"The {NEEDLE} sits on this page alone", size=12)
    return write_pdf([canvas])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(store: Path, port: int) -> subprocess.Popen[str]:
    evidra = Path(sys.executable).with_name("evidra")
    command = [str(evidra), "serve", "--store", str(store), "--port", str(port), "--no-access-log"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert server.stdout is not None
    line = server.stdout.readline()
    if "on http" not in line:
        server.kill()
        raise SystemExit(f"evidra serve did not start: {line.strip()}")
    return server


def upload(client: httpx.Client, name: str, data: bytes) -> dict[str, Any]:
    reply = client.post("/api/upload", params={"name": name}, content=data, timeout=3600)
    reply.raise_for_status()
    body: dict[str, Any] = reply.json()
    return body


def wait_job(client: httpx.Client, job: dict[str, Any], states: tuple[str, ...]) -> dict[str, Any]:
    while job["state"] not in states:
        time.sleep(0.1)
        job = client.get(f"/api/uploads/{job['id']}").json()
    return job


def seed(client: httpx.Client) -> None:
    """One indexed page, so a search has something to find (jobs index their pages; the
    synchronous upload of older servers needs ``/api/index``)."""
    body = upload(client, "needle.pdf", small_pdf())
    if "id" in body:
        wait_job(client, body, ("done", "failed", "cancelled"))
    client.post("/api/index").raise_for_status()


def measure(client: httpx.Client, args: argparse.Namespace, idle: bool) -> tuple[Timings, Timings]:
    what = "at rest" if idle else "during ingest"
    health, search = Timings(f"/health {what}"), Timings(f"/api/search {what}")
    end = time.perf_counter() + (args.idle_s if idle else args.window)
    while time.perf_counter() < end:
        health.add(client, "/health", args.timeout)
        search.add(client, f"/api/search?q={NEEDLE}&k=3", args.timeout)
        time.sleep(args.interval)
    return health, search


def during_upload(base: str, data: bytes, args: argparse.Namespace) -> dict[str, Any]:
    """Upload ``data`` on a thread, time requests for the window; the job's state after it."""
    result: dict[str, Any] = {}

    def send() -> None:
        with httpx.Client(base_url=base) as uploader:
            try:
                result.update(upload(uploader, "big.pdf", data))
            except httpx.HTTPError as exc:
                result["error"] = f"{type(exc).__name__}: {exc}"

    sender = threading.Thread(target=send, daemon=True)
    started = time.perf_counter()
    sender.start()
    with httpx.Client(base_url=base) as client:
        health, search = measure(client, args, idle=False)
        elapsed = time.perf_counter() - started
        out: dict[str, Any] = {"health": health, "search": search, "elapsed": elapsed}
        sender.join(timeout=2.0)  # a job server has answered at once; an old one is still busy
        if "id" in result:
            job = client.get(f"/api/uploads/{result['id']}").json()
            out["pages_done"] = job["pages_done"]
            t0 = time.perf_counter()
            client.delete(f"/api/uploads/{result['id']}")
            wait_job(client, job, ("done", "failed", "cancelled"))
            out["cancel_s"] = time.perf_counter() - t0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pages", type=int, default=10_000, help="pages of the uploaded PDF")
    parser.add_argument("--window", type=float, default=30.0, help="seconds measured during the ingest")
    parser.add_argument("--idle-s", type=float, default=5.0, help="seconds measured at rest first")
    parser.add_argument("--interval", type=float, default=0.25, help="pause between request pairs")
    parser.add_argument("--timeout", type=float, default=10.0, help="a request's timeout (seconds)")
    args = parser.parse_args()
    data = big_pdf(args.pages)
    print(f"{args.pages}-page Letter PDF: {len(data) / 1e6:.2f} MB; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="evidra-serve-ingest-") as tmp:
        port = free_port()
        server = start_server(Path(tmp) / "store", port)
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base) as client:
                seed(client)
                idle_health, idle_search = measure(client, args, idle=True)
            busy = during_upload(base, data, args)
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
    report(idle_health, idle_search, busy)


def report(idle_health: Timings, idle_search: Timings, busy: dict[str, Any]) -> None:
    health, search = busy["health"], busy["search"]
    print("| requests | n | median ms | p90 ms | max ms | timed out |")
    print("|---|---:|---:|---:|---:|---:|")
    for timings in (idle_health, health, idle_search, search):
        print(timings.row())
    print(f"health during ingest / at rest (medians): {health.median_ms() / idle_health.median_ms():.1f}x")
    rate = busy["pages_done"] / busy["elapsed"] if "pages_done" in busy else math.nan
    if "pages_done" in busy:
        pages, elapsed, cancel_s = busy["pages_done"], busy["elapsed"], busy["cancel_s"]
        print(f"ingested {pages} pages in {elapsed:.1f} s; the cancel took {cancel_s:.2f} s")
    else:
        print("the server answered the upload only when its ingest ended (no job to follow)")
    print(
        f"RESULT health_idle_ms={idle_health.median_ms():.1f} health_ingest_ms={health.median_ms():.1f} "
        f"health_ingest_max_ms={max(health.seconds) * 1e3:.1f} "
        f"health_timeouts={health.timeouts}/{len(health.seconds)} "
        f"search_ingest_ms={search.median_ms():.1f} search_timeouts={search.timeouts}/{len(search.seconds)} "
        f"pages_per_s={rate:.1f}"
    )


if __name__ == "__main__":
    main()
