"""Supervised fine-tuning on trajectories (the cold start before RL).

A training example is a whole conversation (several images and several assistant turns
allowed); the loss is the token-mean negative log-likelihood of the assistant tokens only,
each assistant turn including its closing ``<|im_end|>`` so the model learns to stop. LoRA or
full fine-tuning (vision tower frozen by default), checkpointed and resumable like RL runs.

    evidra train sft --config configs/tiny/lat.yaml
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.core.config import to_dict
from evidra.core.errors import ConfigError, InvalidInputError
from evidra.core.types import Message
from evidra.models.context import Context, collate_split, encode_messages
from evidra.models.generation import forward_logprobs
from evidra.models.loading import VLM
from evidra.rl.common import DataCursor, make_optimizer
from evidra.rl.parallel.precision import default_device, resolve_model_dtype, training_precision
from evidra.rl.parallel.processes import Engine
from evidra.rl.policy import load_policy
from evidra.rl.run_config import SFTConfig
from evidra.rl.runs.checkpoint import TrainState, resume_newest, save_and_prune
from evidra.rl.runs.folder import RunFolder
from evidra.rl.sft.files import SFTData, read_sft_data
from evidra.rl.tasks import Task, config_task, task_samples
from evidra.rl.validate import local_batch_size, validate_sft_config
from evidra.safeio.sink import MetricsSink

if TYPE_CHECKING:
    from accelerate import Accelerator
    from torch import Tensor

    from evidra.models.hf_types import HFModel, Processor

logger = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class SFTExample:
    context: Context  # the whole conversation, with its images
    prompt_len: int  # tokens before the first assistant token
    loss_mask: tuple[int, ...]  # over context[prompt_len:]: 1 on assistant tokens


def assistant_mask(token_ids: Sequence[int], header: Sequence[int], end_id: int) -> list[int]:
    """1 on every assistant turn's tokens (after its header, through its end-of-turn token).

    >>> assistant_mask([9, 1, 2, 5, 7, 8, 3, 1, 2, 6, 3], header=[1, 2], end_id=3)
    [0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1]
    """
    mask = [0] * len(token_ids)
    i, h = 0, len(header)
    while i <= len(token_ids) - h:
        if list(token_ids[i : i + h]) == list(header):
            j = i + h
            while j < len(token_ids) and token_ids[j] != end_id:
                mask[j] = 1
                j += 1
            if j < len(token_ids):
                mask[j] = 1
            i = j + 1
        else:
            i += 1
    return mask


def make_example(processor: Processor, messages: Sequence[Message]) -> SFTExample:
    tok = processor.tokenizer
    context = encode_messages(processor, messages, add_generation_prompt=False)
    header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    mask = assistant_mask(context.token_ids, header, tok.convert_tokens_to_ids("<|im_end|>"))
    if 1 not in mask:
        raise InvalidInputError("an SFT conversation has no assistant turn to learn from")
    start = mask.index(1)
    return SFTExample(context, start, tuple(mask[start:]))


def sft_loss(
    model: HFModel, vlm: VLM, batch: Sequence[SFTExample], total_tokens: Tensor, engine: Engine | None = None
) -> tuple[Tensor, int]:
    """Sum of assistant-token NLL over ``batch`` divided by the whole step's token count over all
    processes (``total_tokens``), so the micro-batch losses of a step add up to the step's
    token-mean loss (times the process count, undoing the gradient averaging of DDP / FSDP)."""
    import torch

    contexts, prompt_lens = [e.context for e in batch], [e.prompt_len for e in batch]
    inputs, ids, _ = collate_split(contexts, prompt_lens, vlm.pad_token_id, vlm.image_token_id)
    mask = torch.zeros(ids.shape, dtype=torch.float32)  # (b, R)
    for i, e in enumerate(batch):
        mask[i, : len(e.loss_mask)] = torch.tensor(e.loss_mask, dtype=torch.float32)
    device = vlm.device
    inputs = {k: v.to(device) if hasattr(v, "to") else v for k, v in inputs.items()}
    with engine.autocast() if engine is not None else nullcontext():
        logp = forward_logprobs(model, inputs, ids.to(device))  # (b, R)
    mask = mask.to(device)
    world = engine.num_processes if engine is not None else 1
    return -(logp * mask).sum() * world / total_tokens, int(mask.sum())


class SFTTrainer:
    """Token-mean NLL of assistant turns; DDP or FSDP2 and bf16 with fp32 masters, as RL."""

    def __init__(
        self,
        cfg: SFTConfig,
        examples: Sequence[Sequence[Message]] | None = None,
        accelerator: Accelerator | None = None,
        task: Task | None = None,
    ) -> None:
        from accelerate.utils import set_seed

        validate_sft_config(cfg)
        if task is None and examples is None and not cfg.data.trajectories:
            task = config_task(cfg.method, cfg.data, "sft_trainer")  # a method's is passed in
        device = accelerator.device if accelerator is not None else default_device()
        cfg = replace(cfg, model=resolve_model_dtype(cfg.model, device))  # dtype: auto -> this hardware's
        self.cfg = cfg
        self.folder = RunFolder.open(cfg, "sft")  # another run's base, method or config: before any load
        self.engine = Engine(cfg.run, training_precision(cfg.model), accelerator)
        self.local_batch = local_batch_size(cfg, self.engine.num_processes)
        self.out = Path(cfg.run.output_dir)
        set_seed(cfg.run.seed)
        self.data: SFTData | None = None  # the data file read, with its counts (data.trajectories)
        with self.engine.acc.main_process_first():
            if examples is not None:
                conversations: Sequence[Sequence[Message]] = examples
            elif cfg.data.trajectories:  # a data file instead of the task's oracle
                self.data = read_sft_data(cfg.data.trajectories, cfg.data.trajectories_format)
                conversations = self.data.conversations
            else:
                assert task is not None
                conversations = _task_conversations(cfg, task)
            base = self.folder.base_folder(self.out / "models")  # its fingerprint checked
            self.vlm = load_policy(
                replace(cfg.model, path=str(base)),
                self.out / "models",
                str(self.engine.device),
                cast_frozen=self.engine.sharding == "none",
            )
        self.examples = [make_example(self.vlm.processor, c) for c in conversations]
        self.steps = cfg.run.steps or math.ceil(cfg.epochs * len(self.examples) / cfg.run.batch_size)
        self.model, self.optimizer, self.scheduler = self.engine.prepare(
            self.vlm.model,
            partial(make_optimizer, cfg=cfg.optim, total_steps=self.steps),
            cfg.optim.max_grad_norm,
        )
        self.folder.check_shapes(self.engine.unwrap(self.model))  # before any checkpoint loads or log opens
        self.cursor = DataCursor(self.examples, cfg.data.seed)
        main = self.engine.is_main_process
        run = cfg.run
        self.sink = MetricsSink(
            self.out,
            report_to=run.report_to,
            wandb_project=run.wandb_project,
            config=to_dict(cfg),
            enabled=main,
        )
        self.state = TrainState(0, 0, 0)
        model = self.engine.unwrap(self.model)
        opt, sched = self.optimizer, self.scheduler
        state = resume_newest(self.out, model, opt, sched, self.engine) if cfg.run.resume else None
        self.state = state or TrainState(0, 0, 0)
        self.sink.truncate_after(self.state.step)  # a killed attempt's lines past the checkpoint go
        if main:
            self.folder.write()  # a fresh run's config.yaml and run.json; a resumed run's stay

    def step(self) -> dict[str, float]:
        import torch

        start = time.perf_counter()
        e = self.engine
        batch, self.state = self.cursor.take(self.state, self.local_batch, e.process_index, e.num_processes)
        total = e.sum(torch.tensor(float(sum(sum(x.loss_mask) for x in batch)), device=e.device))
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        mb = self.cfg.run.micro_batch_size
        chunks = [batch[i : i + mb] for i in range(0, len(batch), mb)]
        loss_sum, tokens = 0.0, 0
        for i, chunk in enumerate(chunks):
            with nullcontext() if i == len(chunks) - 1 else e.no_sync(self.model):
                loss, n = sft_loss(self.model, self.vlm, chunk, total, e)
                e.backward(loss, self.model)
            loss_sum, tokens = loss_sum + float(loss.detach()) / e.num_processes, tokens + n
        norm = e.optimizer_step(self.model, self.optimizer, self.cfg.optim.max_grad_norm)
        if not math.isfinite(norm):  # a non-finite loss or gradient: the step is skipped
            logger.warning(
                "SFT step %d: gradient norm is not finite; the update was skipped", self.state.step + 1
            )
        self.scheduler.step()
        self.state = TrainState(self.state.step + 1, self.state.data_epoch, self.state.data_offset)
        lr = float(self.scheduler.get_last_lr()[0])
        return {
            "loss": loss_sum,
            "tokens": float(tokens),
            "grad_norm": norm,
            "lr": lr,
            "time/step_s": time.perf_counter() - start,
        }

    def train(self, on_step: Callable[[int, dict[str, float]], None] | None = None) -> list[dict[str, float]]:
        history = []
        while self.state.step < self.steps:
            metrics = self.step()
            history.append(metrics)
            self.sink.write(self.state.step, metrics)
            if on_step is not None:
                on_step(self.state.step, metrics)
            every = self.cfg.run.save_every
            if (every and self.state.step % every == 0) or self.state.step == self.steps:
                self.save()
        self.sink.close()
        return history

    def save(self) -> Path:
        model = self.engine.unwrap(self.model)
        opt, sched = self.optimizer, self.scheduler
        return save_and_prune(self.out, self.state, model, opt, sched, self.cfg, self.engine)

    def export(self, path: str | Path) -> Path:
        """Write the run's newest checkpoint as a loadable model directory (``rl.export``)."""
        from evidra.rl.runs.export import export_model

        return export_model(self.out, path)


def _task_conversations(cfg: SFTConfig, task: Task) -> list[list[Message]]:
    if task.oracle is None:
        raise ConfigError(f"task {task.name!r} has no oracle trajectories; pass SFT conversations")
    samples = task_samples(task, cfg.data)
    if not cfg.data.source:
        return [task.oracle(s) for s in samples]
    # benchmark samples: the oracle needs gold evidence (boxes, evidence text) not every one has
    out, failed = [], []
    for sample in samples:
        try:
            out.append(task.oracle(sample))
        except (LookupError, StopIteration, ValueError, InvalidInputError) as exc:
            failed.append(f"{sample.id}: {type(exc).__name__} {exc}")
    if not out:
        raise ConfigError(
            f"task {task.name!r} cannot build an SFT conversation for any {cfg.data.source} sample "
            f"(e.g. {failed[0]}); pass SFT conversations instead"
        )
    if failed:
        logger.warning(
            "SFT: %d of %d samples lack the gold evidence the oracle needs (e.g. %s)",
            len(failed),
            len(samples),
            failed[0],
        )
    return out
