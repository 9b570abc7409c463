"""ColQwen2 / ColPali checkpoints in colpali-engine's own format load into transformers' classes and
give the same vectors as the transformers release of the same weights; broken ones are refused."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from native_checkpoints import embeddings, save_weights, write_native

from evidra.core.errors import ModelLoadError
from evidra.core.types import Page
from evidra.retrieval.encoders import load_encoder
from evidra.retrieval.encoders.colvision_native import LAYOUTS, Layout
from evidra.retrieval.interfaces import EncoderOptions

QUERIES = ["founding year", "total revenue of the company"]


@pytest.fixture(scope="module")
def hf_retrievers(tiny_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Per family: the transformers-format tiny directory and its encoder."""
    from evidra.models.tiny import build_tiny

    dirs = {
        "colqwen2": tiny_dirs["colqwen2"],
        "colpali": build_tiny("colpali", tmp_path_factory.mktemp("cp") / "cp"),
    }
    return {family: (d, load_encoder(family, d, EncoderOptions(batch_size=4))) for family, d in dirs.items()}


@pytest.fixture(scope="module")
def natives(
    hf_retrievers: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], Path]:
    """Each family in each colpali-engine layout; ColQwen2 also sharded and with a pre-v5 config."""
    root = tmp_path_factory.mktemp("native")
    out = {}
    for (family, layout), extra in {
        ("colqwen2", "new"): {"shards": 2},
        ("colqwen2", "old"): {"flat_config": True},
        ("colpali", "new"): {},
        ("colpali", "old"): {"shards": 3},
    }.items():
        hf_dir, enc = hf_retrievers[family]
        out[family, layout] = write_native(
            hf_dir, enc.model, root / f"{family}-{layout}", family, layout, **extra
        )
    return out


@pytest.mark.parametrize(
    ("family", "layout"), [("colqwen2", "new"), ("colqwen2", "old"), ("colpali", "new"), ("colpali", "old")]
)
def test_a_colpali_engine_checkpoint_gives_the_vectors_of_its_transformers_release(
    family: str,
    layout: str,
    hf_retrievers: dict[str, Any],
    natives: dict[tuple[str, str], Path],
    ragged_pages: list[Page],
) -> None:
    _, hf = hf_retrievers[family]
    native: Any = load_encoder(family, natives[family, layout], EncoderOptions(batch_size=4))
    assert native.name == family and native.dim == hf.dim == 32  # the projection's shape, not 128
    assert type(native.model) is type(hf.model)
    want, got = embeddings(hf, ragged_pages, QUERIES), embeddings(native, ragged_pages, QUERIES)
    assert len(got) == len(ragged_pages) + len(QUERIES)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and torch.allclose(g, w, atol=1e-6)
    hf_state = hf.model.state_dict()
    assert all(torch.equal(v, hf_state[k]) for k, v in native.model.state_dict().items())


def test_the_layout_tables_rename_and_invert_by_hand() -> None:
    new, old = LAYOUTS["colqwen2"]
    assert new.rename("language_model.layers.0.self_attn.q_proj.weight") == (
        "vlm.language_model.layers.0.self_attn.q_proj.weight"
    )
    assert (
        old.rename("model.layers.0.self_attn.q_proj.weight")
        == "vlm.language_model.layers.0.self_attn.q_proj.weight"
    )
    assert (
        old.rename("custom_text_proj.bias")
        == new.rename("custom_text_proj.bias")
        == "embedding_proj_layer.bias"
    )
    assert new.rename("base_model.model.custom_text_proj.weight") == "embedding_proj_layer.weight"
    assert (
        old.rename("lm_head.weight") is None
        and old.drops("lm_head.weight")
        and not new.drops("lm_head.weight")
    )
    assert new.unknown(["model.layers.0.mlp.up_proj.weight", "visual.merger.ln_q.weight"]) == [
        "model.layers.0.mlp.up_proj.weight"
    ]
    # module names back to colpali-engine's, for matching an adapter's target_modules
    assert old.source("vlm.language_model.layers.3.mlp") == "model.layers.3.mlp"
    assert (
        old.source("vlm.language_model") == "model" and new.source("vlm.language_model") == "language_model"
    )
    assert old.source("embedding_proj_layer") == "custom_text_proj" and old.source("vlm") is None
    pali_new, pali_old = LAYOUTS["colpali"]
    assert pali_old.rename("model.language_model.model.norm.weight") == "vlm.language_model.norm.weight"
    assert pali_new.rename("model.model.vision_tower.x") == "vlm.vision_tower.x"
    assert pali_old.drops("model.language_model.lm_head.weight") and pali_new.drops("model.lm_head.weight")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _rewrite(folder: Path, change: Any) -> None:
    """Rewrite the single-file weights of ``folder`` with ``change(state)`` applied."""
    from safetensors.torch import load_file

    state = dict(load_file(str(folder / "model.safetensors")))
    change(state)
    save_weights(state, folder)


