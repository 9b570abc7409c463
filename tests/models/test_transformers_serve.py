"""A real OpenAI-compatible server process: ``transformers serve`` with a tiny random LLaVA built
here, answering ``RAG.load(endpoint=...)`` whole and streamed. Its text is noise, so the answer is
unreadable and said so; what is checked is the wire: images, ``response_format`` and streaming
accepted by a server evidra did not write. Needs ``transformers[serving]`` (FastAPI, uvicorn and
the OpenAI SDK, which evidra itself never imports); skipped without them."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from evidra.cli.main import main
from evidra.data.synth.documents import generate_documents
from evidra.models.generation import SamplingParams
from evidra.models.tiny_llava import tiny_llava
from evidra.rag import RAG

SERVE = Path(sys.executable).with_name("transformers")
NEEDS = ("fastapi", "uvicorn", "openai")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not SERVE.exists() or any(importlib.util.find_spec(m) is None for m in NEEDS),
        reason="transformers serve needs transformers[serving] (fastapi, uvicorn, openai)",
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, tiny_dirs: dict[str, Path]) -> Iterator[tuple[str, str]]:
    """``transformers serve`` of the tiny LLaVA on a loopback port: (base URL, model name)."""
    model = tiny_llava(tiny_dirs["qwen2_5_vl"], tmp_path_factory.mktemp("llava") / "tiny-llava")
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    argv = [str(SERVE), "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    process = subprocess.Popen(
        [*argv, "--dtype", "float32"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        assert process.poll() is None, process.stderr.read().decode()[-2000:] if process.stderr else ""
        yield f"{url}/v1", str(model)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_real_server_answers_whole_and_streamed(served: tuple[str, str], tmp_path: Path) -> None:
    url, name = served
    docs = generate_documents(tmp_path / "gen", n_docs=1, seed=5, dpi=50).docs_dir
    assert main(["-q", "ingest", str(docs), "--store", str(tmp_path / "store"), "--dpi", "50"]) == 0
    params = SamplingParams(max_new_tokens=16, temperature=0.0)
    pieces: list[str] = []
    with RAG.load(tmp_path / "store", endpoint=url, model_name=name, params=params) as rag:
        page = rag.store.page_ids()[0]
        assert rag.structured and rag.box_format.name == "norm1"  # a LLaVA, by its name
        whole = rag.ask("What is Polaris?", pages=[page])
        streamed = rag.ask("What is Polaris?", pages=[page], on_text=pieces.append)
    for answer in (whole, streamed):
        assert answer.output and answer.finish_reason in {"length", "stop"}
        assert answer.parsed == (answer.text is not None) and (answer.parsed or answer.errors)
    assert len(pieces) > 1 and "".join(pieces) == streamed.output  # the server's tokens, passed through
