"""First-token latency of an answer: through ``transformers serve`` vs the same model in-process.

One tiny random LLaVA (``evidra.models.tiny_llava``) answers the same structured question about one
ingested PDF page, streamed, ``--repeats`` times each way:

- ``served``: ``transformers serve`` on a loopback port, asked through ``RAG.load(endpoint=...)``
  (evidra's OpenAI client: the page sent as an image, ``response_format``, SSE streaming);
- ``in-process``: the same checkpoint loaded by transformers in this process, its chat template
  and processor, ``generate`` with a streamer (evidra does not load LLaVA itself);
- ``evidra``: for scale, a tiny Qwen2.5-VL in-process through ``RAG.ask`` (evidra's own
  generation path), without and with the grammar of a structured answer.

The time is from the call to the first piece of text; the RESULT line gives served / in-process.
Needs ``transformers[serving]`` (the ``transformers`` command, FastAPI, uvicorn, openai).

    OMP_NUM_THREADS=1 python benchmarks/serve_first_token.py
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from evidra.core.types import Page
from evidra.models.generation import SamplingParams
from evidra.models.structured import build_messages
from evidra.rag import RAG

QUESTION = "In which city was the project founded?"


def first_text_seconds(ask: Callable[[Callable[[str], None]], object]) -> float:
    """Seconds from calling ``ask(on_text)`` to its first non-empty piece of text."""
    start = time.perf_counter()
    first: list[float] = []

    def on_text(piece: str) -> None:
        if piece and not first:
            first.append(time.perf_counter() - start)

    ask(on_text)
    return first[0] if first else float("nan")


@contextmanager
def served(model: Path) -> Iterator[str]:
    """``transformers serve`` of ``model`` on a free loopback port; yields its ``/v1`` base URL."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    command = Path(sys.executable).with_name("transformers")
    argv = [str(command), "serve", str(model), "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [*argv, "--device", "cpu", "--dtype", "float32"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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
        if process.poll() is not None:
            raise SystemExit(f"transformers serve exited with {process.returncode}")
        yield f"{url}/v1"
    finally:
        process.terminate()
        process.wait(timeout=30)


def llava_in_process(
    model: Path, page: Page, params: SamplingParams
) -> Callable[[Callable[[str], None]], None]:
    """The LLaVA in this process: ``ask(on_text)`` streams one structured answer about ``page``."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor, TextIteratorStreamer

    processor = AutoProcessor.from_pretrained(model)
    vlm = AutoModelForImageTextToText.from_pretrained(model, dtype=torch.float32).eval()
    chat: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}
    ]
    text = build_messages(QUESTION, [page])[0].content[-1]  # the structured answer's instruction
    chat[0]["content"].append({"type": "text", "text": getattr(text, "text", "")})

    def ask(on_text: Callable[[str], None]) -> None:
        prompt = processor.apply_chat_template(chat, add_generation_prompt=True)
        image = Image.open(page.image_path).convert("RGB")
        inputs = processor(images=[image], text=prompt, return_tensors="pt")
        streamer = TextIteratorStreamer(processor.tokenizer, skip_prompt=True)
        options = {"max_new_tokens": params.max_new_tokens, "do_sample": False, "streamer": streamer}
        worker = threading.Thread(target=lambda: vlm.generate(**inputs, **options))
        worker.start()
        for piece in streamer:
            on_text(piece)
        worker.join()

    return ask


def median_first(ask: Callable[[Callable[[str], None]], object], repeats: int) -> float:
    ask(lambda _: None)  # warm-up
    return statistics.median(first_text_seconds(ask) for _ in range(repeats))


def main() -> None:
    from evidra.data.synth.documents import generate_documents
    from evidra.models.tiny import build_tiny
    from evidra.models.tiny_llava import tiny_llava

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--max-new-tokens", type=int, default=128)
    args = p.parse_args()
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        qwen = build_tiny("qwen2_5_vl", root / "qwen")
        llava = tiny_llava(qwen, root / "tiny-llava")
        docs = generate_documents(root / "gen", n_docs=1, seed=5, dpi=50).docs_dir
        rows: dict[str, float] = {}
        with RAG.from_documents(docs, model=qwen, store=root / "store", params=params, dpi=50) as rag:
            page = rag.store.pages()[0]
            rag.structured = True
            for constrained in (False, True):
                rag.constrained = constrained
                name = "evidra qwen2_5_vl" + (" + grammar" if constrained else "")
                rows[name] = median_first(
                    lambda cb: rag.ask(QUESTION, pages=[page.id], on_text=cb), args.repeats
                )
        rows["in-process llava"] = median_first(llava_in_process(llava, page, params), args.repeats)
        with (
            served(llava) as url,
            RAG.load(root / "store", endpoint=url, model_name=str(llava), params=params) as rag,
        ):
            rows["served llava"] = median_first(
                lambda cb: rag.ask(QUESTION, pages=[page.id], on_text=cb), args.repeats
            )
    for name, seconds in rows.items():
        print(f"{name:28s} first token {1000 * seconds:8.1f} ms (median of {args.repeats})")
    ratio = rows["served llava"] / rows["in-process llava"]
    print(f"RESULT first-token latency: transformers serve / in-process = {ratio:.2f}")


if __name__ == "__main__":
    main()
