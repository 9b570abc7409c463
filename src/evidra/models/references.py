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

``check_model_ref`` says in a second, before any data is prepared, whether a reference can name a
model at all: a local folder (with ``config.json`` where one is needed), ``tiny:ARCH`` of a known
architecture, or a hub repository found in the hub cache or, online, on the hub (its metadata only,
nothing downloaded). ``ckpt/x`` with no ``ckpt/`` folder here is "no model folder 'ckpt/x'", and
with the hub out of reach, or ``HF_HUB_OFFLINE`` set, that is the whole one-line error.

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
from typing import Literal

from evidra.core.errors import ModelLoadError

logger = logging.getLogger(__name__)

TINY_PREFIX = "tiny:"
# the hub's repo-id rule: owner and name of letters, digits, '-', '_', '.'; an optional @revision
_HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?")
# formats evidra never loads; skipping them keeps a download to what transformers reads
_IGNORED = ("*.gguf", "*.onnx", "*.onnx_data", "*.h5", "*.msgpack", "*.ot", "*.tflite")
_IGNORED_DIRS = ("onnx/*", "openvino/*", "coreml/*")
_MODEL_CONFIGS = ("config.json", "adapter_config.json")  # a model, or a PEFT adapter over one
HUB_LOOKUP_TIMEOUT = 10.0  # seconds for the hub to answer whether a repository exists

RefKind = Literal["folder", "tiny", "hub"]


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
            raise ModelLoadError(_not_cached(hub, kind)) from None
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


def _not_cached(hub: HubId, kind: str) -> str:
    return (
        f"no {kind} folder {str(hub)!r}, and as a hub repository it is not in the hub cache "
        f"{hub_cache_dir()} (HF_HUB_OFFLINE is set); download it once online (`{hub.download_command()}`) "
        "or pass an existing checkpoint folder"
    )


def tiny_checkpoint(arch: str, cache_dir: str | Path | None = None) -> Path:
    """The tiny random ``arch`` checkpoint under ``cache_dir`` (default: evidra's private cache),
    built on first use aside and published with one rename, so concurrent builders never mix."""
    from evidra.models.tiny import build_tiny
    from evidra.safeio.cache import private_cache_dir

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
        from evidra.core.errors import InvalidInputError

        try:
            return tiny_checkpoint(text[len(TINY_PREFIX) :], tiny_cache)
        except InvalidInputError as exc:
            raise ModelLoadError(f"{text!r}: {exc}") from None
    path = Path(text).expanduser()
    if path.exists():
        return path
    if looks_like_path(text):
        raise ModelLoadError(_no_folder(text, kind))
    hub = parse_hub_id(text)
    if hub is not None:
        return download(hub, kind)
    raise ModelLoadError(_no_folder(text, kind))


def _no_folder(text: str, kind: str) -> str:
    path = Path(text).expanduser()
    return (
        f"no {kind} folder {text!r}{_nearby(path)}; pass an existing checkpoint folder (with "
        "config.json), a hub id (org/name[@revision]) or tiny:ARCH"
    )


def ref_kind(ref: str | Path) -> RefKind | None:
    """What model reference ``ref`` is, judged on this machine alone (nothing loaded, no network):
    an existing local path, ``tiny:ARCH``, an ``org/name[@revision]`` that is no path here, or None.

    >>> ref_kind("tiny:qwen2_5_vl"), ref_kind("Qwen/Qwen2.5-VL-3B-Instruct"), ref_kind("./no/such")
    ('tiny', 'hub', None)
    """
    text = str(ref).strip()
    if text.startswith(TINY_PREFIX):
        return "tiny"
    if text and Path(text).expanduser().exists():
        return "folder"
    return "hub" if looks_like_hub_id(text) else None


def written_as_checkpoint(ref: str | Path) -> bool:
    """Whether ``ref`` is written as a checkpoint reference (a path, ``org/name``, ``tiny:ARCH``),
    not as a name an encoder registered by a user reads its own way.

    >>> written_as_checkpoint("./ckpt"), written_as_checkpoint("org/name"), written_as_checkpoint("bge:m3")
    (True, True, False)
    """
    text = str(ref).strip()
    return (
        text.startswith(TINY_PREFIX)
        or parse_hub_id(text) is not None
        or looks_like_path(text)
        or Path(text).expanduser().exists()
    )


