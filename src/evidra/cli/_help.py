"""What every subcommand's parser shares, added after the subcommands registered themselves:

- ``-q`` / ``-v`` / ``--method-module`` accepted after the subcommand too (``evidra ask -q ...``),
  not only before it;
- ``command_path``: the full name for errors (``evidra index search: error: ...``);
- help that shows each option's default, and ends with two or three examples (``EXAMPLES``).

Examples live here, beside each other, so they are checked together: each one parses with the
real parser (``tests/cli/test_help.py``).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

EXAMPLES: dict[str, tuple[str, ...]] = {
    "ingest": (
        "evidra ingest docs/ --store store/",
        "evidra ingest report.pdf --store store/ --meta year=2024 --meta team=finance",
        "evidra ingest scans/ --store store/ --dpi 100 --no-recursive",
    ),
    "pages": ("evidra pages store/", "evidra pages store/ --json"),
    "ask": (
        'evidra ask --store store/ --index idx/ --model ckpt/Qwen2.5-VL-7B "When was Orion founded?"',
        "evidra ask --store store/ --model ckpt/lat-7b --where file=report.pdf --html answer.html "
        '"Who leads Orion?"',
        "evidra ask --store store/ --index idx-vis/ --encoder ckpt/colqwen2 --model ckpt/lat-7b --json "
        '"Revenue in 2024?"',
    ),
    "train sft": (
        "evidra train sft --config configs/tiny/lat.yaml",
        "evidra train sft --config configs/lat.yaml model.path=ckpt/Qwen2.5-VL-7B --export ckpt/lat-cold",
        "evidra train sft --config configs/lat.yaml --data distilled.jsonl",
    ),
    "train rl": (
        "evidra train rl --config configs/tiny/lat.yaml",
        "evidra train rl --config configs/lat.yaml model.path=ckpt/lat-cold rollout.group_size=8",
        "accelerate launch --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no "
        "-m evidra.cli.main train rl --config configs/lat.yaml",
    ),
    "demo": ("evidra demo --out evidra-demo", "evidra demo --model ckpt/lat-7b --out demo-lat --overwrite"),
    "index build": (
        "evidra index build --store store/ --out idx/ --encoder bm25",
        "evidra index build --store store/ --out idx-vis/ --encoder colqwen2 --model ckpt/colqwen2",
        "evidra index build --store store/ --out idx/ --encoder bm25 --language de --overwrite",
    ),
    "index add": (
        "evidra index add --index idx/ --store store/",
        "evidra index add --index idx/ --store store/ --replace --pages 3f2a-p0001",
    ),
    "index delete": (
        "evidra index delete --index idx/ 3f2a-p0001",
        "evidra index delete --index idx/ 3f2a-p0001 3f2a-p0002",
    ),
    "index search": (
        'evidra index search --index idx/ "total revenue 2019"',
        'evidra index search --index idx/ -k 10 --where file=report.pdf --json "revenue"',
        'evidra index search --index idx-vis/ --encoder ckpt/colqwen2 "organisation chart"',
    ),
    "index eval": (
        "evidra index eval --index idx/ --queries queries.jsonl --qrels qrels.tsv",
        "evidra index eval --index idx-esg/ --benchmark data/esg_reports_v2/ -k 1 5 10 --json",
    ),
    "serve": (
        "evidra serve --store store/ --model ckpt/Qwen2.5-VL-7B",
        "evidra serve --store store/ --index idx/ --port 8080",
        "evidra serve --store store/ --host 0.0.0.0 --max-upload-mb 64",
    ),
    "mcp": (
        "evidra mcp --store store/ --model ckpt/Qwen2.5-VL-7B",
        "evidra mcp --store store/ --index idx/",
    ),
    "serve-index": (
        "evidra serve-index --index idx/ --port 8000",
        "evidra serve-index --index idx-vis/ --host 0.0.0.0 --port 8001 --max-batch 64",
    ),
    "eval": (
        "evidra eval --synthetic documents --paradigm coe --model ckpt/lat-7b --out results/",
        "evidra eval --synthetic documents --paradigm coe --model runs/lat --out results/lat --limit 50",
        "evidra eval --synthetic documents --paradigm direct --endpoint http://localhost:8000/v1 --out api/",
    ),
    "export": (
        "evidra export runs/lat ckpt/lat-7b",
        "evidra export runs/lat/checkpoint-200 ckpt/lat-adapter --adapter",
    ),
    "data distill": (
        "evidra data distill --config configs/lat.yaml --method lat --teacher http://localhost:8000/v1 "
        "--teacher-model qwen-72b --out distilled.jsonl",
        "evidra data distill --method evisrag --teacher http://localhost:8000/v1 --teacher-model qwen-72b "
        "--concurrency 16 --out evisrag.jsonl",
    ),
    "data multiexpert": (
        "evidra data multiexpert --config configs/cave.yaml --teacher http://localhost:8000/v1 "
        "--teacher-model qwen-72b --out experts.jsonl",
        "evidra data multiexpert --teacher http://localhost:8000/v1 --teacher-model qwen-72b --samples 4 "
        "--out experts.jsonl",
    ),
    "data filter": (
        "evidra data filter --config configs/lat.yaml --model ckpt/lat-cold --out subset.jsonl",
        "evidra data filter --config configs/lat.yaml --model ckpt/lat-cold --k 8 --max-success 6 "
        "--out subset.jsonl",
    ),
    "data toolbox": (
        "evidra data toolbox --config configs/lang2act_stage1.yaml --trajectories traj.jsonl "
        "--out toolbox.json",
        "evidra data toolbox --trajectories traj.jsonl --curator http://localhost:8000/v1 "
        "--curator-model qwen-72b --out toolbox.json",
    ),
    "models tiny": (
        "evidra models tiny qwen2_5_vl ckpt/tiny-vl",
        "evidra models tiny colqwen2 ckpt/tiny-colqwen2",
    ),
    "models resolve": (
        "evidra models resolve Qwen/Qwen2.5-VL-3B-Instruct",
        "evidra models resolve tiny:qwen2_5_vl",
    ),
}


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples' lines, and shows an option's default where its help does not."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        shown = "default" in text or "%(default)" in text
        if shown or default in (None, False, argparse.SUPPRESS, "", [], ()) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


def subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser below ``parser``, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases name one parser twice
                yield sub
                yield from subparsers(sub)


def polish(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand parser the shared options, its full name, defaults and examples."""
    for sub in subparsers(parser):
        sub.formatter_class = Formatter
        sub.set_defaults(command_path=sub.prog)
        sub.add_argument(
            "-v",
            "--verbose",
            action="count",
            default=argparse.SUPPRESS,
            help="more log output (-vv: debug); also before the subcommand",
        )
        sub.add_argument(
            "-q",
            "--quiet",
            action="store_true",
            default=argparse.SUPPRESS,
            help="only warnings and errors, no progress bars; also before the subcommand",
        )
        sub.add_argument(
            "--method-module",
            action="append",
            dest="method_module_after",
            default=argparse.SUPPRESS,
            metavar="MODULE",
            help="import MODULE (my_pkg.my_method) first, for the methods it defines; repeatable; "
            "also before the subcommand",
        )
        name = sub.prog.removeprefix("evidra ")
        if name in EXAMPLES:
            sub.epilog = "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[name])
