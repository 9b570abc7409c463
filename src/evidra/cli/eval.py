"""``evidra eval``: run paradigms x benchmarks with one model, write results, tables and viewer.

    evidra eval --synthetic tunnel.chain --synthetic tracer.trace --n 16 \\
        --paradigm direct --paradigm coe --model ./checkpoint --out runs/eval
    evidra eval --benchmark docvqa --data val.jsonl --paradigm all \\
        --endpoint http://127.0.0.1:8000/v1 --model-name qwen2.5-vl-7b --out runs/eval
    evidra eval --benchmark slidevqa --data test.jsonl --paradigm toolchain --toolbox box.json \\
        --pages-per-question 3 --index idx/ --model ckpt/l2a --out runs/l2a   # Lang2Act as evaluated
    evidra eval --benchmark visa_wiki --data data/visa --paradigm coe --sa-retriever ckpt/colqwen2 \\
        --model ckpt/lat --out runs/lat   # LAT's Step Accuracy column
    evidra eval --synthetic documents --method vragrl --model runs/vragrl --out runs/eval-vragrl
        # as the method trains: its paradigm, environment and reward (reward/* columns); the
        # tables are the method's layout (Method.layout) alone

Predictions are cached in ``OUT/predictions.jsonl``: rerunning resumes. ``--paradigm all`` runs
every registered paradigm and skips (with a warning) those that cannot prompt these samples.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.cli._answer_model import add_box_format_arg
from evidra.cli._eval_method import DEFAULT_MAX_TURNS, MethodEval, parse_method
from evidra.cli._eval_method import add_arguments as add_method_options
from evidra.cli._eval_options import EvalOptions, load_sa, parse_options, with_pages
from evidra.cli._eval_options import add_arguments as add_eval_options
from evidra.cli._outputs import check_output_dir, removed_on_failure
from evidra.cli._progress import advance, open_bar
from evidra.core.errors import InvalidInputError
from evidra.openai.client import DEFAULT_API_KEY_ENV, check_api_key_env

if TYPE_CHECKING:
    from evidra.core.types import Page, Sample
    from evidra.env.environment import Environment
    from evidra.env.search import Searcher
    from evidra.eval.report import RunResult
    from evidra.eval.runner import EnvFactory, ModelBackend, RunConfig
    from evidra.eval.sample_scoring import Prediction
    from evidra.paradigms.paradigm import Paradigm
    from evidra.rewards.judge_protocol import Judge

    SearchCorpus = tuple[Searcher, dict[str, Page]]  # a benchmark's searcher and its pages by id

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "eval",
        help="evaluate paradigms on benchmarks with a local checkpoint or an OpenAI-compatible endpoint",
        description="Writes OUT/results.jsonl, OUT/tables.md, OUT/table_*.csv and OUT/viewer.html.",
    )
    src = p.add_argument_group("benchmarks")
    synth_help = (
        "synthetic benchmark: documents, reading, tunnel.chain|circuits|objreid, "
        "tracer.vjump|trace|match|subimage"
    )
    src.add_argument("--synthetic", action="append", default=[], metavar="NAME", help=synth_help)
    src.add_argument(
        "--benchmark",
        default=None,
        metavar="NAME",
        help="published benchmark loader (see evidra.data.loaders)",
    )
    src.add_argument("--data", default=None, metavar="PATH", help="files of --benchmark")
    src.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="loader option, e.g. pool=train.jsonl",
    )
    src.add_argument("--n", type=int, default=8, help="samples per synthetic benchmark (default 8)")
    src.add_argument("--limit", type=int, default=None, help="evaluate only the first N samples")
    src.add_argument("--seed", type=int, default=0, help="seed of the synthetic samples and sampling")
    p.add_argument(
        "--paradigm", action="append", default=[], metavar="NAME", help="paradigm name, repeatable, or 'all'"
    )
    model = p.add_argument_group("model")
    model.add_argument(
        "--model",
        default=None,
        metavar="PATH",
        help="model: a directory, a hub id (org/name), tiny:ARCH, or a training run or checkpoint",
    )
    model.add_argument("--device", default="auto", help="--model device: auto | cpu | cuda")
    model.add_argument(
        "--dtype", default="auto", help="--model weights: auto (bfloat16 on a GPU) | float32 | bfloat16"
    )
    model.add_argument("--endpoint", default=None, metavar="URL", help="OpenAI-compatible base URL (…/v1)")
    model.add_argument("--model-name", default=None, help="model name sent to --endpoint")
    model.add_argument(
        "--api-key-env",
        default=DEFAULT_API_KEY_ENV,
        metavar="VAR",
        help="environment variable holding --endpoint's API key "
        f"(default {DEFAULT_API_KEY_ENV}; none is sent when it is unset)",
    )
    model.add_argument(
        "--arch",
        default="qwen2_5_vl",
        help="the image frame an endpoint's boxes are read in when no box convention applies (default "
        "qwen2_5_vl); the size images are sent at and the boxes' convention follow --box-format",
    )
    add_box_format_arg(
        model,
        "an endpoint's from --model-name, which also sets the size its images are sent at; a --model "
        "checkpoint writes what its training taught, read through its own resize. The search and "
        "zoom environments read a crop box by it too",
    )
    env_help = "episode environment built from the paradigm, e.g. zoom (default: single turn)"
    p.add_argument("--env", default=None, metavar="NAME", help=env_help)
    index_help = (
        "an index directory or serve-index URL over the benchmark's pages: what --env search searches "
        "(default: BM25 over their text layer), or what ranks pages for --pages-per-question"
    )
    p.add_argument("--index", default=None, metavar="DIR|URL", help=index_help)
    by_help = "extra rows per value of a sample field: subset (ChartQA), stratum (VISA), page_kind"
    p.add_argument("--breakdown", action="append", default=[], metavar="FIELD", help=by_help)
    p.add_argument("--batch-size", type=int, default=4, help="episodes generated together")
    turns_help = "policy turns per episode (default: the environment's own limit, 1 without --env)"
    p.add_argument("--max-turns", type=int, default=None, help=turns_help)
    p.add_argument("--max-new-tokens", type=int, default=256, help="tokens the policy may write per turn")
    p.add_argument(
        "--training-metrics",
        default=None,
        metavar="FILE",
        help="also plot a training run's metrics.jsonl to OUT/training_curves.png",
    )
    p.add_argument(
        "--out", required=True, metavar="DIR", help="folder for results.jsonl, tables and viewer.html"
    )
    add_eval_options(p)
    add_method_options(p)
    _judge_arguments(p)
    p.set_defaults(func=run)


def _judge_arguments(p: argparse.ArgumentParser) -> None:
    j = p.add_argument_group("answer judge (adds the Judge Acc column; unscored answers are counted apart)")
    j.add_argument(
        "--judge",
        default=None,
        metavar="KIND",
        help="rule (offline normalised match) or openai (OpenAI-compatible server)",
    )
    j.add_argument("--judge-url", default="", metavar="URL", help="judge server base URL (…/v1)")
    j.add_argument("--judge-model", default="", metavar="NAME", help="model name the judge server serves")
    j.add_argument(
        "--judge-api-key-env",
        default=DEFAULT_API_KEY_ENV,
        metavar="VAR",
        help=f"environment variable with the key (default {DEFAULT_API_KEY_ENV})",
    )
    j.add_argument(
        "--judge-prompt",
        default=None,
        metavar="NAME",
        help="a registered judge prompt (evidra.rewards.judge_prompts): vragrl (one answer "
        "a request), lang2act (batched), lang2act.eval (Lang2Act's evaluation prompt) or cave "
        "(default: --method's evaluation prompt, else vragrl)",
    )
    j.add_argument("--judge-concurrency", type=int, default=8, help="judge requests in flight at once")
    j.add_argument("--judge-timeout", type=float, default=60.0, metavar="SECONDS", help="per judge request")
    j.add_argument("--judge-retries", type=int, default=3, help="retries of a failed judge request")


def _judge(args: argparse.Namespace, out: Path, method: MethodEval | None) -> Judge | None:
    """The judge of ``--judge`` (None without it); bad options fail here, before any model loads."""
    if args.judge is None:
        return None
    prompt = args.judge_prompt or (method.method.evaluation_judge_prompt if method is not None else "vragrl")
    from evidra.rewards.judge_config import JudgeConfig, build_judge
    from evidra.rewards.judge_http import DiskCache

    cfg = JudgeConfig(
        kind=args.judge,
        base_url=args.judge_url,
        model=args.judge_model,
        api_key_env=args.judge_api_key_env,
        prompt=prompt,
        concurrency=args.judge_concurrency,
        timeout_s=args.judge_timeout,
        max_retries=args.judge_retries,
    )
    cache = None
    if cfg.kind != "rule":
        out.mkdir(parents=True, exist_ok=True)
        cache = DiskCache(out / "judge_cache.sqlite")
    from evidra.safeio.keys import KeyPolicy

    return build_judge(cfg, cfg.prompt or "vragrl", cache, KeyPolicy())  # --judge-url is the user's flag


def _with_judge(judge: Judge | None, samples: list[Sample], preds: list[Prediction]) -> list[Prediction]:
    """``preds`` with the judge's scores added: every answer of the run in one judge call (an
    endpoint judge runs its requests concurrently); not written to the prediction cache."""
    if judge is None:
        return preds
    from dataclasses import replace

    from evidra.eval.sample_scoring import JUDGE_UNSCORED, judge_scores

    scores = judge_scores(judge, samples, preds)
    unscored = sum(s[JUDGE_UNSCORED] for s in scores)
    if unscored:
        logger.warning(
            "the judge could not score %d of %d answers; they are counted apart", unscored, len(preds)
        )
    return [replace(p, scores={**p.scores, **extra}) for p, extra in zip(preds, scores, strict=True)]


def _samples(args: argparse.Namespace, out: Path, method: MethodEval | None) -> dict[str, list[Sample]]:
    """Each benchmark's samples, with their top ``--pages-per-question`` pages when given, as
    ``--method``'s task takes them."""
    from evidra.eval.benchmarks import synthetic_samples

    benches: dict[str, list[Sample]] = {}
    for name in args.synthetic:
        benches[name] = synthetic_samples(name, out / "data", args.n, seed=args.seed)[: args.limit]
    if args.benchmark:
        from evidra.data.loaders import load, parse_options

        if not args.data:
            raise InvalidInputError("--benchmark needs --data PATH (the benchmark's files)")
        options = parse_options(dict(o.split("=", 1) for o in args.option))
        benches[args.benchmark] = load(args.benchmark, args.data, limit=args.limit, **options)
    if not benches:
        raise InvalidInputError("nothing to evaluate: pass --synthetic NAME or --benchmark NAME --data PATH")
    benches = {name: with_pages(samples, args) for name, samples in benches.items()}
    if method is not None:
        benches = {name: method.samples(name, samples, args.data) for name, samples in benches.items()}
    return benches


