"""``evidra data distill|multiexpert|filter|toolbox``: the papers' training-data construction stages.

Each reads the samples of a training recipe (``--config`` and dotted overrides, as ``evidra
train``), so its output fits the run that trains on it:

    evidra data distill --config configs/lat.yaml --method lat --teacher URL --teacher-model NAME \\
        --out runs/lat-sft.jsonl                # then: evidra train sft ... --data runs/lat-sft.jsonl
    evidra data multiexpert --config configs/vragrl.yaml --teacher URL --teacher-model NAME \\
        --expert URL --expert-model NAME --out runs/vragrl-sft.jsonl   # then: train sft --data
    evidra data filter --config configs/evisrag.yaml --model runs/evisrag-sft --k 8 \\
        --out runs/evisrag-keep.jsonl    # then: evidra train rl ... data.subset=runs/evisrag-keep.jsonl
    evidra data toolbox --config configs/lang2act_stage1.yaml --model runs/l2a-stage1 \\
        --curator URL --curator-model NAME --out runs/toolbox.json   # then: method.toolbox=runs/toolbox.json
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evidra.cli._progress import LazyBar
from evidra.core.errors import ConfigError
from evidra.openai.client import DEFAULT_API_KEY_ENV, check_api_key_env

if TYPE_CHECKING:
    from evidra.core.jsonvalue import JSON
    from evidra.core.types import Sample
    from evidra.methods.lang2act.toolbox import CurationModel
    from evidra.methods.method import Method
    from evidra.models.loading import VLM
    from evidra.rl.run_config import RLConfig
    from evidra.rl.tasks import Task

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "data",
        help="training-data construction: teacher distillation, difficulty filtering, tool curation",
        description="Build the data a training stage reads from a recipe's samples.",
    )
    sub = p.add_subparsers(dest="data_command", metavar="STAGE", required=True)
    _distill_parser(sub)
    _multiexpert_parser(sub)
    _filter_parser(sub)
    _toolbox_parser(sub)


def _recipe_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, metavar="FILE", help="training recipe whose samples are used")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. data.size=100")


def _api_key_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--api-key-env",
        default=DEFAULT_API_KEY_ENV,
        metavar="VAR",
        help="environment variable holding the endpoints' API key, sent as a Bearer token "
        f"(default {DEFAULT_API_KEY_ENV}; none is sent when it is unset or '')",
    )


def _distill_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "distill",
        help="teacher trajectories -> SFT JSONL, kept by the paper's filter",
        description="Query a teacher behind an OpenAI-compatible endpoint for every sample of the recipe "
        "and keep its trajectory when the method's filter accepts it (lat: answer recall >= gamma; "
        "evisrag: a correct answer; vragrl: ANLS >= 0.5, boxes re-grounded by --annotator). Reruns skip "
        "the ids already in --out.",
    )
    _recipe_arguments(p)
    p.add_argument(
        "--method",
        default=None,
        metavar="NAME",
        help="the method whose paradigm prompts the teacher and whose filter keeps its "
        "trajectories (lat, evisrag, vragrl; default: the recipe's method)",
    )
    p.add_argument(
        "--teacher", required=True, metavar="URL", help="teacher's OpenAI-compatible base URL (…/v1)"
    )
    p.add_argument("--teacher-model", required=True, metavar="NAME", help="model name the teacher serves")
    p.add_argument("--annotator", default="", metavar="URL", help="vragrl: grounding model's base URL")
    p.add_argument("--annotator-model", default="", metavar="NAME", help="model name at --annotator")
    _api_key_argument(p)
    p.add_argument("--gamma", type=float, default=0.5, help="lat: answer-recall threshold (default 0.5)")
    p.add_argument("--concurrency", type=int, default=4, help="questions distilled at once")
    p.add_argument("--max-tokens", type=int, default=1024, help="per teacher reply")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of the large model")
    p.add_argument("--out", required=True, metavar="FILE", help="JSONL of trajectories (appended)")
    p.set_defaults(func=run_distill)


def _multiexpert_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "multiexpert",
        help="VRAG-RL multi-expert episodes (large model + grounding expert) -> SFT JSONL",
        description="Play the recipe's search environment with two teachers (VRAG-RL Eqs. 3-6): the "
        "large model (--teacher) thinks and picks each action, the grounding expert (--expert) "
        "re-locates every <bbox> from the history and the large model's thought. An episode is kept "
        "when it searched, made no invalid action, took --min-steps..--max-steps turns and its answer "
        "has ANLS >= --min-anls. Reruns skip the ids already in --out.",
    )
    _recipe_arguments(p)
    p.add_argument("--teacher", required=True, metavar="URL", help="large model's OpenAI-compatible base URL")
    p.add_argument("--teacher-model", required=True, metavar="NAME", help="model name the teacher serves")
    p.add_argument("--expert", default="", metavar="URL", help="grounding expert's base URL")
    p.add_argument("--expert-model", default="", metavar="NAME", help="model name the expert serves")
    _api_key_argument(p)
    p.add_argument("--samples", type=int, default=1, help="episodes sampled per question (default 1)")
    p.add_argument("--min-steps", type=int, default=2, help="fewest turns kept (default 2)")
    p.add_argument("--max-steps", type=int, default=6, help="most turns kept (default 6)")
    p.add_argument("--min-anls", type=float, default=0.5, help="answer ANLS that counts as right")
    p.add_argument("--concurrency", type=int, default=4, help="questions played at once")
    p.add_argument("--max-tokens", type=int, default=1024, help="per large-model turn")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of the large model")
    p.add_argument("--out", required=True, metavar="FILE", help="JSONL of episodes (appended)")
    p.set_defaults(func=run_multiexpert)


def _filter_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "filter",
        help="difficulty filtering by the policy's pass rate over k samples",
        description="Sample k completions per sample with the policy, count the correct ones (the "
        "benchmark's official metric of the parsed answer >= --threshold) and keep the samples not "
        "solved by all k (EVisRAG A.2, Lang2Act A.3), easiest first. Train on them with "
        "data.subset=OUT.",
    )
    _recipe_arguments(p)
    model_help = "policy: a model directory, run or checkpoint (default: the recipe's model.path)"
    p.add_argument("--model", default=None, metavar="PATH", help=model_help)
    p.add_argument("--k", type=int, default=8, help="completions per sample (default 8)")
    p.add_argument("--min-success", type=int, default=0, help="drop samples with fewer correct (default 0)")
    p.add_argument(
        "--max-success", type=int, default=None, help="drop samples with more correct (default k-1)"
    )
    p.add_argument("--threshold", type=float, default=0.5, help="metric value that counts as correct")
    p.add_argument("--batch-size", type=int, default=8, help="samples per rollout batch")
    p.add_argument("--out", required=True, metavar="FILE", help="subset JSONL")
    p.set_defaults(func=run_filter)


def _toolbox_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "toolbox",
        help="Lang2Act tool curation: stage-1 trajectories -> toolbox JSON",
        description="Abstract each stage-1 trajectory's <description> into tool applications with a "
        "curation model (Lang2Act Eqs. 3-7), then keep the K most used tools. Trajectories come from "
        "--trajectories, or are generated by the stage-1 policy (--model, default the recipe's) over "
        "the recipe's samples. Train stage 2 on it with method.toolbox=OUT.",
    )
    _recipe_arguments(p)
    p.add_argument(
        "--trajectories",
        default=None,
        metavar="FILE",
        help="JSONL rows with 'response' (text) or 'texts' (list, last used)",
    )
    p.add_argument(
        "--model", default=None, metavar="PATH", help="stage-1 policy: model directory, run or checkpoint"
    )
    p.add_argument("--curator", default="", metavar="URL", help="curation model's OpenAI-compatible base URL")
    p.add_argument("--curator-model", default="", metavar="NAME", help="model name the curator serves")
    p.add_argument(
        "--curator-local", default="", metavar="PATH", help="or a local model directory as curator"
    )
    _api_key_argument(p)
    p.add_argument("--top-k", type=int, default=7, help="tools kept (Lang2Act A.6: 7)")
    p.add_argument("--out", required=True, metavar="FILE", help="toolbox JSON")
    p.set_defaults(func=run_toolbox)


# --- shared pieces ---------------------------------------------------------------------------


def _recipe(
    args: argparse.Namespace, stage: str, *, policy: bool = False
) -> tuple[RLConfig, Task, list[Sample]]:
    """The recipe's config, task (with its toolbox and judge) and samples; checked before loading.
    A recipe whose method lists its data stages (``Method.stages``) must list ``stage``; with
    ``policy``, the model sampled from (``--model``, else ``model.path``) must name one, before
    any data is prepared."""
    from evidra.core.config import load_config
    from evidra.methods import check_config, resolve
    from evidra.models.references import check_model_ref
    from evidra.rl.run_config import RLConfig
    from evidra.rl.tasks import task_samples

    cfg = load_config(RLConfig, args.config, args.overrides)
    if policy:
        given = bool(args.model)
        option = "--model" if given else "model.path"
        check_model_ref(args.model or cfg.model.path, "policy model", option=option, need_config=not given)
    task = check_config(cfg)
    resolved = resolve(cfg)
    if resolved is not None and stage not in resolved.method.stages:
        name, stages = resolved.method.name, ", ".join(resolved.method.stages) or "none"
        raise ConfigError(f"evidra data {stage} builds no data of method {name!r} (its stages: {stages})")
    return cfg, task, task_samples(task, cfg.data)


def _distill_method(args: argparse.Namespace) -> Method[Any]:
    """The method of ``--method`` (else the recipe's), which must have a distillation filter."""
    from evidra.core.config import load_config
    from evidra.methods import METHODS, get_method, resolve
    from evidra.rl.run_config import RLConfig

    name = args.method
    if name is None:
        resolved = resolve(load_config(RLConfig, args.config, args.overrides))
        name = resolved.method.name if resolved is not None else None
    method = get_method(name) if name else None
    if method is None or method.distill is None:
        able = [n for n in METHODS.names() if METHODS.get(n).distill is not None]
        raise ConfigError(
            f"--method {name or '(none)'} has no distillation filter; use one of {', '.join(able)}"
        )
    return method


def _policy(model: str | None, cfg: RLConfig, out: Path) -> VLM:
    """The policy to sample from: ``--model`` (a directory, run or checkpoint) or the recipe's path."""
    from evidra.models.loading import load_vlm
    from evidra.rl.policy import resolve_model_path
    from evidra.rl.runs.export import resolve_trained_model

    path = (
        resolve_trained_model(model) if model else resolve_model_path(cfg.model.path, out.parent / ".models")
    )
    return load_vlm(path, min_pixels=cfg.model.min_pixels, max_pixels=cfg.model.max_pixels)


# --- stages ----------------------------------------------------------------------------------


def run_distill(args: argparse.Namespace) -> int:
    from evidra.data.construction.distill import distill
    from evidra.models.endpoint import ChatEndpoint
    from evidra.paradigms import PARADIGMS

    method = _distill_method(args)
    if method.regrounds_boxes and not (args.annotator and args.annotator_model):
        logger.warning("%s without --annotator: the teacher's boxes are kept as written", method.name)
    check_api_key_env(args.api_key_env, "--api-key-env")
    teacher = ChatEndpoint(args.teacher, args.teacher_model, api_key_env=args.api_key_env)
    annotator = (
        ChatEndpoint(args.annotator, args.annotator_model, api_key_env=args.api_key_env)
        if args.annotator
        else None
    )
    _, _, samples = _recipe(args, "distill")  # the endpoints' URLs checked first
    assert method.distill is not None  # _distill_method refuses a method without a filter
    with LazyBar(total=len(samples), unit="sample", desc="distill") as progress:
        report = distill(
            samples,
            teacher,
            args.out,
            method=method.name,
            paradigm=PARADIGMS.get(method.paradigm)(),
            keep=method.distill,
            gamma=args.gamma,
            annotator=annotator,
            concurrency=args.concurrency,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            progress=progress,
        )
    print(
        f"distilled {report.attempted} samples: {report.accepted} kept, {report.failed} failed "
        f"(retried on a rerun), {report.skipped} already in {args.out}"
    )
    print(f"train on them: evidra train sft --config {args.config or 'FILE'} --data {args.out}")
    return 0


def run_multiexpert(args: argparse.Namespace) -> int:
    from evidra.core.errors import InvalidInputError
    from evidra.data.construction.multiexpert import MultiExpertConfig, multiexpert
    from evidra.models.endpoint import ChatEndpoint

    if bool(args.expert) != bool(args.expert_model):
        raise ConfigError("give the grounding expert as --expert URL --expert-model NAME (both or neither)")
    if not args.expert:
        logger.warning("no --expert: the large model's boxes are kept as written")
    check_api_key_env(args.api_key_env, "--api-key-env")
    try:
        cfg = MultiExpertConfig(
            args.samples,
            args.min_steps,
            args.max_steps,
            args.min_anls,
            args.max_tokens,
            args.temperature,
            concurrency=args.concurrency,
        )
    except InvalidInputError as exc:
        raise ConfigError(f"data multiexpert: {exc}") from None
    key = args.api_key_env
    lm = ChatEndpoint(args.teacher, args.teacher_model, api_key_env=key)
    expert = ChatEndpoint(args.expert, args.expert_model, api_key_env=key) if args.expert else None
    _, task, samples = _recipe(args, "multiexpert")  # the endpoints' URLs checked first
    with LazyBar(total=len(samples), unit="question", desc="multiexpert") as progress:
        report = multiexpert(samples, task.make_env, lm, expert, args.out, cfg, progress=progress)
    print(
        f"played {report.questions} questions: {report.accepted} of {report.episodes} episodes kept, "
        f"{report.failed} questions failed (retried on a rerun), {report.skipped} already in {args.out}"
    )
    for name, count in report.buckets.items():
        print(f"  {name:<28} {count:>5} kept")
    print(f"train on them: evidra train sft --config {args.config or 'FILE'} --data {args.out}")
    return 0


def run_filter(args: argparse.Namespace) -> int:
    from evidra.data.construction.difficulty import (
        filter_by_difficulty,
        parsed_answer_is_correct,
        sample_successes,
    )
    from evidra.rl.subset import SubsetRow, write_subset
    from evidra.rollout import HFBackend

    if args.k < 1:
        raise ConfigError(f"--k must be >= 1, got {args.k}")
    cfg, task, samples = _recipe(args, "filter", policy=True)
    out = Path(args.out)
    vlm = _policy(args.model, cfg, out)
    params, limits = cfg.rollout.sampling(), cfg.rollout.limits()
    with LazyBar(total=len(samples), unit="sample", desc=f"sampling {args.k} each") as progress:
        successes = sample_successes(
            HFBackend(vlm),
            task.make_env,
            samples,
            args.k,
            parsed_answer_is_correct(task.parse, args.threshold),
            params=params,
            limits=limits,
            batch_size=args.batch_size,
            progress=progress,
        )
    kept = filter_by_difficulty(
        samples, successes, args.k, min_success=args.min_success, max_success=args.max_success
    )
    chosen = {s.id for s in kept.curriculum}
    rows = [SubsetRow(s.id, successes[s.id], args.k, True) for s in kept.curriculum]
    rows += [SubsetRow(s.id, successes[s.id], args.k, False) for s in samples if s.id not in chosen]
    write_subset(rows, out)
    print(
        f"kept {len(kept.curriculum)} of {len(samples)} samples ({len(kept.dropped_easy)} solved by more "
        f"than the band allows, {len(kept.dropped_hard)} by fewer): {out}"
    )
    print(f"train on them: evidra train rl --config {args.config or 'FILE'} data.subset={out}")
    return 0


def _read_trajectories(path: str) -> list[str]:
    from evidra.safeio.jsonfiles import read_json_lines

    texts = []
    for n, row in read_json_lines(path, "--trajectories", ConfigError, "pass the JSONL of trajectories"):
        text = _trajectory_text(row)
        if text is None:
            raise ConfigError(
                f"--trajectories {path!r} line {n}: no 'response' or 'texts'; "
                "pass JSON objects with a 'response' or a non-empty list 'texts'"
            )
        texts.append(text)
    return texts


def _trajectory_text(row: JSON) -> str | None:
    """The last text of a trajectory row: its 'response', else the last of its 'texts'."""
    if not isinstance(row, dict):
        return None
    if "response" in row:
        return str(row["response"])
    texts = row.get("texts")
    return str(texts[-1]) if isinstance(texts, list) and texts else None


STAGE1_BATCH = 8  # samples rolled out together when data toolbox generates trajectories


def _stage1_trajectories(args: argparse.Namespace, out: Path) -> list[str]:
    from evidra.rollout import HFBackend, rollout

    cfg, task, samples = _recipe(args, "toolbox", policy=True)
    vlm = _policy(args.model, cfg, out)
    params, limits = cfg.rollout.sampling(), cfg.rollout.limits()
    backend, texts = HFBackend(vlm), []
    with LazyBar(total=len(samples), unit="sample", desc="stage-1 trajectories") as progress:
        for i in range(0, len(samples), STAGE1_BATCH):
            batch = samples[i : i + STAGE1_BATCH]
            episodes = rollout(backend, task.make_env, batch, 1, params, limits)
            texts += [ep.trajectory.texts[-1] for ep in episodes if ep.trajectory.texts]
            progress(len(batch))
    return texts


def run_toolbox(args: argparse.Namespace) -> int:
    from evidra.methods.lang2act.toolbox import LocalVLMModel, OpenAIChatModel, curate

    if bool(args.curator) == bool(args.curator_local):
        raise ConfigError(
            "give the curation model: --curator URL --curator-model NAME, or --curator-local PATH"
        )
    if args.curator and not args.curator_model:
        raise ConfigError("--curator needs --curator-model NAME")
    if args.top_k < 1:
        raise ConfigError(f"--top-k must be >= 1, got {args.top_k}")
    check_api_key_env(args.api_key_env, "--api-key-env")
    out = Path(args.out)
    curator: CurationModel | None = None
    if args.curator:  # its URL checked before the trajectories are read or generated
        curator = OpenAIChatModel(args.curator, args.curator_model, api_key_env=args.api_key_env)
    else:
        from evidra.models.references import check_model_ref

        check_model_ref(args.curator_local, "curation model", option="--curator-local")
    trajectories = (
        _read_trajectories(args.trajectories) if args.trajectories else _stage1_trajectories(args, out)
    )
    if curator is None:
        from evidra.models.loading import load_vlm

        curator = LocalVLMModel(load_vlm(args.curator_local))
    with LazyBar(total=len(trajectories), unit="trajectory", desc="curating") as progress:
        box = curate(trajectories, curator, k=args.top_k, progress=progress)
    if not box.tools:
        raise ConfigError(
            f"curation found no tool in {box.trajectories} trajectories ({box.errors} malformed replies or "
            "applications); check the curation model's replies"
        )
    box.write(out)
    from evidra.cli._terminal import shown

    for row in box.rows():  # tool names and arguments a model wrote
        kind = "numeric" if row["numeric"] else "image"
        name, used = shown(row["name"]), f"used in {row['count']:>4} trajectories"
        print(f"  {name:<28} {used}  {kind:<7} args: {shown(row['args'])}")
    print(
        f"toolbox of {len(box.tools)} tools (pool {box.pool_size}, coverage {box.coverage:.1%} of tool "
        f"use, {box.errors} curation errors over {box.trajectories} trajectories): {out}"
    )
    stage2 = "evidra train rl --config configs/lang2act_stage2.yaml"
    print(f"train stage 2 with it: {stage2} method.toolbox={out}")
    return 0
