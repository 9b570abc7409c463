"""Entry point of the ``evidra`` command.

Each subcommand lives in its own module with ``register(subparsers)``, which adds its parser
and sets ``func(args) -> int``. Errors raised on purpose (``EvidraError``) print one line and
exit with status 2; a reader of stdout that leaves early (``| head``) ends the command quietly
with status 141. Only the CLI configures logging and progress bars, never the library.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from evidra import __version__
from evidra.cli._help import polish
from evidra.cli._logging import setup as setup_logging
from evidra.cli._progress import show_bars
from evidra.cli._ranks import launch, rank_log, say
from evidra.cli._terminal import shown
from evidra.core.errors import EvidraError

SUBCOMMANDS = (
    "ingest",
    "pages",
    "ask",
    "train",
    "demo",
    "index",
    "serve-index",
    "serve",
    "mcp",
    "eval",
    "export",
    "data",
    "models",
)


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(
        prog="evidra",
        description="Evidence-grounded visual document RAG: ingest, ask, train, evaluate.",
    )
    parser.add_argument("--version", action="version", version=f"evidra {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more log output (-vv: debug, with library warnings)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="only warnings and errors, no progress bars"
    )
    parser.add_argument(
        "--method-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE (my_pkg.my_method, its folder on PYTHONPATH) first, so that the methods "
        "it defines are known to every command; repeatable. Importing runs the module's code",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"evidra.cli.{name.replace('-', '_')}").register(subparsers)
    polish(parser)  # -q/-v after the subcommand too, full names in errors, defaults and examples in help
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # argparse matches a subcommand's positionals at their first occurrence, so `train rl --config F
    # a.b=1` would leave `a.b=1` over; dotted overrides may therefore come anywhere after the mode.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not (hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra)):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    if args.command is None:
        parser.print_help()
        return 2
    setup_logging(args.verbose, args.quiet)
    show_bars(not args.quiet)
    name = getattr(args, "command_path", f"evidra {args.command}")  # "evidra index search"
    try:
        _import_method_modules([*args.method_module, *getattr(args, "method_module_after", [])])
        status = int(args.func(args))
        sys.stdout.flush()  # a reader that left shows here, not at interpreter exit
        return status
    except EvidraError as exc:
        say(f"{name}: error: {shown(exc)}")  # one whole line; "[rank N] " first under a launcher
        return 2
    except KeyboardInterrupt:
        say(f"{name}: interrupted")
        return 130
    except BrokenPipeError:
        return _reader_left()
    except Exception as exc:
        if not _told_from_another_rank(name, exc):
            raise
        return 1


def _import_method_modules(names: Sequence[str]) -> None:
    """``--method-module``: the user's own method modules, imported before the command runs."""
    if names:
        from evidra.methods.method import import_method_module

        for name in names:
            import_method_module(name)


def _told_from_another_rank(name: str, exc: Exception) -> bool:
    """A bug's traceback is for rank 0's stderr; a rank other than 0 under a launcher wrote it
    to its log (``_ranks.rank_output``) and says so in one line. False: raise it as usual."""
    log = rank_log()
    if launch().rank == 0 or log is None:
        return False
    first = (str(exc).strip().splitlines() or [""])[0]
    say(f"{name}: {type(exc).__name__}: {shown(first)} (traceback in {log})")
    return True


def _reader_left() -> int:
    """The reader of stdout closed it (``evidra pages S | head``): stop quietly, as a command
    ended by SIGPIPE does (status 141), pointing stdout at the null device so that the flush at
    interpreter exit finds nowhere to fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # a stdout with no descriptor (captured in tests)
        pass
    return 128 + 13  # SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
