"""Latency of ``evidra serve`` with the tiny model: a search, a streamed answer, the chat API.

Everything is built offline, as the app tests build it: ``--pages`` generated one-page PDFs
(text, table and chart pages, ``evidra.data.synth.documents``) ingested at ``--dpi`` into a page
store and indexed with BM25 (or ``--index visual``: the tiny random ColQwen2), and a tiny random
Qwen2.5-VL (``evidra.models.tiny``) that answers greedily with up to ``--max-new-tokens`` tokens
from the top ``--k`` pages. The app then runs on a free loopback port in this process
(``evidra.app.server.running``: the real uvicorn server, its own event loop on its own thread),
and one keep-alive httpx client times, request by request in turns with a peer that does the
same work in this process without HTTP (so both see the same load):

* ``search``: ``GET /api/search?q=&k=10`` without the model; the peer awaits
  ``Workspace.search`` and builds the same hits JSON as the handler. The server's own ``ms``
  field (its time inside the handler) is printed too.
* ``answer``: ``POST /api/ask``, the time to the first ``token`` line and to the ``answer`` line;
  the peer iterates ``evidra.app.streams.answer_events``, the generator the endpoint streams,
  to its first ``Piece`` and to ``Done``.
* ``chat``: ``POST /v1/chat/completions`` with ``"stream": true``, the time to the first chunk
  that carries content (after the role chunk) and to ``data: [DONE]``; it streams the same
  generator, so the answer's peer is its peer too.

Times are client wall times from the request's start; medians and p90 over ``--searches``
searches and ``--repeats`` questions (the generated questions, in turn), after a warm-up of
each. The client shares the interpreter with the server, so its own Python time is part of the
HTTP figures, as it is for any client in the same process. The last line is ``RESULT
search_ms=<median> search_vs_inprocess=<r> first_token_ms=<median> first_token_vs_inprocess=<r>
chat_first_chunk_ms=<median>``, each ratio the HTTP median over the in-process median. Run::

    OMP_NUM_THREADS=2 python benchmarks/serve_latency.py               # 8 pages, 150 dpi, under 1 min
    python benchmarks/serve_latency.py --pages 64 --index visual --max-new-tokens 128 --repeats 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from evidra.app.citations import matched_words, page_json
from evidra.app.http import ServeOptions
from evidra.app.server import running
from evidra.app.streams import Done, Failed, Piece, answer_events
from evidra.app.workspace import DEFAULT_INDEX, ModelSpec, Workspace
from evidra.retrieval.kernels.compute_dtype import cpu_features

SEARCH_K = 10
WARMUP_SEARCHES = 5
WARMUP_ANSWERS = 2  # each way: the first answers after loading run several times slower


@dataclass(frozen=True)
class Streamed:
    """One streamed answer: seconds to its first piece of text and to its end, pieces seen."""

    first_s: float
    end_s: float
    pieces: int


def _streamed(first: float, end: float, pieces: int, what: str) -> Streamed:
    if pieces == 0:
        raise SystemExit(f"{what} streamed no text, so it has no first token; ask another question")
    return Streamed(first, end, pieces)


@dataclass(frozen=True)
class Row:
    label: str
    http: list[float]  # seconds
    peer: list[float] | None  # seconds, in-process


def _p(xs: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``xs``, interpolated between order statistics."""
    s = sorted(xs)
    at = q * (len(s) - 1)
    lo = int(at)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (at - lo)


# -- building the store, the index and the model ---------------------------------------------


def build(root: Path, args: argparse.Namespace) -> tuple[Workspace, list[str]]:
    """A started workspace over ``--pages`` indexed pages with the tiny model, and the questions."""
    from evidra.corpus import PageStore, ingest
    from evidra.data.synth.documents import generate_documents
    from evidra.models.tiny import build_tiny
    from evidra.retrieval.lifecycle.index_folder import build_index

    corpus = generate_documents(root / "corpus", n_docs=args.pages, max_pages=1, seed=args.seed, dpi=args.dpi)
    store_root = root / "store"
    with PageStore.create(store_root) as store:
        report = ingest(corpus.docs_dir, store, dpi=args.dpi)
        if report.failed:
            raise SystemExit(f"ingest failed: {report.failed[0].path}: {report.failed[0].reason}")
        index_root = store_root / DEFAULT_INDEX
        if args.index == "visual":
            encoder = build_tiny("colqwen2", root / "tiny-colqwen2")
            build_index(list(store.pages()), index_root, "colqwen2", encoder).close()
        else:
            build_index(list(store.pages()), index_root, "bm25").close()
        store.register_index(index_root)
    model = build_tiny("qwen2_5_vl", root / "tiny-qwen2_5_vl")
    workspace = Workspace(store_root, None, ModelSpec(str(model), max_new_tokens=args.max_new_tokens))
    workspace.start_sync()
    questions = [q.question for q in corpus.questions if q.page_id is not None]
    return workspace, questions


