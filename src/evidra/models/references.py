"""Model references as users write them: a local directory, a hub id, or ``tiny:ARCH``.

Every loader (the policy, the retriever encoders, ``--model`` of ``ask`` / ``eval`` / ``index``
and ``model.path`` of a recipe) turns its reference into a directory here first:

- a path that exists is used as is;
- ``org/name`` or ``org/name@revision`` naming no local path is a Hugging Face hub repository,
  fetched with ``huggingface_hub.snapshot_download`` into the hub cache (``$HF_HUB_CACHE``, else
  ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``); with ``HF_HUB_OFFLINE=1`` only the cache
  is read, and a repository missing there is a one-line error saying how to download it;
- ``tiny:ARCH`` builds (once) a tiny random checkpoint of ``ARCH`` (``evidra.models.tiny``) in a
  cache folder, so every command can be tried offline.

>>> parse_hub_id("Qwen/Qwen2.5-VL-7B-Instruct@main")
HubId(repo_id='Qwen/Qwen2.5-VL-7B-Instruct', revision='main')
>>> parse_hub_id("/abs/path") is None, parse_hub_id("a/b/c") is None
(True, True)
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from evidra.errors import ModelLoadError

logger = logging.getLogger(__name__)

TINY_PREFIX = "tiny:"
# the hub's repo-id rule: owner and name of letters, digits, '-', '_', '.'; an optional @revision
_HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?")
# formats evidra never loads; skipping them keeps a download to what transformers reads
_IGNORED = ("*.gguf", "*.onnx", "*.onnx_data", "*.h5", "*.msgpack", "*.ot", "*.tflite")
_IGNORED_DIRS = ("onnx/*", "openvino/*", "coreml/*")


@dataclass(frozen=True)
class HubId:
    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "")

    def download_command(self) -> str:
        return f"hf download {self.repo_id}" + (f" --revision {self.revision}" if self.revision else "")


def parse_hub_id(text: str) -> HubId | None:
    """``org/name[@revision]`` as a ``HubId``; None for anything else (an absolute path, a/b/c)."""
    match = _HUB_ID.fullmatch(text.strip())
    if match is None or ".." in match["repo"]:
        return None
    return HubId(match["repo"], match["rev"])


def looks_like_path(text: str) -> bool:
    """Whether ``text`` is meant as a local path even if it could spell a hub id: it starts with
    ``/``, ``./``, ``../`` or ``~``, holds a backslash, or its first folder exists here
    (``ckpt/tiny-vll`` beside a ``ckpt/`` folder is a mistyped path, not a hub repository).

    >>> looks_like_path("./model"), looks_like_path("Qwen/Qwen2.5-VL-3B-Instruct")
    (True, False)
    """
    text = text.strip()
    if text.startswith(("/", "./", "../", "~")) or "\\" in text or text in (".", ".."):
        return True
    first = text.split("/", 1)[0]
    return "/" in text and Path(first).is_dir()


def looks_like_hub_id(text: str) -> bool:
    """``org/name[@revision]`` that is no path here: meant as a hub repository id."""
    return (
        parse_hub_id(text) is not None and not Path(text).expanduser().exists() and not looks_like_path(text)
    )


def hub_cache_dir() -> Path:
    """The hub cache, read from the environment at each call (``HF_HUB_CACHE``, then ``HF_HOME``)."""
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache).expanduser()
    if home := os.environ.get("HF_HOME"):
        return Path(home).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set (read at each call, as the hub library reads it once)."""
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE")
    return constants.HF_HUB_OFFLINE if value is None else value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def download(hub: HubId, kind: str = "model") -> Path:
    """The snapshot directory of ``hub`` in the hub cache, downloaded unless offline."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    cache, offline = hub_cache_dir(), hub_offline()
    try:
        folder = snapshot_download(
            hub.repo_id,
            revision=hub.revision,
            cache_dir=cache,
            local_files_only=offline,
            ignore_patterns=[*_IGNORED, *_IGNORED_DIRS],
        )
    except LocalEntryNotFoundError as exc:
        if offline:
            raise ModelLoadError(
                f"{str(hub)!r} is no local directory, and as a hub repository it is not in the hub cache "
                f"{cache} (HF_HUB_OFFLINE is set); download it once online (`{hub.download_command()}`) "
                f"or pass a local {kind} checkpoint directory"
            ) from None
        raise ModelLoadError(
            f"could not download {kind} {str(hub)!r} ({_first_line(exc)}); check the connection, or "
            "pass a local checkpoint directory"
        ) from None
    except RevisionNotFoundError:
        raise ModelLoadError(
            f"hub repository {hub.repo_id!r} has no revision {hub.revision!r}; pass an existing branch, "
            "tag or commit after the @"
        ) from None
    except RepositoryNotFoundError:  # also a gated or private repository without a token
        raise ModelLoadError(
            f"{str(hub)!r} is neither a local directory nor a hub repository this machine may read; "
            "check the spelling, run `hf auth login` for a gated or private one, or pass a local "
            f"{kind} checkpoint directory"
        ) from None
    except (HFValidationError, OSError, ValueError) as exc:  # HTTP errors are OSErrors
        raise ModelLoadError(
            f"could not fetch {kind} {str(hub)!r} from the hub: {_first_line(exc)}"
        ) from None
    logger.info("%s %s resolved to %s", kind, hub, folder)
    return Path(folder)


def tiny_checkpoint(arch: str, cache_dir: str | Path | None = None) -> Path:
    """The tiny random ``arch`` checkpoint under ``cache_dir`` (default: evidra's private cache),
    built on first use aside and published with one rename, so concurrent builders never mix."""
    from evidra.cache import private_cache_dir
    from evidra.models.tiny import build_tiny

    root = Path(cache_dir) if cache_dir is not None else private_cache_dir() / "tiny"
    target = root / f"tiny-{arch}"
    if not (target / "config.json").is_file():
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".tmp-tiny-{arch}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        build_tiny(arch, tmp)  # refuses an unknown arch, naming the known ones
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    return target


def recorded_ref(ref: str | Path) -> str:
    """``ref`` as a record written to disk should keep it: a local path made absolute (it stays
    valid from any directory), a hub id or ``tiny:ARCH`` as written (it stays valid on any machine).

    >>> recorded_ref("tiny:colqwen2"), recorded_ref("vidore/colqwen2-v1.0-hf@main")
    ('tiny:colqwen2', 'vidore/colqwen2-v1.0-hf@main')
    """
    text = str(ref).strip()
    if text.startswith(TINY_PREFIX) or looks_like_hub_id(text):
        return text
    return str(Path(text).expanduser().resolve())


def _nearby(path: Path) -> str:
    """`` (did you mean 'ckpt/tiny-vl'?)`` for a sibling close to ``path``'s name, else ""."""
    import difflib

    parent = path.parent
    if not parent.is_dir():
        return ""
    names = [p.name for p in parent.iterdir() if p.is_dir()]
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.6)
    return f" (did you mean {str(parent / close[0])!r}?)" if close else ""