def _check_references(args: argparse.Namespace) -> None:
    """``--model`` (or ``--endpoint``'s URL) and ``--sa-retriever`` name what they must, checked
    in a second; the model itself loads after the data is prepared."""
    from evidra.core.box_formats import BOX_FORMATS
    from evidra.models.references import check_model_ref

    if args.box_format is not None:
        BOX_FORMATS.get(args.box_format.strip().lower())  # "unknown box format ..., did you mean"
    if args.model and not args.endpoint:
        check_model_ref(args.model, "Qwen-VL model", option="--model", need_config=False)  # a run too
    else:
        _backend(args)  # an endpoint: its URL and key variable checked, no model built; neither: refused
    if args.sa_retriever:
        check_model_ref(args.sa_retriever, "ColQwen2 retriever", option="--sa-retriever")


def _backend(args: argparse.Namespace) -> tuple[ModelBackend, str]:
    from evidra.core.box_formats import BOX_FORMATS, box_format_for
    from evidra.eval.runner import EndpointModel, LocalModel

    if args.model and not args.endpoint:
        from evidra.core.devices import resolve_device, resolve_dtype
        from evidra.models.loading import load_vlm
        from evidra.rl.runs.export import resolve_trained_model

        device = resolve_device(args.device)
        dtype = resolve_dtype(args.dtype, device)
        vlm = load_vlm(resolve_trained_model(args.model), dtype=dtype, device=device)
        given = BOX_FORMATS.get(args.box_format.strip().lower()) if args.box_format else None
        return LocalModel(vlm, given), Path(args.model).name
    if args.endpoint and args.model_name:
        from evidra.core.geometry import vision_spec
        from evidra.models.endpoint import ChatEndpoint

        check_api_key_env(args.api_key_env, "--api-key-env")
        fmt = box_format_for(args.model_name, None, args.box_format)  # also the size images are sent at
        endpoint = ChatEndpoint.for_model(args.endpoint, args.model_name, fmt, api_key_env=args.api_key_env)
        return EndpointModel(endpoint, vision_spec(args.arch), box_format=fmt), args.model_name
    raise InvalidInputError("pass --model PATH (local checkpoint) or --endpoint URL with --model-name NAME")


