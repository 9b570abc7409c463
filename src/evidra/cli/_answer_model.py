"""The options that say which model answers, shared by ``ask``, ``serve`` and ``mcp``: a checkpoint
(``--model``) or an OpenAI-compatible server (``--endpoint URL --model-name NAME``, the flags of
``evidra eval``), whether to ask for a structured JSON answer, and the model's box convention."""

from __future__ import annotations

import argparse
from typing import TypedDict

from evidra.core.errors import InvalidInputError
from evidra.openai.client import DEFAULT_API_KEY_ENV


def add_endpoint_args(p: argparse.ArgumentParser) -> None:
    """``--endpoint``, ``--model-name``, ``--api-key-env``, ``--structured`` and ``--box-format``."""
    p.add_argument(
        "--endpoint",
        default=None,
        metavar="URL",
        help="OpenAI-compatible base URL (…/v1) of a VLM server that answers instead of --model",
    )
    p.add_argument("--model-name", default=None, metavar="NAME", help="model name sent to --endpoint")
    p.add_argument(
        "--api-key-env",
        default=DEFAULT_API_KEY_ENV,
        metavar="VAR",
        help=f"environment variable holding --endpoint's API key (default: {DEFAULT_API_KEY_ENV}; "
        "the key is read from the environment only)",
    )
    p.add_argument(
        "--structured",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ask for a JSON answer whose steps cite a page and a box (default: on for --endpoint and "
        "a released *-Instruct --model, off for a checkpoint trained on its paradigm's format)",
    )
    add_box_format_arg(p)


def add_box_format_arg(p: argparse.ArgumentParser | argparse._ArgumentGroup, default: str = "") -> None:
    """``--box-format NAME``: the box convention the model writes (``evidra.core.box_formats``)."""
    from evidra.core.box_formats import BOX_FORMATS

    p.add_argument(
        "--box-format",
        default=None,
        metavar="NAME",
        help=f"box convention the model writes ({', '.join(BOX_FORMATS.names())}; "
        f"default: {default or 'chosen from the model config or name'})",
    )


def check_endpoint_args(args: argparse.Namespace, model_option: str = "--model") -> None:
    """One model (``--model`` or ``--endpoint`` with ``--model-name``), the key variable and the
    box format checked in a second, before any store or index opens."""
    from evidra.core.box_formats import BOX_FORMATS
    from evidra.openai.client import check_api_key_env

    if args.endpoint and getattr(args, "model", None):
        raise InvalidInputError(f"pass {model_option} (a checkpoint) or --endpoint (a server), not both")
    if args.endpoint and not args.model_name:
        raise InvalidInputError(
            f"--endpoint {args.endpoint} needs --model-name: the model that server serves"
        )
    if args.model_name and not args.endpoint:
        raise InvalidInputError("--model-name names the model of --endpoint URL; pass --endpoint too")
    if args.endpoint:
        check_api_key_env(args.api_key_env, "--api-key-env")
    if args.box_format is not None:
        BOX_FORMATS.get(args.box_format.strip().lower())


class EndpointOptions(TypedDict):
    """The ``RAG.load`` keywords of the answer-model options."""

    endpoint: str | None
    model_name: str | None
    api_key_env: str
    structured: bool | None
    box_format: str | None


def endpoint_options(args: argparse.Namespace) -> EndpointOptions:
    """The ``RAG.load`` keywords of these options."""
    return {
        "endpoint": args.endpoint,
        "model_name": args.model_name,
        "api_key_env": args.api_key_env,
        "structured": args.structured,
        "box_format": args.box_format,
    }