def resolve_model_ref(ref: str | Path, kind: str = "model", *, tiny_cache: str | Path | None = None) -> Path:
    """The local directory a model reference names (see the module docstring).

    ``kind`` names what the caller wants, in errors ("ColQwen2 retriever"); ``tiny_cache`` is where
    ``tiny:ARCH`` checkpoints are built (a training run passes its own folder).
    """
    text = str(ref).strip()
    if not text:
        raise ModelLoadError(
            f"no {kind} given; pass a local checkpoint directory, a hub id (org/name) or tiny:ARCH"
        )
    if text.startswith(TINY_PREFIX):
        from evidra.errors import InvalidInputError

        try:
            return tiny_checkpoint(text[len(TINY_PREFIX) :], tiny_cache)
        except InvalidInputError as exc:
            raise ModelLoadError(f"{text!r}: {exc}") from None
    path = Path(text).expanduser()
    if path.exists():
        return path
    if looks_like_path(text):
        raise ModelLoadError(
            f"no such directory: {text!r}{_nearby(path)}; pass an existing {kind} checkpoint directory"
        )
    hub = parse_hub_id(text)
    if hub is not None:
        return download(hub, kind)
    raise ModelLoadError(
        f"{text!r} is not a directory; pass a local {kind} checkpoint directory (with config.json), "
        "a hub id (org/name[@revision]) or tiny:ARCH"
    )