def check_model_ref(
    ref: str | Path, kind: str = "model", *, option: str = "", need_config: bool = True
) -> RefKind:
    """Refuse, in one line, a reference that names no ``kind``; cheap enough to run before any data
    is prepared (no weights read, nothing downloaded or built). ``option`` (``--model``,
    ``model.path``) starts the message; ``need_config``: a local folder must hold ``config.json``
    (or a PEFT ``adapter_config.json``); without it, any folder passes (a training run, which its
    loader exports).

    >>> check_model_ref("./ckpt/x", "policy model", option="model.path")
    Traceback (most recent call last):
    evidra.core.errors.ModelLoadError: model.path: no policy model folder './ckpt/x'; pass an existing ...
    """
    try:
        return _check_ref(str(ref).strip(), kind, need_config)
    except ModelLoadError as exc:
        if not option:
            raise
        raise ModelLoadError(f"{option}: {exc}") from None


def _check_ref(text: str, kind: str, need_config: bool) -> RefKind:
    if not text:
        raise ModelLoadError(
            f"no {kind} given; pass a local checkpoint folder, a hub id (org/name) or tiny:ARCH"
        )
    found = ref_kind(text)
    if found == "tiny":
        _check_tiny(text, kind)
    elif found == "folder":
        _check_folder(Path(text).expanduser(), text, kind, need_config)
    elif found == "hub":
        hub = parse_hub_id(text)
        assert hub is not None  # looks_like_hub_id parsed it
        _check_hub(hub, text, kind)
    else:
        raise ModelLoadError(_no_folder(text, kind))
    return found


def _check_tiny(text: str, kind: str) -> None:
    from evidra.models.tiny import TINY_KINDS

    arch = text[len(TINY_PREFIX) :]
    if arch not in TINY_KINDS:
        raise ModelLoadError(
            f"{kind} {text!r}: unknown tiny architecture {arch!r}; choose one of {', '.join(TINY_KINDS)}"
        )


def _check_folder(path: Path, text: str, kind: str, need_config: bool) -> None:
    if not path.is_dir():
        raise ModelLoadError(f"{kind} {text!r} is a file, not a checkpoint folder; pass the folder")
    if need_config and not any((path / name).is_file() for name in _MODEL_CONFIGS):
        raise ModelLoadError(
            f"{kind} folder {text!r} holds no config.json; pass a checkpoint folder in transformers "
            "format (the one holding config.json)"
        )


def _in_hub_cache(hub: HubId) -> bool:
    from huggingface_hub import try_to_load_from_cache

    cache = hub_cache_dir()
    return any(
        isinstance(try_to_load_from_cache(hub.repo_id, name, cache_dir=cache, revision=hub.revision), str)
        for name in _MODEL_CONFIGS
    )


def _check_hub(hub: HubId, text: str, kind: str) -> None:
    """A hub id no folder here answers to: found in the hub cache, or (online) on the hub."""
    if _in_hub_cache(hub):
        return
    if hub_offline():
        raise ModelLoadError(_not_cached(hub, kind))
    problem = _hub_lookup(hub)
    if problem:
        raise ModelLoadError(f"no {kind} folder {text!r}, and {problem}")


def _hub_lookup(hub: HubId) -> str:
    """Why the hub cannot serve ``hub`` ("" when it can): its metadata asked for, nothing fetched."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        HfApi().model_info(hub.repo_id, revision=hub.revision, timeout=HUB_LOOKUP_TIMEOUT)
    except RevisionNotFoundError:
        return (
            f"hub repository {hub.repo_id!r} has no revision {hub.revision!r}; pass an existing branch, "
            "tag or commit after the @"
        )
    except RepositoryNotFoundError:  # also a gated or private repository without a token
        return (
            f"no hub repository {hub.repo_id!r} this machine may read; check the spelling (write "
            "./ before a local path), or run `hf auth login` for a gated or private one"
        )
    except Exception as exc:  # the HTTP client's connection errors, which differ by hub version
        return (
            f"the hub could not be reached to look for repository {hub.repo_id!r} "
            f"({type(exc).__name__}: {_first_line(exc)}); pass an existing checkpoint folder, or check "
            "the connection"
        )
    return ""