def _refused(family: str, folder: Path, pattern: str) -> str:
    with pytest.raises(ModelLoadError, match=pattern) as info:
        load_encoder(family, folder)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_broken_colpali_engine_checkpoints_are_refused_in_one_line(
    tmp_path: Path, natives: dict[tuple[str, str], Path]
) -> None:
    old = natives["colqwen2", "old"]

    missing = _copy(old, tmp_path / "missing")
    _rewrite(missing, lambda s: s.pop("model.layers.1.mlp.up_proj.weight"))
    msg = _refused("colqwen2", missing, r"lacks weights model\.layers\.1\.mlp\.up_proj\.weight \(1 in all\)")
    assert "Qwen2VLForConditionalGeneration subclass" in msg  # names the layout it read

    many = _copy(old, tmp_path / "many")
    _rewrite(many, lambda s: [s.pop(k) for k in [k for k in s if k.startswith("model.layers.1.")]])
    _refused(
        "colqwen2", many, r"lacks weights model\.layers\.1\.input_layernorm\.weight, .*, \.\.\. \(12 in all\)"
    )

    odd = _copy(old, tmp_path / "odd")
    _rewrite(odd, lambda s: s.update({"foo.weight": torch.zeros(1)}))
    _refused("colqwen2", odd, r"1 weight\(s\) fit no colpali-engine colqwen2 layout \(e\.g\. foo\.weight\)")

    wide = _copy(old, tmp_path / "wide")
    _rewrite(wide, lambda s: s.update({"visual.merger.ln_q.weight": torch.ones(3)}))
    _refused(
        "colqwen2",
        wide,
        r"weight visual\.merger\.ln_q\.weight has shape \(3,\), its config\.json asks for \(64,\)",
    )

    bare = _copy(old, tmp_path / "bare")
    _rewrite(bare, lambda s: [s.pop(k) for k in ("custom_text_proj.weight", "custom_text_proj.bias")])
    _refused("colqwen2", bare, r"has no custom_text_proj weight; it is a bare backbone")

    empty = _copy(old, tmp_path / "empty")
    (empty / "model.safetensors").unlink()
    _refused("colqwen2", empty, r"has no weights \(model\.safetensors or pytorch_model\.bin\)")

    damaged = _copy(old, tmp_path / "damaged")
    (damaged / "model.safetensors").write_bytes(b"\x00" * 64)
    _refused("colqwen2", damaged, r"could not read weights .*model\.safetensors.*; download it again")

    shard = _copy(natives["colqwen2", "new"], tmp_path / "shard")
    (shard / "model-00002-of-00002.safetensors").unlink()
    _refused("colqwen2", shard, r"could not read weights .*model-00002-of-00002\.safetensors")


def test_the_family_of_a_colpali_engine_checkpoint_is_checked(
    tmp_path: Path, natives: dict[tuple[str, str], Path]
) -> None:
    _refused(
        "colpali",
        natives["colqwen2", "new"],
        r"is a 'colqwen2' checkpoint, not colpali; use encoder 'colqwen2'",
    )
    _refused(
        "colqwen2",
        natives["colpali", "old"],
        r"is a 'colpali' checkpoint, not colqwen2; use encoder 'colpali'",
    )
    other = tmp_path / "colqwen25"  # a colpali-engine class transformers has no retrieval class for
    other.mkdir()
    (other / "config.json").write_text(
        json.dumps({"model_type": "qwen2_5_vl", "architectures": ["ColQwen2_5"]})
    )
    _refused(
        "colqwen2",
        other,
        r"'qwen2_5_vl' checkpoint, not colqwen2; .*not ColQwen2_5; pass a transformers release",
    )


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (str(self.marker),))  # type: ignore[return-value]


def test_a_pickled_colpali_engine_checkpoint_is_read_without_running_code(
    tmp_path: Path,
    natives: dict[tuple[str, str], Path],
    hf_retrievers: dict[str, Any],
    ragged_pages: list[Page],
) -> None:
    from safetensors.torch import load_file

    plain = _copy(natives["colqwen2", "old"], tmp_path / "plain")
    state = load_file(str(plain / "model.safetensors"))
    (plain / "model.safetensors").unlink()
    torch.save(state, plain / "pytorch_model.bin")
    enc: Any = load_encoder("colqwen2", plain)
    _, hf = hf_retrievers["colqwen2"]
    assert torch.allclose(enc.embed_queries(QUERIES)[1], hf.embed_queries(QUERIES)[1], atol=1e-6)

    marker = tmp_path / "ran"
    (plain / "pytorch_model.bin").write_bytes(pickle.dumps({"x": _Payload(marker)}, protocol=2))
    _refused("colqwen2", plain, r"could not read weights .*pytorch_model\.bin")
    assert not marker.exists()


def test_a_layout_is_chosen_by_the_keys_it_knows(tmp_path: Path) -> None:
    from evidra.retrieval.encoders.colvision_native import choose_layout

    new, old = LAYOUTS["colqwen2"]
    assert choose_layout("colqwen2", ["language_model.norm.weight", "visual.x"], tmp_path) is new
    assert choose_layout("colqwen2", ["model.norm.weight", "lm_head.weight"], tmp_path) is old
    # a projection alone fits both: the base's own layout wins
    assert choose_layout("colqwen2", ["custom_text_proj.weight"], tmp_path, prefer=old) is old
    assert choose_layout("colqwen2", ["custom_text_proj.weight"], tmp_path) is new
    assert isinstance(new, Layout)


def test_a_colpali_engine_checkpoint_loads_in_the_dtype_asked_for(
    tiny_dirs: dict[str, Path], natives: dict[tuple[str, str], Path], ragged_pages: list[Page]
) -> None:
    opts = EncoderOptions(batch_size=4, dtype="bfloat16")
    native: Any = load_encoder("colqwen2", natives["colqwen2", "old"], opts)
    hf: Any = load_encoder("colqwen2", tiny_dirs["colqwen2"], opts)
    assert {p.dtype for p in native.model.parameters()} == {torch.bfloat16}
    for g, w in zip(
        embeddings(native, ragged_pages, QUERIES), embeddings(hf, ragged_pages, QUERIES), strict=True
    ):
        assert torch.allclose(g, w, atol=1e-6)