def _env_factory(
    name: str | None, paradigm: Paradigm, corpus: SearchCorpus | None, args: argparse.Namespace
) -> EnvFactory | None:
    """``make_env`` for ``--env``: the environment class called with ``paradigm=``; ``search``
    also gets ``corpus``, the benchmark's ``(searcher, pages)`` from ``_search_corpus``."""
    if name is None:
        return None
    from evidra.env import ENVIRONMENTS

    env_cls = ENVIRONMENTS.get(name)
    limit = _turn_field(env_cls)
    turns = {limit: args.max_turns} if limit and args.max_turns is not None else {}
    if name == "search":
        assert corpus is not None  # run() searches a corpus for --env search
        searcher, pages = corpus
        return lambda sample: env_cls(searcher, pages, paradigm=paradigm, **turns)

    def make(sample: Sample) -> Environment:
        try:
            return env_cls(paradigm=paradigm, **turns)
        except TypeError as exc:
            raise InvalidInputError(
                f"environment {name!r} needs more than a paradigm ({exc}); build it in Python and pass "
                "make_env= to evidra.eval.runner.run_eval"
            ) from exc

    return make


def _turn_field(env_cls: type) -> str | None:
    """The environment's own turn-limit field (``max_turns`` or ``max_rounds``), if any."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(env_cls)} if dataclasses.is_dataclass(env_cls) else set()
    return next((n for n in ("max_turns", "max_rounds") if n in names), None)


def _max_turns(args: argparse.Namespace) -> int:
    """``--max-turns``, else the environment's default limit (episodes end there, not before)."""
    import dataclasses

    if args.max_turns is not None:
        return int(args.max_turns)
    if args.env is None:
        return 1
    from evidra.env import ENVIRONMENTS

    env_cls = ENVIRONMENTS.get(args.env)
    limit = _turn_field(env_cls)
    defaults = {f.name: f.default for f in dataclasses.fields(env_cls)} if limit else {}
    value = defaults.get(limit or "", 1)
    return int(value) if isinstance(value, int) else 1


