"""ColQwen2 / ColPali checkpoints in colpali-engine's own format, read into transformers' classes.

colpali-engine saves a retriever as its backbone's model class plus one linear layer,
``custom_text_proj``: config.json is the backbone's own (``model_type`` qwen2_vl or paligemma,
``architectures`` ColQwen2 or ColPali) and the weights carry the backbone's names. transformers'
``ColQwen2ForRetrieval`` / ``ColPaliForRetrieval`` hold the same tensors under ``vlm`` and call the
projection ``embedding_proj_layer``. The renames are the ones transformers' own conversion scripts
(``convert_colqwen2_weights_to_hf.py``, ``convert_colpali_weights_to_hf.py``) apply, written
against the names transformers 5 keeps in memory: its retrieval classes wrap the backbone's base
model, so the ``-hf`` checkpoints' ``vlm.model.language_model`` is ``vlm.language_model`` here and
there is no language-model head (a saved ``lm_head`` is dropped: retrieval never reads it).

colpali-engine changed its names once, when transformers split the Qwen2-VL and PaliGemma classes
into a base model and a head: each family has an older and a newer layout, told apart by the keys.
A PEFT adapter trained with colpali-engine names its modules the same way (``target_modules``
regexes such as ``.*(model).*(q_proj|v_proj)$|.*custom_text_proj.*``); ``write_renamed_adapter``
resolves which modules it targets under colpali-engine's names and writes the adapter again under
transformers' names, for peft to apply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from evidra.core.errors import ModelLoadError
from evidra.core.jsonvalue import JSON, JSONObject, as_object
from evidra.safeio.confined import inside
from evidra.safeio.jsonfiles import read_capped_text

if TYPE_CHECKING:
    from transformers import PreTrainedModel

NATIVE_CLASSES = {"qwen2_vl": ("ColQwen2", "colqwen2"), "paligemma": ("ColPali", "colpali")}
PEFT_PREFIX = "base_model.model."  # peft saves adapter weights under the wrapped model's names
_SHOWN = 3  # keys named in an error


@dataclass(frozen=True)
class Layout:
    """One way colpali-engine named a retriever's weights, as prefix renames into transformers'.

    ``renames`` are ``(colpali-engine prefix, transformers prefix)`` pairs, canonical ones first;
    ``dropped`` are prefixes of weights the retrieval class has no place for (the LM head).
    """

    name: str
    renames: tuple[tuple[str, str], ...]
    dropped: tuple[str, ...] = ()

    def rename(self, key: str) -> str | None:
        """The transformers name of ``key``; None for a key this layout does not know."""
        for source, target in self.renames:
            if key.startswith(source):
                return target + key[len(source) :]
        return None

    def drops(self, key: str) -> bool:
        return key.startswith(self.dropped)

    def unknown(self, keys: Iterable[str]) -> list[str]:
        return [k for k in keys if not self.drops(k) and self.rename(k) is None]

    def source(self, name: str) -> str | None:
        """The colpali-engine name of a transformers module or weight name (the inverse rename)."""
        for source, target in self.renames:
            if (name + ".").startswith(target):
                return (source + name[len(target) :]).rstrip(".")
        return None


_PROJ = (
    ("custom_text_proj.", "embedding_proj_layer."),
    ("base_model.model.custom_text_proj.", "embedding_proj_layer."),  # colpali-engine reads this too
)
LAYOUTS: dict[str, tuple[Layout, ...]] = {
    "colqwen2": (
        Layout(
            "ColQwen2 as a Qwen2VLModel subclass (recent colpali-engine)",
            (*_PROJ, ("language_model.", "vlm.language_model."), ("visual.", "vlm.visual.")),
        ),
        Layout(
            "ColQwen2 as a Qwen2VLForConditionalGeneration subclass (earlier colpali-engine)",
            (*_PROJ, ("model.", "vlm.language_model."), ("visual.", "vlm.visual.")),
            dropped=("lm_head.",),
        ),
    ),
    "colpali": (
        Layout(
            "ColPali around PaliGemma with a base model (recent colpali-engine)",
            (
                *_PROJ,
                ("model.model.language_model.", "vlm.language_model."),
                ("model.model.vision_tower.", "vlm.vision_tower."),
                ("model.model.multi_modal_projector.", "vlm.multi_modal_projector."),
            ),
            dropped=("model.lm_head.",),
        ),
        Layout(
            "ColPali around PaliGemma with a Gemma LM (earlier colpali-engine)",
            (
                *_PROJ,
                ("model.language_model.model.", "vlm.language_model."),
                ("model.vision_tower.", "vlm.vision_tower."),
                ("model.multi_modal_projector.", "vlm.multi_modal_projector."),
            ),
            dropped=("model.language_model.lm_head.",),
        ),
    ),
}


def native_family(folder: Path) -> str | None:
    """``colqwen2`` / ``colpali`` for a checkpoint colpali-engine saved itself, else None."""
    cfg = _read_config(folder)
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or model_type not in NATIVE_CLASSES:
        return None
    cls, family = NATIVE_CLASSES[model_type]
    return family if cls in _architectures(cfg) else None


def colpali_engine_classes(folder: Path) -> list[str]:
    """The Col* class names a config.json records (colpali-engine's own format), else []."""
    return [str(n) for n in _architectures(_read_config(folder)) if str(n).startswith("Col")]


def _architectures(cfg: JSONObject) -> list[JSON]:
    """The ``architectures`` a config.json lists (none unless it is a list)."""
    names = cfg.get("architectures")
    return names if isinstance(names, list) else []


def _read_config(folder: Path) -> JSONObject:
    try:
        cfg: JSON = json.loads(read_capped_text(folder / "config.json", "checkpoint config"))
    except (OSError, ValueError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def choose_layout(family: str, keys: Iterable[str], where: Path, prefer: Layout | None = None) -> Layout:
    """The layout of ``family`` that knows every key (``prefer`` when several do)."""
    keys = list(keys)
    fits = [layout for layout in LAYOUTS[family] if not layout.unknown(keys)]
    if prefer in fits:
        return prefer
    if fits:
        return fits[0]
    closest = min(LAYOUTS[family], key=lambda layout: len(layout.unknown(keys)))
    odd = closest.unknown(keys)
    raise ModelLoadError(
        f"{str(where)!r}: {len(odd)} weight(s) fit no colpali-engine {family} layout (e.g. "
        f"{', '.join(odd[:_SHOWN])}); pass a checkpoint saved by colpali-engine's {family} class"
    )


def rename_weights(layout: Layout, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``state`` under transformers' names (``layout`` must know every key)."""
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        new = layout.rename(key)
        if new is not None:
            out[new] = value
    return out


def read_weights(folder: Path, stems: tuple[str, ...]) -> dict[str, Tensor]:
    """Every tensor of the first of ``stems`` found in ``folder``: safetensors (single file or the
    shards its index names), else a torch pickle read with ``weights_only``."""
    for stem in stems:
        for ext in (".safetensors", ".bin"):
            index, single = folder / f"{stem}{ext}.index.json", folder / f"{stem}{ext}"
            if index.is_file():
                where = f"the weight_map of {index}"
                files = sorted({inside(folder, f, where, ModelLoadError) for f in _index_files(index)})
            elif single.is_file():
                files = [single]
            else:
                continue
            state: dict[str, Tensor] = {}
            for file in files:
                state.update(_read_file(file))
            return state
    raise ModelLoadError(
        f"{str(folder)!r} has no weights ({stems[0]}.safetensors or {stems[-1]}.bin); "
        "pass the complete checkpoint directory"
    )


def _index_files(index: Path) -> list[str]:
    try:
        return [str(f) for f in json.loads(read_capped_text(index, "weight index"))["weight_map"].values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ModelLoadError(f"{index} is no valid weight index ({type(exc).__name__}: {exc})") from None


def _read_file(file: Path) -> dict[str, Tensor]:
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            return dict(load_file(str(file)))
        return dict(torch.load(file, map_location="cpu", weights_only=True))
    except Exception as exc:  # safetensors and torch raise their own kinds for a damaged file
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelLoadError(f"could not read weights {str(file)!r} ({reason}); download it again") from None


def load_native(
    model_cls: type[PreTrainedModel], folder: Path, family: str, dtype: torch.dtype
) -> tuple[PreTrainedModel, Layout]:
    """A transformers retrieval model holding the weights of colpali-engine checkpoint ``folder``,
    and the layout they were saved in."""
    from transformers import AutoConfig
    from transformers.initialization import no_init_weights

    native = read_weights(folder, ("model", "pytorch_model"))
    layout = choose_layout(family, native, folder)
    state = rename_weights(layout, native)
    proj = state.get("embedding_proj_layer.weight")
    if proj is None:
        raise ModelLoadError(
            f"{str(folder)!r} has no custom_text_proj weight; it is a bare backbone, not a colpali-engine "
            f"{family} retriever"
        )
    try:
        vlm_config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # transformers raises many kinds for a malformed config
        raise ModelLoadError(f"could not read the config of {str(folder)!r}: {exc}") from None
    vlm_config.architectures = None  # the backbone's config, now inside the retrieval one
    # colpali-engine fixes the projection at 128; the weight's shape says so either way
    config = model_cls.config_class(vlm_config=vlm_config, embedding_dim=int(proj.shape[0]))
    with no_init_weights():  # every weight is overwritten below
        model = model_cls._from_config(config, dtype=dtype)
    _check_weights(model.state_dict(), state, layout, folder)
    model.load_state_dict(state, strict=True)
    return model, layout


def _check_weights(
    want: Mapping[str, Tensor], got: Mapping[str, Tensor], layout: Layout, folder: Path
) -> None:
    """One-line errors for weights missing, left over or of the wrong shape (colpali-engine names)."""

    def shown(keys: Iterable[str]) -> str:
        names = sorted(layout.source(k) or k for k in keys)
        return f"{', '.join(names[:_SHOWN])}{', ...' if len(names) > _SHOWN else ''} ({len(names)} in all)"

    where = f"{str(folder)!r} ({layout.name})"
    if missing := want.keys() - got.keys():
        raise ModelLoadError(f"{where} lacks weights {shown(missing)}; pass the complete checkpoint")
    if extra := got.keys() - want.keys():
        raise ModelLoadError(f"{where} has weights its config has no place for: {shown(extra)}")
    if odd := [k for k in want if want[k].shape != got[k].shape]:
        k = odd[0]
        raise ModelLoadError(
            f"{where}: weight {layout.source(k)} has shape {tuple(got[k].shape)}, its config.json asks "
            f"for {tuple(want[k].shape)} ({len(odd)} mismatched); pass the config saved with these weights"
        )


def write_renamed_adapter(
    folder: Path, family: str, model: PreTrainedModel, out: Path, prefer: Layout | None = None
) -> bool:
    """Write the PEFT adapter in ``folder`` to ``out`` under transformers' module names, if it names
    colpali-engine's modules; False (nothing written) when it already names transformers' ones."""
    native = {k.removeprefix(PEFT_PREFIX): v for k, v in read_weights(folder, ("adapter_model",)).items()}
    if all(k.startswith(("vlm.", "embedding_proj_layer.")) for k in native):
        return False
    layout = choose_layout(family, native, folder, prefer)
    state = {PEFT_PREFIX + k: v.contiguous() for k, v in rename_weights(layout, native).items()}
    config = rename_adapter_config(folder, layout, [name for name, _ in model.named_modules()])

    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))
    save_file(state, str(out / "adapter_model.safetensors"))
    return True


def rename_adapter_config(folder: Path, layout: Layout, module_names: Iterable[str]) -> JSONObject:
    """The adapter_config.json of ``folder`` for transformers' ``module_names``: its targets resolved
    the way peft resolves them, on each module's colpali-engine name, then listed by full name."""
    from peft import PeftConfig
    from peft.tuners.tuners_utils import check_target_module_exists
    from peft.utils.other import get_pattern_key

    where = f"the adapter config {str(folder / 'adapter_config.json')!r}"
    config = as_object(
        json.loads(read_capped_text(folder / "adapter_config.json", "adapter config")), where, ModelLoadError
    )
    if config.get("target_parameters"):
        raise ModelLoadError(
            f"the adapter in {str(folder)!r} targets parameters by colpali-engine name, which is not "
            "translated; merge it with colpali-engine and pass the merged model"
        )
    parsed = PeftConfig.from_pretrained(str(folder))
    sources = {name: layout.source(name) for name in module_names}
    targets = [n for n, s in sources.items() if s is not None and check_target_module_exists(parsed, s)]
    out: JSONObject = {**config, "target_modules": [*targets], "exclude_modules": None}
    out |= {"layers_to_transform": None, "layers_pattern": None}  # already applied above
    for field in ("rank_pattern", "alpha_pattern"):
        pattern = as_object(config.get(field) or {}, f"{where}: {field}", ModelLoadError)
        picked = {t: get_pattern_key(list(pattern), sources[t] or t) for t in targets}
        out[field] = {re.escape(t): pattern[k] for t, k in picked.items() if k in pattern}
    saved = [_rename_module(m, layout) for m in _module_names(config.get("modules_to_save") or [], where)]
    out["modules_to_save"] = [m for m in saved if m is not None] or None
    return out


def _module_names(value: JSON, where: str) -> list[str]:
    """``modules_to_save`` of an adapter config: a list of module names, or one line naming it."""
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ModelLoadError(f"{where}: modules_to_save must be a list of module names")
    return [name for name in value if isinstance(name, str)]


def _rename_module(name: str, layout: Layout) -> str | None:
    """A ``modules_to_save`` entry under transformers' names (None: a dropped LM head); a bare
    suffix no rename touches (``norm``) means the same module under either name."""
    if layout.drops(name + "."):
        return None
    renamed = layout.rename(name + ".")
    return name if renamed is None else renamed.rstrip(".")
