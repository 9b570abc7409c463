"""Reading benchmark records as published: JSON, JSONL, parquet (HF exports) and their images.

Benchmarks ship as Hugging Face parquet shards, as JSON/JSONL annotation files, or as a
``datasets`` cache folder of parquet/arrow files. Every loader reads records through
``read_records``, which yields ``Record``s that remember their file and row, so a missing or
malformed field is reported as "file X, record N: missing field F" with a fix.

Parquet and arrow need ``pyarrow`` (extra ``[data]``), imported only when such a file is read.
JSONL exports of the same columns are read with the standard library; an HF image column
(``{"bytes": ..., "path": ...}``) may carry its bytes base64-encoded there.

Records are data, not trusted: an image path a record names (absolute, or climbing out with
``..``) must stay inside the dataset folder (``Record.root``) or the images folder the caller
passed, or the record is refused. The check is on the path as written; links placed inside
the folder by whoever assembled it (a Hugging Face cache links into its blob store) are followed.
"""

from __future__ import annotations

import ast
import base64
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evidra.core import imagefiles
from evidra.core.errors import InvalidInputError, MissingDependencyError
from evidra.core.jsonvalue import JSON
from evidra.core.types import Page, content_hash
from evidra.safeio.jsonfiles import read_json, read_json_lines

_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow")


@dataclass(frozen=True)
class Record:
    """One row of a benchmark file, with where it came from for error messages."""

    data: Mapping[str, object]
    file: Path
    index: int
    root: Path | None = None  # the dataset folder its paths must stay in (default: the file's folder)

    @property
    def folder(self) -> Path:
        return self.root if self.root is not None else self.file.parent

    def where(self) -> str:
        return f"{self.file}, record {self.index}"

    def get(self, name: str, default: object = None) -> object:
        return self.data.get(name, default)

    def require(self, name: str) -> object:
        """The field's value; a clear error naming the file, record and field if it is absent."""
        if name not in self.data or self.data[name] is None:
            known = ", ".join(sorted(self.data)) or "(no fields)"
            raise InvalidInputError(
                f"{self.where()}: missing field {name!r} (fields present: {known}); "
                "check that the file is this benchmark's published format"
            )
        return self.data[name]

    def require_any(self, *names: str) -> object:
        """The first present field among ``names`` (benchmarks renamed columns between releases)."""
        for name in names:
            if self.data.get(name) is not None:
                return self.data[name]
        return self.require(names[0])


def _iter_json(path: Path, list_key: str | None) -> Iterator[JSON]:
    if path.suffix == ".jsonl":
        yield from (row for _, row in read_json_lines(path, "benchmark file"))
        return
    data = read_json(path, "benchmark file")
    if isinstance(data, dict):
        key = list_key if list_key in data else next((k for k in ("data", "examples") if k in data), None)
        if key is None:
            raise InvalidInputError(f"{path}: expected a list of records or a {list_key or 'data'!r} key")
        data = data[key]
    if not isinstance(data, list):
        raise InvalidInputError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    yield from data


def _iter_arrow(path: Path) -> Iterator[object]:
    try:
        import pyarrow.ipc as ipc
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingDependencyError(
            f"reading {path} needs pyarrow; install the extra: pip install 'evidra[data]' "
            "(or export the split to JSONL)"
        ) from exc
    try:
        if path.suffix == ".parquet":
            table = pq.read_table(path)
        else:
            with path.open("rb") as fh:
                try:
                    table = ipc.open_stream(fh).read_all()
                except Exception:
                    fh.seek(0)
                    table = ipc.open_file(fh).read_all()
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InvalidInputError(
            f"benchmark file {str(path)!r} is not a readable {path.suffix[1:]} file ({reason}); "
            "pass the split as published"
        ) from None
    yield from table.to_pylist()


def data_files(path: str | Path) -> list[Path]:
    """The record files at ``path``: the file itself, or every supported file below a folder."""
    root = Path(path).expanduser()
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise InvalidInputError(f"benchmark path {str(path)!r} does not exist; pass a file or folder")
    files = sorted(p for p in root.rglob("*") if p.suffix in _SUFFIXES and p.is_file())
    files = [p for p in files if not p.name.startswith(("dataset_info", "state"))]
    if not files:
        raise InvalidInputError(f"no {'/'.join(_SUFFIXES)} files under {root}")
    return files


def read_records(
    path: str | Path, *, list_key: str | None = None, root: str | Path | None = None
) -> Iterator[Record]:
    """Every record of the file(s) at ``path``, in file order.

    ``root`` is the dataset folder the records' paths must stay in: by default ``path`` itself
    when it is a folder, else the folder holding it.
    """
    given = Path(path).expanduser()
    folder = Path(root).expanduser() if root is not None else given if given.is_dir() else given.parent
    for file in data_files(path):
        rows = _iter_arrow(file) if file.suffix in (".parquet", ".arrow") else _iter_json(file, list_key)
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise InvalidInputError(f"{file}, record {i}: expected an object, got {type(row).__name__}")
            yield Record(row, file, i, folder)