def _search_corpus(args: argparse.Namespace, samples: list[Sample]) -> SearchCorpus:
    """``(searcher, pages)`` over every page of a benchmark (VRAG-RL's corpus), built once per
    benchmark: ``--index`` (directory or URL), else BM25 over the pages' text layer."""
    from evidra.env.search import bm25_searcher
    from evidra.retrieval.lifecycle.index_folder import open_searcher
    from evidra.safeio.keys import KeyPolicy

    pages = {p.id: p for s in samples for p in s.pages}
    gold = {g for s in samples for g in s.gold_pages}
    searcher = open_searcher(args.index, gold, KeyPolicy()) if args.index else bm25_searcher(pages.values())
    return searcher, pages


def run(args: argparse.Namespace) -> int:
    from evidra.core.errors import EvidraError
    from evidra.eval.report import RunResult, write_report
    from evidra.eval.tables import breakdown, summarize
    from evidra.paradigms import PARADIGMS

    out = Path(args.out)
    check_output_dir(out, "--out")
    if args.training_metrics and not Path(args.training_metrics).is_file():
        raise InvalidInputError(
            f"--training-metrics {args.training_metrics!r} is not a file; pass a run's metrics.jsonl"
        )
    method = parse_method(args)  # the method and its options are checked before anything loads
    if not (args.synthetic or args.benchmark):
        raise InvalidInputError("nothing to evaluate: pass --synthetic NAME or --benchmark NAME --data PATH")
    with removed_on_failure(out):  # a new --out is gone again if preparing fails
        judge = _judge(args, out, method)  # a bad judge option fails before any model loads
        options = parse_options(args)
        _check_references(args)  # the options first, then the model, before any data is prepared
        benches = _samples(args, out, method)
        options = load_sa(args, options)
        backend, model_name = _backend(args)
    every = args.paradigm in ([], ["all"]) and method is None
    paradigms = PARADIGMS.names() if every else args.paradigm
    if method is not None and not args.paradigm:
        paradigms = [method.method.paradigm]  # the paradigm the method's policy writes
    runs: list[RunResult] = []
    for bench, samples in benches.items():
        corpus = _search_corpus(args, samples) if args.env == "search" else None
        for paradigm in paradigms:
            with open_bar(total=len(samples), desc=f"{bench} / {paradigm}", unit="q") as bar:
                try:
                    preds, cfg = _run_one(
                        args,
                        (options, method),
                        backend,
                        (bench, paradigm, model_name),
                        samples,
                        corpus,
                        advance(bar),
                    )
                except EvidraError as exc:
                    if not every:
                        raise
                    logger.warning("skipping paradigm %s on %s: %s", paradigm, bench, exc)
                    continue
            preds = _with_judge(judge, samples, preds)
            runs.append(RunResult(summarize(cfg.key, preds, samples), tuple(samples), tuple(preds)))
            for field_name in args.breakdown:
                runs += [RunResult(row, (), ()) for row in breakdown(cfg.key, preds, samples, field_name)]
    curves = []
    if args.training_metrics:
        from evidra.eval.plots import plot_training

        curves.append(plot_training(args.training_metrics, out / "training_curves.png", window=10))
    layouts = [method.method.layout] if method is not None else None  # a method's table: its paper's
    for path in [*write_report(runs, out, layouts=layouts), *_plots(runs, out), *curves]:
        print(path)
    return 0


