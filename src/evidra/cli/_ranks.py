"""Who speaks under ``accelerate launch``: the main process prints, the others write to their logs.

A launcher (``accelerate launch``, ``torchrun``) starts one evidra process per device and tells
each its place through ``RANK`` and ``WORLD_SIZE``, the variables ``accelerate`` itself reads.
Only rank 0 draws progress bars and prints results (``metrics: ...``). Inside ``rank_output``,
every other rank writes its log lines, Python warnings, transformers' messages and anything
printed to ``<output_dir>/logs/rank-N.log``. An error reaches stderr from every rank it happens
on, as one whole line prefixed with the rank (``[rank 1] evidra train rl: error: ...``) written
in a single call, so two ranks' errors never share a line; the traceback of an unexpected
exception on a rank other than 0 goes to that rank's log, and its stderr line names the file.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from evidra.cli._logging import FORMAT
from evidra.cli._progress import bars_shown, show_bars

logger = logging.getLogger(__name__)

_log: dict[str, Path | None] = {"path": None}  # this rank's log file, once rank_output routed to it


@dataclass(frozen=True)
class Launch:
    """This process's place among the processes a launcher started."""

    rank: int = 0
    world: int = 1

    @property
    def prefix(self) -> str:
        """``"[rank N] "`` before each error line when there are several processes."""
        return f"[rank {self.rank}] " if self.world > 1 else ""


def launch() -> Launch:
    """The rank and world size the launcher set (one process of one when started directly)."""
    try:
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return Launch()
    return Launch(rank, world) if 0 <= rank < world else Launch()


def say(line: str) -> None:
    """Write one line to stderr at once, prefixed with this process's rank when there are several."""
    sys.stderr.write(f"{launch().prefix}{line}\n")
    sys.stderr.flush()


def rank_log() -> Path | None:
    """This rank's log file once ``rank_output`` routed its output there (kept after, for the
    error line of ``cli.main``), else None."""
    return _log["path"]


@contextmanager
def rank_output(output_dir: str | Path) -> Iterator[None]:
    """Within: a rank other than 0 draws no bars and writes its logs, warnings and stdout to
    ``<output_dir>/logs/rank-N.log``; rank 0 (and a lone process) is unchanged."""
    me = launch()
    if me.rank == 0:
        yield
        return
    path = Path(output_dir) / "logs" / f"rank-{me.rank}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(f"%(asctime)s {FORMAT}"))
    root = logging.getLogger()
    saved_handlers, bars = root.handlers[:], bars_shown()
    root.handlers = [handler]
    logging.captureWarnings(True)
    show_bars(False)
    library = _quiet_transformers()
    _log["path"] = path
    try:
        with redirect_stdout(handler.stream):
            yield
    except Exception as exc:  # the full story in the file; stderr gets one line (cli.main)
        logger.error("%s", exc, exc_info=not _is_evidra_error(exc))
        raise
    finally:
        _restore_transformers(library)
        show_bars(bars)
        logging.captureWarnings(False)
        root.handlers = saved_handlers
        handler.close()


def _is_evidra_error(exc: BaseException) -> bool:
    from evidra.core.errors import EvidraError

    return isinstance(exc, EvidraError)


def _quiet_transformers() -> bool:
    """transformers logs through a stderr handler of its own and draws its own bars: hand its
    records to the root logger (this rank's file) and hide its bars; True when it was done."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return False
    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()
    hf_logging.disable_progress_bar()
    return True


def _restore_transformers(done: bool) -> None:
    if not done:
        return
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    hf_logging.disable_propagation()
    hf_logging.enable_default_handler()