def literal_list(value: object, record: Record, name: str) -> list[object]:
    """A list field that may be stored as a Python/JSON literal string (lmms-lab, MMLongBench)."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value.strip()) if value.strip() else []
        except (ValueError, SyntaxError) as exc:
            raise InvalidInputError(
                f"{record.where()}: field {name!r} is not a list literal: {value!r}"
            ) from exc
    if isinstance(value, (int, float)):
        value = [value]
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise InvalidInputError(f"{record.where()}: field {name!r} must be a list, got {value!r}")
    return list(value)


def inside_folder(path: Path, folder: Path) -> bool:
    """Whether ``path`` as written (``..`` folded, links not followed) lies under ``folder``.

    >>> inside_folder(Path("/data/set/img/a.png"), Path("/data/set"))
    True
    >>> inside_folder(Path("/data/set/../other/a.png"), Path("/data/set"))
    False
    """
    return Path(os.path.normpath(path.absolute())).is_relative_to(os.path.normpath(folder.absolute()))


def _image_bytes(
    value: object, base: Path, record: Record, allowed: Sequence[Path]
) -> tuple[bytes | None, Path | None]:
    """Bytes or an existing file behind an image cell: path string, raw bytes or HF struct."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value), None
    if isinstance(value, Mapping):
        raw = value.get("bytes")
        if raw:
            if isinstance(raw, str) and len(raw) // 4 * 3 > imagefiles.MAX_DATA_URL_BYTES:
                raise InvalidInputError(
                    f"{record.where()}: image bytes of about {len(raw) // 4 * 3} bytes, over the cap of "
                    f"{imagefiles.MAX_DATA_URL_BYTES} bytes per image"
                )
            return (base64.b64decode(raw) if isinstance(raw, str) else bytes(raw)), None
        value = value.get("path")
    if isinstance(value, str) and value:
        path = Path(value) if Path(value).is_absolute() else base / value
        if not any(inside_folder(path, folder) for folder in allowed):
            raise InvalidInputError(
                f"{record.where()}: image path {value[:120]!r} points outside the dataset folder "
                f"{str(record.folder)!r}; a record may only name files inside it"
            )
        if path.is_file():
            return None, path
        raise InvalidInputError(f"{record.where()}: image file {str(path)!r} does not exist")
    raise InvalidInputError(f"{record.where()}: image cell holds neither bytes nor a path: {value!r:.80}")


def materialize_page(
    value: object,
    record: Record,
    *,
    page_id: str,
    image_dir: Path,
    base: Path | None = None,
    source: str = "",
    page_number: int = 1,
) -> Page:
    """A ``Page`` for an image cell; in-memory bytes are written once to ``image_dir/<hash>.png``.

    A path in the cell resolves against ``base`` (a folder the caller trusts, such as the
    ``images`` option; default: the record's file's folder) and must stay inside ``base`` or the
    dataset folder.
    """

    allowed = [record.folder] if base is None else [record.folder, base]
    data, path = _image_bytes(value, base or record.file.parent, record, allowed)
    if data is not None:
        image_dir.mkdir(parents=True, exist_ok=True)
        with imagefiles.opened(data, f"{record.where()}: image bytes") as im:
            suffix = ".png" if (im.format or "PNG").upper() == "PNG" else ".jpg"
            path = image_dir / f"{content_hash(data)}{suffix}"
            size = im.size
        if not path.exists():
            path.write_bytes(data)
    else:
        assert path is not None
        size = imagefiles.size(path, f"{record.where()}: image {path}")
    return Page(page_id, str(path), size[0], size[1], source=source, page_number=page_number)


def as_str(value: object) -> str:
    return "" if value is None else str(value)


def as_int(value: object, record: Record, name: str) -> int:
    """An integer field as a record stores it: a number, or its digits as text."""
    if isinstance(value, (int, float, str)):
        try:
            return int(value)
        except (ValueError, OverflowError):
            pass
    raise InvalidInputError(f"{record.where()}: field {name!r} must be an integer, got {value!r:.80}")


def as_float(value: object, record: Record, name: str) -> float:
    """A number field as a record stores it: a number, or its digits as text."""
    if isinstance(value, (int, float, str)):
        try:
            return float(value)
        except ValueError:
            pass
    raise InvalidInputError(f"{record.where()}: field {name!r} must be a number, got {value!r:.80}")


def as_mapping(value: object, record: Record, name: str) -> Mapping[str, object]:
    """A field that holds an object (a JSON object, a parquet struct)."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{record.where()}: field {name!r} must be an object, got {value!r:.80}")
    return value


def as_list(value: object, record: Record, name: str) -> list[object]:
    """A field that holds a list (a JSON list, a parquet list column)."""
    if not isinstance(value, (list, tuple)):
        raise InvalidInputError(f"{record.where()}: field {name!r} must be a list, got {value!r:.80}")
    return list(value)