def _run_one(
    args: argparse.Namespace,
    how: tuple[EvalOptions, MethodEval | None],
    backend: ModelBackend,
    key: tuple[str, str, str],
    samples: list[Sample],
    corpus: SearchCorpus | None,
    progress: Callable[[int], None],
) -> tuple[list[Prediction], RunConfig]:
    """One benchmark x paradigm: its predictions (cached in ``OUT/predictions.jsonl``) and config."""
    from evidra.eval.runner import RunConfig, run_eval

    (options, method), (bench, name, model_name) = how, key
    paradigm = options.paradigm(name, explicit=args.paradigm not in ([], ["all"]))
    variant = ",".join(v for v in (options.variant(paradigm), method and method.variant) if v)
    turns = _max_turns(args) if method is None else (args.max_turns or DEFAULT_MAX_TURNS)
    cfg = RunConfig(
        bench,
        name,
        model_name,
        batch_size=args.batch_size,
        max_turns=turns,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        variant=variant,
    )
    make_env = method.task.make_env if method is not None else _env_factory(args.env, paradigm, corpus, args)
    preds = run_eval(
        samples,
        backend,
        cfg,
        Path(args.out) / "predictions.jsonl",
        make_env=make_env,
        progress=progress,
        paradigm=paradigm,
    )
    if options.sa is not None:  # scored after the cache, so cached predictions get SA too
        from dataclasses import replace

        preds = [
            replace(p, scores={**p.scores, **options.sa(s, p)}) for s, p in zip(samples, preds, strict=True)
        ]
    return (method.score(samples, preds) if method is not None else preds), cfg


def _plots(runs: list[RunResult], out: Path) -> list[Path]:
    """A comparison PNG per headline metric when matplotlib (extra [plots]) is installed."""
    from evidra.core.errors import MissingDependencyError
    from evidra.eval.plots import plot_comparison
    from evidra.eval.tables import COUNTS, LAYOUTS

    rows = [r.row for r in runs]
    metrics = [m for m in LAYOUTS.get("official") if m not in COUNTS and any(m in r.metrics for r in rows)]
    try:
        return [plot_comparison(rows, m, out / f"compare_{m}.png") for m in metrics]
    except MissingDependencyError as exc:
        logger.info("no plots: %s", exc)
        return []
