"""The README's first Python API snippet runs as written, with the checkpoint it names standing for a
tiny model, the GPU it names for this machine's CPU, and 16 new tokens for 512."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_python_api_snippet_runs(
    tmp_path: Path, tiny_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from evidra.data.synth.documents import generate_documents

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The Python API", 1)[1]
    snippet = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    assert 'PARADIGMS.get("coe")' in snippet and 'device="cuda"' in snippet
    generate_documents(tmp_path / "synth", n_docs=1, seed=3, dpi=50)
    (tmp_path / "synth" / "docs").rename(tmp_path / "papers")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "Qwen2.5-VL-3B-Instruct").symlink_to(
        tiny_dirs["qwen2_5_vl"], target_is_directory=True
    )
    monkeypatch.chdir(tmp_path)
    runnable = snippet.replace('device="cuda"', 'device="cpu"').replace(
        "max_new_tokens=512", "max_new_tokens=16"
    )
    namespace: dict[str, Any] = {}
    exec(compile(runnable, "README.md", "exec"), namespace)  # the README's own lines
    gen, parsed = namespace["gen"], namespace["parsed"]
    assert len(gen.token_ids) == len(gen.logprobs) > 0
    assert parsed.text == gen.text  # the parser read what was generated, and did not raise
