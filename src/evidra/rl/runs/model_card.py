"""The model card (``README.md``) every export carries.

Its front matter is what the Hugging Face Hub reads (``library_name``, ``base_model`` when the
base is a hub model, ``tags``, ``license`` when the base model's own card names one,
``pipeline_tag``); its body says what a reader of the model needs: the method and the paper to
cite (from the method registry, handed in as ``MethodFacts``), the base model, the recipe (the
run's resolved config, written beside it as ``evidra_config.yaml``) and its sha256, the data,
the steps trained, the final metrics of the run's ``metrics.jsonl`` and how to load the model.

Everything it prints comes from files of the run, which are read with size caps and printed
as inert text: a line of their text never becomes markdown or YAML structure.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from evidra.core.config import parse_yaml
from evidra.core.errors import ConfigError

CARD = "README.md"
MAX_READ = 1 << 20  # bytes read of a config, a base card or the tail of metrics.jsonl
MAX_METRICS = 64  # rows of the final-metrics table
_LICENSE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_SNAPSHOT = re.compile(r"models--([\w.-]+)--([\w.-]+)/snapshots/")  # a hub cache folder


@dataclass(frozen=True)
class Paper:
    """A method's paper: what a user of a model trained with it should cite."""

    title: str
    authors: str = ""  # short, e.g. "Liu et al."
    year: int | None = None
    venue: str = ""
    url: str = ""  # the paper
    code: str = ""  # its released code

    def reference(self) -> str:
        """One line to cite.

        >>> Paper("A Title", "Liu et al.", 2026, "AAAI", "https://arxiv.org/abs/1", "https://c").reference()
        'Liu et al., "A Title", AAAI 2026. https://arxiv.org/abs/1 (code: https://c)'
        >>> Paper("A Title").reference()
        '"A Title".'
        """
        when = " ".join(x for x in (self.venue, str(self.year or "")) if x)
        head = ", ".join(x for x in (self.authors, f'"{self.title}"', when) if x)
        links = " ".join(x for x in (self.url, f"(code: {self.code})" if self.code else "") if x)
        return f"{head}. {links}".strip()


@dataclass(frozen=True)
class MethodFacts:
    """What the card says of the method a run trained (``evidra.methods.method_facts``)."""

    name: str
    summary: str = ""
    paradigm: str = ""
    paper: Paper | None = None


def _text(value: object, limit: int = 200) -> str:
    """A value of a run's files as one inert line for markdown code spans."""
    line = " ".join(str(value).split()).replace("`", "'")
    return line if len(line) <= limit else f"{line[: limit - 3]}..."


def _read(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.read(MAX_READ)


def read_config(path: Path) -> dict[str, object]:
    """A checkpoint's resolved config as a mapping ({} when unreadable: the card says less)."""
    try:
        data = parse_yaml(_read(path).decode("utf-8", errors="replace"), str(path))
    except (OSError, ConfigError):
        return {}
    return data if isinstance(data, dict) else {}


def _section(config: Mapping[str, object], name: str) -> Mapping[str, object]:
    value = config.get(name)
    return value if isinstance(value, Mapping) else {}


def final_metrics(run: Path, step: int) -> dict[str, float]:
    """The scalars ``metrics.jsonl`` of ``run`` recorded at ``step`` (the newest record up to it)."""
    path = run / "metrics.jsonl"
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - MAX_READ))
            lines = fh.read(MAX_READ).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= step:
            return {
                str(k): float(v)
                for k, v in record.items()
                if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)
            }
    return {}


def base_license(base: Path) -> str:
    """The ``license`` the base model's own card names in its front matter, else ""."""
    try:
        text = _read(base / CARD).decode("utf-8", errors="replace")
    except OSError:
        return ""
    parts = text.split("---", 2)
    if not text.startswith("---") or len(parts) < 3:
        return ""
    try:
        front = parse_yaml(parts[1], "the base model's card")
    except ConfigError:
        return ""
    value = front.get("license") if isinstance(front, dict) else None
    return value if isinstance(value, str) and _LICENSE.fullmatch(value) else ""


