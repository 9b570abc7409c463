"""The README's "Ask your documents" section as written: ``evidra serve`` (started verbatim, filled
through its API as the browser fills it), the ``curl`` to its OpenAI endpoint, ``evidra mcp``
(started verbatim by the MCP SDK's stdio client), then the command-line steps, in order."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from app_server_helpers import upload

from evidra.cli.main import main
from evidra.data.synth.documents import generate_documents

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cli"))
from test_readme_commands import _section, shown_commands  # noqa: E402

URL = "http://127.0.0.1:8000"


def _section_text() -> str:
    return _section((ROOT / "README.md").read_text(), "Ask your documents")


def _curl_lines(section: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    lines = [line for b in blocks for line in b.replace("\\\n", " ").splitlines()]
    return [line.split("  #", 1)[0].strip() for line in lines if line.startswith("curl ")]


def _env() -> dict[str, str]:
    src = str(ROOT / "src")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env.pop("EVIDRA_APP_API_KEY", None)
    return env


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _serve(command: str, cwd: Path) -> subprocess.Popen[str]:
    """``evidra <command>`` as a process, once it printed its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "evidra.cli.main", *shlex.split(command)],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert f"on {URL} " in line, line
    return process


def _fill(docs: Path) -> None:
    for pdf in sorted(docs.glob("*.pdf")):
        assert upload(URL, pdf.name, pdf.read_bytes())["state"] == "done"


async def _mcp(command: str, cwd: Path) -> list[str]:
    from mcp import Client, StdioServerParameters

    argv = shlex.split(command)
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "evidra.cli.main", *argv], cwd=str(cwd), env=_env()
    )
    async with Client(server) as client:
        found = await client.call_tool("search", {"query": "founded", "k": 2})
        return [h["label"] for h in json.loads(found.content[0].text)["hits"]]


@pytest.mark.slow
def test_the_ask_section_runs_as_written(
    tmp_path: Path, tiny_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK is in the app extra")
    if shutil.which("curl") is None or not _port_free(8000):
        pytest.skip("needs curl and a free port 8000 (the README's own address)")
    section = _section_text()
    commands = shown_commands(section)
    assert [c.split()[0] for c in commands] == ["serve", "mcp", "ingest", "index", "index", "ask"]
    (curl,) = _curl_lines(section)
    generate_documents(tmp_path, n_docs=2, seed=2, dpi=50)  # writes tmp_path/docs/*.pdf
    (tmp_path / "docs" / "doc_000.pdf").rename(tmp_path / "docs" / "report.pdf")  # the section's file name
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "Qwen2.5-VL-7B").symlink_to(tiny_dirs["qwen2_5_vl"], target_is_directory=True)

    server = _serve(commands[0], tmp_path)
    try:
        _fill(tmp_path / "docs")
        reply = json.loads(
            subprocess.run(
                ["bash", "-c", curl], capture_output=True, text=True, check=True, timeout=120
            ).stdout
        )
        assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["content"]
        assert {p["document"] for p in reply["pages"]} <= {"report.pdf", "doc_001.pdf"} and reply["pages"]
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C: stops as serve-index does, status 130
        assert server.wait(timeout=60) == 130

    labels = asyncio.run(_mcp(commands[1], tmp_path))
    assert labels and all(re.fullmatch(r"(report|doc_001)\.pdf p\. \d", label) for label in labels)

    monkeypatch.chdir(tmp_path)
    for command in commands[2:]:
        assert main(["-q", *shlex.split(command)]) == 0, command
    assert "data:image/png;base64," in (tmp_path / "answer.html").read_text()