# -- one request each way ----------------------------------------------------------------------


def http_search(client: httpx.Client, query: str) -> tuple[float, float]:
    """Seconds for ``GET /api/search``, and the server's own ``ms`` for it."""
    start = time.perf_counter()
    got = client.get("/api/search", params={"q": query, "k": SEARCH_K})
    got.raise_for_status()
    body = got.json()
    took = time.perf_counter() - start
    if not body["hits"]:
        raise SystemExit(f"search {query!r} found no page; the index is empty")
    return took, float(body["ms"])


async def inprocess_search(workspace: Workspace, query: str) -> float:
    """Seconds for what the search handler does, without HTTP: the search and the hits' JSON."""
    start = time.perf_counter()
    found = await workspace.search(query, SEARCH_K)
    hits = [page_json(p, h.score, matched_words(p, query)) for h, p in found]
    json.dumps({"query": query, "hits": hits}, ensure_ascii=False)
    return time.perf_counter() - start


def _timed_lines(client: httpx.Client, path: str, body: dict[str, Any]) -> Iterator[tuple[float, str]]:
    start = time.perf_counter()
    with client.stream("POST", path, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.strip():
                yield time.perf_counter() - start, line


def http_answer(client: httpx.Client, question: str, k: int) -> Streamed:
    """``POST /api/ask``: seconds to the first ``token`` line and to the ``answer`` line."""
    first, pieces = float("nan"), 0
    for at, line in _timed_lines(client, "/api/ask", {"question": question, "k": k}):
        event = json.loads(line)
        if event["type"] == "token":
            first = at if pieces == 0 else first
            pieces += 1
        elif event["type"] == "answer":
            return _streamed(first, at, pieces, "/api/ask")
        elif event["type"] == "error":
            raise SystemExit(f"/api/ask answered an error: {event['error']}")
    raise SystemExit("/api/ask ended without an answer event")


async def inprocess_answer(workspace: Workspace, question: str, k: int) -> Streamed:
    """The endpoint's generator iterated here: seconds to its first ``Piece`` and to ``Done``."""
    start = time.perf_counter()
    first, pieces = float("nan"), 0
    async for event in answer_events(workspace, question, k):
        at = time.perf_counter() - start
        if isinstance(event, Piece):
            first = at if pieces == 0 else first
            pieces += 1
        elif isinstance(event, Done):
            return _streamed(first, at, pieces, "answer_events")
        elif isinstance(event, Failed):
            raise SystemExit(f"answer_events failed: {event.message}")
    raise SystemExit("answer_events ended without Done")


def http_chat(client: httpx.Client, question: str, k: int) -> Streamed:
    """Streamed ``/v1/chat/completions``: seconds to the first content chunk and to ``[DONE]``."""
    body = {"messages": [{"role": "user", "content": question}], "stream": True, "k": k}
    first, pieces = float("nan"), 0
    for at, line in _timed_lines(client, "/v1/chat/completions", body):
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            return _streamed(first, at, pieces, "/v1/chat/completions")
        record = json.loads(data)
        if "error" in record:
            raise SystemExit(f"/v1/chat/completions answered an error: {record['error']['message']}")
        if record["choices"][0]["delta"].get("content"):
            first = at if pieces == 0 else first
            pieces += 1
    raise SystemExit("/v1/chat/completions ended without [DONE]")


# -- the runs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bench:
    """The keep-alive client of the running app, and this thread's event loop for the peers."""

    client: httpx.Client
    runner: asyncio.Runner
    workspace: Workspace
    k: int  # pages an answer is given


def time_searches(bench: Bench, questions: list[str], n: int) -> tuple[Row, list[float]]:
    """``n`` searches each way, in turns; and the server's own time for each (ms)."""
    for q in questions[:WARMUP_SEARCHES]:
        http_search(bench.client, q)
        bench.runner.run(inprocess_search(bench.workspace, q))
    http, peer, inside = [], [], []
    for i in range(n):
        q = questions[i % len(questions)]
        took, ms = http_search(bench.client, q)
        http.append(took)
        inside.append(ms)
        peer.append(bench.runner.run(inprocess_search(bench.workspace, q)))
    return Row(f"search (k={SEARCH_K}, no model)", http, peer), inside


def time_answers(bench: Bench, questions: list[str], n: int) -> tuple[list[Row], list[int]]:
    """``n`` questions each way (``/api/ask``, the generator, the chat API) in turns; and the
    pieces of text of each ``/api/ask`` answer."""
    answers, peers, chats = [], [], []
    for i in range(-WARMUP_ANSWERS, n):
        q = questions[i % len(questions)]
        answer = http_answer(bench.client, q, bench.k)
        peer = bench.runner.run(inprocess_answer(bench.workspace, q, bench.k))
        chat = http_chat(bench.client, q, bench.k)
        if i >= 0:
            answers.append(answer)
            peers.append(peer)
            chats.append(chat)
    rows = [
        Row("answer: first token", [a.first_s for a in answers], [p.first_s for p in peers]),
        Row("answer: whole", [a.end_s for a in answers], [p.end_s for p in peers]),
        Row("chat stream: first content", [c.first_s for c in chats], None),
        Row("chat stream: [DONE]", [c.end_s for c in chats], None),
    ]
    return rows, [a.pieces for a in answers]


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}" if x < 0.01 else f"{x * 1e3:.1f}"