def hub_id(model_path: str, base: Path) -> str:
    """The hub id of the base model, from ``model.path`` or a hub cache folder; "" for a local one."""
    from evidra.models.references import looks_like_hub_id, parse_hub_id

    hub = parse_hub_id(model_path) if looks_like_hub_id(model_path) else None
    if hub is not None:
        return hub.repo_id
    match = _SNAPSHOT.search(str(base))
    return f"{match[1]}/{match[2]}" if match else ""


@dataclass(frozen=True)
class CardInput:
    """The facts of one export."""

    config: Mapping[str, object]  # the checkpoint's resolved config
    config_sha256: str
    step: int
    metrics: Mapping[str, float]
    base: Path  # the base model folder
    out: str  # the export's folder, as the user named it
    adapter_only: bool
    method: MethodFacts | None

    @classmethod
    def of(
        cls,
        checkpoint: Path,
        recipe: Path,
        base: Path,
        out: str,
        adapter_only: bool,
        method_facts: Callable[[Mapping[str, object]], MethodFacts | None] | None = None,
    ) -> CardInput:
        """The facts of exporting ``checkpoint``, whose resolved config is ``recipe``."""
        config = read_config(recipe)
        step = checkpoint_step(checkpoint)
        run = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
        method = method_facts(config) if method_facts is not None else None
        return cls(config, sha256_of(recipe), step, final_metrics(run, step), base, out, adapter_only, method)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_step(folder: Path) -> int:
    """The step a checkpoint was saved at: its state.json, else its name (``step-000200``)."""
    try:
        state = json.loads(_read(folder / "state.json"))
    except (OSError, ValueError, RecursionError):
        state = None
    step = state.get("step") if isinstance(state, dict) else None
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        return step
    match = re.fullmatch(r"step-(\d{1,12})", folder.name)
    return int(match[1]) if match else 0


def model_card(facts: CardInput) -> str:
    """The README.md of an export: front matter, then the sections of the module docstring."""
    return "\n".join([_front_matter(facts), *_body(facts)]) + "\n"


def _front_matter(facts: CardInput) -> str:
    model = _section(facts.config, "model")
    base_id = hub_id(str(model.get("path", "")), facts.base)
    license_ = base_license(facts.base)
    lora = bool(_section(model, "lora").get("enabled"))
    stage = "sft" if _is_sft(facts.config) else "reinforcement-learning"
    method = [facts.method.name] if facts.method else []
    tags = ["evidra", *method, stage, "visual-document-rag", *(["lora"] if lora else [])]
    front: dict[str, object] = {"library_name": "peft" if facts.adapter_only else "transformers"}
    front |= {"base_model": base_id} if base_id else {}
    front |= {"license": license_} if license_ else {}
    front |= {"tags": tags, "pipeline_tag": "image-text-to-text" if _sees(facts.base) else "text-generation"}
    return f"---\n{yaml.safe_dump(front, sort_keys=False)}---"


def _is_sft(config: Mapping[str, object]) -> bool:
    return "epochs" in config  # only the SFT stage's config has it


