"""Model references: local directories, hub ids resolved from a hub cache this test fills, tiny:ARCH."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evidra.core.errors import ModelLoadError
from evidra.models.loading import load_vlm
from evidra.models.references import (
    HubId,
    looks_like_hub_id,
    parse_hub_id,
    recorded_ref,
    resolve_model_ref,
)

COMMIT = "1234567890abcdef1234567890abcdef12345678"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Qwen/Qwen2.5-VL-7B-Instruct", HubId("Qwen/Qwen2.5-VL-7B-Instruct")),
        ("vidore/colqwen2-v1.0@v1.0", HubId("vidore/colqwen2-v1.0", "v1.0")),
        (f"org/name@{COMMIT}", HubId("org/name", COMMIT)),
        ("/abs/dir", None),
        ("./rel/dir", None),
        ("a/b/c", None),
        ("../name", None),
        ("org/..", None),
        ("name", None),
        ("tiny:qwen2_5_vl", None),
    ],
)
def test_parse_hub_id(text: str, expected: HubId | None) -> None:
    assert parse_hub_id(text) == expected


def test_an_existing_relative_path_is_a_path_not_a_hub_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ckpt" / "model").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert not looks_like_hub_id("ckpt/model") and not looks_like_hub_id("ckpt/other")  # beside ckpt/: a path
    assert resolve_model_ref("ckpt/model") == Path("ckpt/model")
    assert recorded_ref("ckpt/model") == str(tmp_path / "ckpt" / "model")  # absolute: valid from anywhere
    assert recorded_ref("org/name@v1") == "org/name@v1"


def test_hub_id_loads_from_the_offline_cache(hub_cache: Any, tiny_dirs: dict[str, Path]) -> None:
    snapshot = hub_cache.publish(tiny_dirs["qwen2_5_vl"], "tiny-org/tiny-vl", COMMIT)
    assert resolve_model_ref("tiny-org/tiny-vl") == snapshot
    assert resolve_model_ref(f"tiny-org/tiny-vl@{COMMIT}") == snapshot
    vlm = load_vlm("tiny-org/tiny-vl")
    assert vlm.arch == "qwen2_5_vl" and vlm.path == snapshot
    from evidra.rl.runs.export import resolve_trained_model

    assert resolve_trained_model("tiny-org/tiny-vl") == str(snapshot)  # --model of ask / eval


def test_a_hub_id_missing_from_the_offline_cache_is_one_line(hub_cache: Any) -> None:
    with pytest.raises(ModelLoadError) as info:
        load_vlm("tiny-org/absent", kind="Qwen-VL model")
    message = str(info.value)
    assert "\n" not in message
    assert "'tiny-org/absent'" in message and "`hf download tiny-org/absent`" in message
    assert str(hub_cache.root) in message and "HF_HUB_OFFLINE" in message
    with pytest.raises(ModelLoadError, match=r"`hf download tiny-org/absent --revision v2`"):
        resolve_model_ref("tiny-org/absent@v2")


def test_hub_errors_online_are_one_line(hub_cache: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Online (HF_HUB_OFFLINE unset) the hub library is asked, with the cache read from the
    environment; its errors become one line each. The hub itself is replaced: no network here."""
    import httpx
    import huggingface_hub
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    calls: list[dict[str, Any]] = []
    response = httpx.Response(404, request=httpx.Request("GET", "https://hub.invalid/api"))

    def fake(repo_id: str, **kwargs: Any) -> str:
        calls.append({"repo_id": repo_id, **kwargs})
        if repo_id == "org/secret":
            raise RepositoryNotFoundError("404 Client Error\nmore lines", response=response)
        raise RevisionNotFoundError("404 revision\nmore", response=response)

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    with pytest.raises(ModelLoadError) as info:
        resolve_model_ref("org/secret", "ColQwen2 retriever")
    assert "\n" not in str(info.value) and "hf auth login" in str(info.value)
    assert calls[0]["local_files_only"] is False and calls[0]["cache_dir"] == hub_cache.root
    with pytest.raises(ModelLoadError, match=r"^hub repository 'org/name' has no revision 'nope';"):
        resolve_model_ref("org/name@nope")
    assert calls[1]["revision"] == "nope"


def test_tiny_references_build_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    first = resolve_model_ref("tiny:qwen2", tiny_cache=tmp_path)
    assert first == tmp_path / "tiny-qwen2" and (first / "config.json").is_file()
    stamp = (first / "config.json").stat().st_mtime_ns
    assert resolve_model_ref("tiny:qwen2", tiny_cache=tmp_path) == first
    assert (first / "config.json").stat().st_mtime_ns == stamp  # reused, not built again
    with pytest.raises(ModelLoadError, match=r"^'tiny:qwen9': unknown tiny architecture 'qwen9'; choose"):
        resolve_model_ref("tiny:qwen9", tiny_cache=tmp_path)


def test_neither_path_nor_hub_id_nor_tiny(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"^no model folder .*; pass an existing checkpoint folder"):
        resolve_model_ref(tmp_path / "a" / "b" / "c")
    with pytest.raises(ModelLoadError, match=r"^no model folder 'a:b'; pass an existing checkpoint folder"):
        resolve_model_ref("a:b")  # neither a path, nor a hub id, nor tiny:ARCH
    with pytest.raises(ModelLoadError, match=r"^no model given"):
        resolve_model_ref("  ")
