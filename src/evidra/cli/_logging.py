"""What the CLI shows on stderr: evidra's log lines above any progress bar, and no library chatter.

Only the CLI configures this; the library just logs. At the default verbosity (and with ``-v``)
the CLI hides what is addressed to developers rather than users: deprecation notices
(``DeprecationWarning``, ``PendingDeprecationWarning``, ``FutureWarning``) from anywhere, every
warning raised inside the heavy libraries evidra drives (transformers, PEFT, accelerate, torch,
PIL, DeepSpeed, ...), their INFO logging, and DeepSpeed's accelerator notice, which DeepSpeed
prints on stdout, where it would corrupt ``--json`` output. ``-vv`` shows all of it again.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

from evidra.cli._terminal import shown

FORMAT = "%(levelname)s %(name)s: %(message)s"
# libraries whose INFO logging is chatter for a CLI user (their warnings still show)
CHATTY_LOGGERS = ("transformers", "httpx", "urllib3", "PIL", "huggingface_hub", "accelerate", "matplotlib")
# libraries whose Python warnings (any category) are hidden unless -vv
QUIET_MODULES = (
    "transformers",
    "peft",
    "accelerate",
    "torch",
    "torchvision",
    "PIL",
    "deepspeed",
    "trl",
    "huggingface_hub",
    "tokenizers",
    "safetensors",
)
DEVELOPER_WARNINGS: tuple[type[Warning], ...] = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
# DeepSpeed logs this on every CPU-only import (a transformers save imports it when installed)
DEEPSPEED_NOTICES = ("Setting accelerator to CPU",)


class _AboveBars(logging.StreamHandler):
    """Writes each record through ``tqdm.write``, so a log line never breaks a progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        try:
            tqdm.write(shown(self.format(record), keep="\n"), file=self.stream)  # names in messages
        except Exception:  # logging must never raise; report it the way logging does
            self.handleError(record)


class DropMessages(logging.Filter):
    """Drops records whose message starts with one of ``prefixes``."""

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


def quiet_library_warnings() -> None:
    """Hide developer-facing warnings and every warning raised inside a ``QUIET_MODULES`` library."""
    for category in DEVELOPER_WARNINGS:
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("ignore", module=rf"({'|'.join(QUIET_MODULES)})(\.|$)")


def setup(verbose: int, quiet: bool) -> None:
    """Log format and level for ``-v``/``-q``; library chatter off unless ``-vv``."""
    level = logging.WARNING if quiet else logging.DEBUG if verbose > 1 else logging.INFO
    logging.basicConfig(level=level, format=FORMAT, handlers=[_AboveBars(sys.stderr)])
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if verbose < 2:
        for name in CHATTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        deepspeed = logging.getLogger("DeepSpeed")  # its own stdout handler; a filter survives its setup
        if not any(isinstance(f, DropMessages) for f in deepspeed.filters):
            deepspeed.addFilter(DropMessages(DEEPSPEED_NOTICES))
        quiet_library_warnings()
    if verbose < 1:  # weight loading/saving bars are noise for CLI users
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