def _sees(base: Path) -> bool:
    """Whether the base model has a vision tower (its config.json names a vision_config)."""
    try:
        config = json.loads(_read(base / "config.json"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(config, dict) and "vision_config" in config


def _body(facts: CardInput) -> list[str]:
    name = Path(facts.out).name or "model"
    return [
        f"\n# {_text(name, 80)}\n",
        *_method(facts),
        *_base(facts),
        "## Recipe\n",
        "The run's resolved config is `evidra_config.yaml` beside the weights (the recipe with every "
        "override applied); train again with `evidra train "
        f"{'sft' if _is_sft(facts.config) else 'rl'} --config evidra_config.yaml`.\n",
        f"- sha256 of `evidra_config.yaml`: `{facts.config_sha256}`\n",
        *_data(facts),
        *_training(facts),
        *_loading(facts),
    ]


def _method(facts: CardInput) -> list[str]:
    lines = ["## Method\n"]
    if facts.method is None:
        data = _section(facts.config, "data")
        trained = _text(_section(facts.config, "method").get("name") or data.get("task", ""), 80)
        where = "`method.name`, else `data.task`, of `evidra_config.yaml`"
        return [*lines, f"Trained with evidra on `{trained}` ({where}).\n"]
    m = facts.method
    lines.append(
        f"Trained with evidra's `{m.name}` method" + (f": {_text(m.summary)}." if m.summary else ".")
    )
    if m.paper is not None:
        lines += ["", f"Paper to cite: {m.paper.reference()}"]
    return [*lines, ""]


def _base(facts: CardInput) -> list[str]:
    model = _section(facts.config, "model")
    lora = _section(model, "lora")
    how = "full fine-tuning"
    if lora.get("enabled"):
        kept = "the adapter alone" if facts.adapter_only else "merged into the weights"
        how = f"LoRA (r={_text(lora.get('r'), 8)}, alpha={_text(lora.get('alpha'), 8)}), {kept}"
    path, dtype = _text(model.get("path", "")), _text(model.get("dtype", ""), 20)
    return ["## Base model\n", f"- `{path}`, trained in {dtype} with {how}\n"]


def _data(facts: CardInput) -> list[str]:
    data = _section(facts.config, "data")
    named = [key for key in ("source", "path", "synthetic", "trajectories", "subset") if data.get(key)]
    if not named:  # generated samples: the method's own, or those of the plain task data.task names
        named = ["task"] if facts.method is None else []
        own = "the method's own generated samples" if facts.method else "generated samples"
        rows = [
            f"- {own}: `data.size` {_text(data.get('size'), 12)}, `data.seed` {_text(data.get('seed'), 12)}"
        ]
    else:
        rows = [f"- `data.size`: `{_text(data.get('size'), 12)}` (0: all)"]
    rows = [*(f"- `data.{key}`: `{_text(data.get(key))}`" for key in named), *rows]
    return ["## Data\n", *rows, ""]


def _training(facts: CardInput) -> list[str]:
    run = _section(facts.config, "run")
    stage = "SFT, conversations" if _is_sft(facts.config) else "RL, prompts"
    steps, batch = _text(run.get("steps", "?"), 12), _text(run.get("batch_size", "?"), 12)
    lines = [
        "## Training\n",
        f"- steps trained: {facts.step} (run.steps: {steps}; {stage} per step: {batch})",
    ]
    if not facts.metrics:
        return [*lines, "- no metrics were recorded for this step (metrics.jsonl)\n"]
    lines += [
        "",
        f"Final metrics (step {facts.step}, from the run's metrics.jsonl):",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    rows = list(facts.metrics.items())[:MAX_METRICS]
    return [*lines, *(f"| `{_text(key, 80).replace('|', '/')}` | {value:.6g} |" for key, value in rows), ""]


def _loading(facts: CardInput) -> list[str]:
    out = json.dumps(_text(facts.out, 300))  # a Python (and JSON) string literal
    if facts.adapter_only:
        code = [
            "from peft import PeftModel",
            "from transformers import AutoModelForImageTextToText",
            "",
            f"base = AutoModelForImageTextToText.from_pretrained({json.dumps(_text(facts.base, 300))})",
            f"model = PeftModel.from_pretrained(base, {out})",
        ]
    else:
        code = [
            "from transformers import AutoModelForImageTextToText, AutoProcessor",
            "",
            f"model = AutoModelForImageTextToText.from_pretrained({out})",
            f"processor = AutoProcessor.from_pretrained({out})",
        ]
    lines = ["## How to load\n", "```python", *code, "```", ""]
    if facts.adapter_only:
        return lines
    folder = shlex.quote(_text(facts.out, 300))
    fmt = f"--method {facts.method.name}" if facts.method else "--paradigm direct"
    return [
        *lines,
        "With evidra (`--model` takes this folder):",
        "",
        "```bash",
        f'evidra ask --store store/ --model {folder} {fmt} "Your question"',
        f"evidra eval --synthetic documents {fmt} --model {folder} --out results/",
        "```",
    ]