def table(rows: list[Row]) -> list[str]:
    """A markdown table: HTTP and in-process medians and p90s (ms), and the ratio of the medians."""
    lines = [
        f"| {'what':<26} | {'n':>4} | HTTP median ms | HTTP p90 ms | in-process median ms "
        "| in-process p90 ms | HTTP / in-process |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        peer = ("-", "-", "-")
        if row.peer is not None:
            ratio = statistics.median(row.http) / statistics.median(row.peer)
            peer = (_ms(statistics.median(row.peer)), _ms(_p(row.peer, 0.9)), f"{ratio:.2f}")
        lines.append(
            f"| {row.label:<26} | {len(row.http):>4} | {_ms(statistics.median(row.http)):>14} | "
            f"{_ms(_p(row.http, 0.9)):>11} | {peer[0]:>20} | {peer[1]:>17} | {peer[2]:>17} |"
        )
    return lines


def result_line(rows: list[Row]) -> str:
    search, first, _, chat_first, _ = rows
    assert search.peer is not None and first.peer is not None

    def ratio(row: Row, peer: list[float]) -> float:
        return statistics.median(row.http) / statistics.median(peer)

    return (
        f"RESULT search_ms={statistics.median(search.http) * 1e3:.2f} "
        f"search_vs_inprocess={ratio(search, search.peer):.2f} "
        f"first_token_ms={statistics.median(first.http) * 1e3:.1f} "
        f"first_token_vs_inprocess={ratio(first, first.peer):.2f} "
        f"chat_first_chunk_ms={statistics.median(chat_first.http) * 1e3:.1f}"
    )


def header(args: argparse.Namespace, threads: int, pieces: list[int]) -> list[str]:
    cpu = cpu_features().model or "unknown CPU"
    index = "BM25" if args.index == "bm25" else "tiny random ColQwen2 (visual)"
    return [
        f"cpu: {cpu}; {os.cpu_count()} cores; torch threads {threads}; "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}",
        f"pages {args.pages} (one generated page per PDF) at {args.dpi:g} dpi; index {index}",
        f"model tiny random Qwen2.5-VL (evidra.models.tiny), greedy, max {args.max_new_tokens} new "
        f"tokens, {args.k} pages shown; text pieces per answer: median {statistics.median(pieces):g}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=8, help="generated one-page PDFs in the store")
    ap.add_argument("--dpi", type=float, default=150.0, help="ingest resolution (the app's own)")
    ap.add_argument("--index", choices=("bm25", "visual"), default="bm25")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=3, help="pages an answer is given")
    ap.add_argument("--searches", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=10, help="questions asked each way")
    ap.add_argument("--threads", type=int, default=2, help="torch and OpenMP threads")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if min(args.pages, args.searches, args.repeats, args.threads, args.max_new_tokens) < 1:
        ap.error("--pages, --searches, --repeats, --threads and --max-new-tokens must be at least 1")
    if not 1 <= args.k <= ServeOptions().max_k:
        ap.error(f"--k must be 1 to {ServeOptions().max_k} (the app's cap)")
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))  # before torch is first imported
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="evidra-serve-latency-") as tmp:
        workspace, questions = build(Path(tmp), args)
        try:
            options = ServeOptions(access_log=False, k=args.k)
            with (
                running(workspace, options) as url,
                httpx.Client(base_url=url, timeout=120) as client,
                asyncio.Runner() as runner,
            ):
                bench = Bench(client, runner, workspace, args.k)
                search, inside = time_searches(bench, questions, args.searches)
                answers, pieces = time_answers(bench, questions, args.repeats)
        finally:
            workspace.close()
    print("\n".join(header(args, torch.get_num_threads(), pieces)))
    rows = [search, *answers]
    print("\n".join(table(rows)))
    print(f"search inside the server (its own ms field): median {statistics.median(inside):.2f} ms")
    print(result_line(rows))


if __name__ == "__main__":
    main()
