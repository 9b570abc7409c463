"""``evidra train sft|rl --config FILE [section.key=value ...]``: run a training recipe.

Runs on one process as is, or on several under ``accelerate launch``:

    accelerate launch --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no \
        -m evidra.cli.main train rl --config configs/tiny/lat.yaml algo.mini_batch_size=2

(``--config_file configs/accelerate/1node.yaml`` gives the same values). Without them accelerate
prints five lines on the defaults it used before evidra starts. Only rank 0 speaks after that
(``cli._ranks``). ``--processes N`` starts the same N processes itself; a failure is then one line
naming its cause, the launcher's full report kept in ``<run.output_dir>/logs/launch.log``
(``cli._launcher``):

    evidra train rl --processes 2 --config configs/tiny/lat.yaml algo.mini_batch_size=2
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evidra.rl.run_config import RLConfig, SFTConfig
    from evidra.rl.sft.finetune import SFTTrainer
    from evidra.rl.trainer import RLTrainer

_MODES = {
    "sft": (
        "supervised cold start on trajectories",
        "Supervised fine-tuning (the cold start before RL): the recipe's task oracle answers, or the "
        "trajectories of --data, with the policy's chat template. Dotted overrides such as "
        "optim.lr=1e-5 follow the recipe. A run resumes from the newest complete checkpoint in its "
        "output folder; a folder of another base model, method or config is refused.",
    ),
    "rl": (
        "reinforcement learning (GRPO family) with the recipe's method",
        "Reinforcement learning with the recipe's method (LAT, EVisRAG, Lang2Act, VRAG-RL, CAVE): "
        "rollouts, rewards, advantages and policy updates. Dotted overrides such as "
        "rollout.group_size=8 follow the recipe. A run resumes from the newest complete checkpoint in "
        "its output folder; a folder of another base model, method or config is refused.",
    ),
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "train",
        help="supervised (sft) or reinforcement learning (rl) training",
        description="Train with a YAML recipe: `train sft` (cold start) or `train rl` (GRPO family).",
    )
    modes = p.add_subparsers(dest="mode", metavar="MODE", required=True)
    for mode, (short, long) in _MODES.items():
        _mode_options(modes.add_parser(mode, help=short, description=long))


def _mode_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, metavar="FILE", help="YAML recipe (default: built-in defaults)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. optim.lr=1e-6")
    export_help = "after training, write the final model as a loadable directory (as `evidra export`)"
    p.add_argument("--export", default=None, metavar="DIR", help=export_help)
    data_help = (
        "sft: train on this JSONL instead of the task's oracle: TRL/OpenAI messages, "
        "LLaMA-Factory ShareGPT or `evidra data distill` rows"
    )
    p.add_argument("--data", default=None, metavar="FILE", help=data_help)
    p.add_argument(
        "--data-format",
        default=None,
        choices=["messages", "sharegpt", "evidra"],
        help="the --data file's format (default: detected from its rows)",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="train on N processes of this machine (one per GPU) through `accelerate launch`; a failure "
        "is one line naming its cause, the full output in <run.output_dir>/logs/launch.log (default: 1)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evidra.core.config import load_config
    from evidra.core.errors import ConfigError

    if args.data:
        if args.mode != "sft":
            raise ConfigError("--data is SFT trajectories; RL trains on a subset with data.subset=FILE")
        args.overrides = [*args.overrides, f"data.trajectories={args.data}"]
    if args.data_format:
        if not args.data:
            raise ConfigError("--data-format names the format of --data FILE; pass --data too")
        args.overrides = [*args.overrides, f"data.trajectories_format={args.data_format}"]
    if args.export:  # checked before training, not after
        from evidra.cli._outputs import check_output_dir
        from evidra.rl.runs.export import check_export_target

        check_output_dir(args.export, "--export")
        check_export_target(Path(args.export))
    from evidra.cli._ranks import launch, rank_output
    from evidra.rl.run_config import RLConfig, SFTConfig

    if args.processes < 1:
        raise ConfigError(f"--processes must be 1 or more, got {args.processes}")

    cfg: RLConfig | SFTConfig = (
        load_config(SFTConfig, args.config, args.overrides)
        if args.mode == "sft"
        else load_config(RLConfig, args.config, args.overrides)
    )
    if args.processes > 1 and launch().world == 1:  # asked here, not yet started by a launcher
        from evidra.cli._launcher import train_on_processes

        return train_on_processes(args, cfg.run.output_dir)
    with rank_output(cfg.run.output_dir):  # under a launcher, ranks other than 0 write to their logs
        trainer = _trainer(cfg)
        _train(trainer, args.mode)
        if not trainer.engine.is_main_process:
            return 0
        print(f"metrics: {trainer.sink.path}")
        if args.export:
            from evidra.methods import method_facts
            from evidra.rl.runs.export import export_model

            print(f"exported: {export_model(trainer.out, args.export, method_facts=method_facts)}")
    return 0


def _trainer(cfg: RLConfig | SFTConfig) -> RLTrainer | SFTTrainer:
    """The trainer of ``cfg``; an SFT run on a data file says what it read."""
    from evidra.rl.run_config import SFTConfig

    if isinstance(cfg, SFTConfig):
        from evidra.methods import sft_trainer

        trainer = sft_trainer(cfg)
        if trainer.data is not None and trainer.engine.is_main_process:
            print(f"data: {trainer.data.summary()}")
        return trainer
    from evidra.methods import rl_trainer

    return rl_trainer(cfg)


def _train(trainer: RLTrainer | SFTTrainer, mode: str) -> None:
    from evidra.cli._progress import open_bar
    from evidra.rl.sft.finetune import SFTTrainer

    # sft: run.steps, or epochs x examples / batch
    total = trainer.steps if isinstance(trainer, SFTTrainer) else trainer.cfg.run.steps
    keys = ("loss", "reward/mean", "kl")
    with open_bar(total=total, initial=trainer.state.step, desc=f"train {mode}", unit="step") as bar:

        def on_step(step: int, metrics: dict[str, float]) -> None:
            shown = {k.split("/")[-1]: f"{metrics[k]:.4g}" for k in keys if k in metrics}
            bar.set_postfix(shown, refresh=False)  # the step's own metrics on the line update writes
            bar.update(1)

        trainer.train(on_step)
