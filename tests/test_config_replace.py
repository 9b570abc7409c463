"""``!replace`` in a recipe on a ``base:``: the tagged section takes the place of the base's whole
instead of merging into it; the tag is a plain marker of the safe loader, everything else it
refuses stays refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from evidra.core.config import dump_config, load_config, read_config_file
from evidra.core.errors import ConfigError
from evidra.methods import resolve
from evidra.rl.run_config import RLConfig

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_recipe_on_another_methods_recipe_drops_its_method_options(tmp_path: Path) -> None:
    lat = (ROOT / "configs" / "lat.yaml").resolve()
    recipe = _write(tmp_path / "cave_on_lat.yaml", f"base: {lat}\nmethod: !replace {{name: cave}}\n")
    cfg = load_config(RLConfig, recipe)
    assert cfg.method == {"name": "cave"}
    assert cfg.rollout == load_config(RLConfig, lat).rollout  # the rest of the base is kept
    resolved = resolve(cfg)
    assert resolved is not None and resolved.method.name == "cave"


def test_without_the_tag_the_sections_merge_as_before(tmp_path: Path) -> None:
    lat = (ROOT / "configs" / "lat.yaml").resolve()
    recipe = _write(tmp_path / "cave_on_lat.yaml", f"base: {lat}\nmethod: {{name: cave}}\n")
    cfg = load_config(RLConfig, recipe)
    assert cfg.method["name"] == "cave" and "reward_mode" in cfg.method  # lat's options merged in
    with pytest.raises(ConfigError, match=r"method\.reward_mode is no option of method 'cave'"):
        resolve(cfg)


def test_the_tag_on_a_scalar_a_list_and_a_nested_section(tmp_path: Path) -> None:
    base = (
        "run: {steps: 5, seed: 1}\n"
        "data: {synthetic: [tracer, documents]}\n"
        "optim: {lr: 1.0e-6, warmup_steps: 3}\n"
    )
    _write(tmp_path / "base.yaml", base)
    recipe = _write(
        tmp_path / "r.yaml",
        "base: base.yaml\nrun: {steps: !replace 7}\ndata: {synthetic: !replace [tunnel]}\n"
        "optim: !replace {lr: 2.0e-6}\nextra: !replace {a: 1}\n",
    )
    data = read_config_file(recipe)
    assert data["run"] == {"steps": 7, "seed": 1}  # an int, not the text "7"
    assert data["data"] == {"synthetic": ["tunnel"]}
    assert data["optim"] == {"lr": 2.0e-6}  # warmup_steps gone with the base's section
    assert data["extra"] == {"a": 1}  # nothing to replace: the value as written
    # a file without a base reads the tag as no tag
    assert read_config_file(_write(tmp_path / "plain.yaml", "run: !replace {steps: 2}\n")) == {
        "run": {"steps": 2}
    }


def test_a_replaced_section_loads_and_dumps_as_plain_data(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", "method: {name: lat, scoped: true}\nmodel: {path: x}\n")
    recipe = _write(tmp_path / "r.yaml", "base: base.yaml\nmethod: !replace\n  name: evisrag\n")
    cfg = load_config(RLConfig, recipe, ["method=!replace {name: cave}"])  # an override replaces anyway
    assert cfg.method == {"name": "cave"}
    out = dump_config(cfg, tmp_path / "config.yaml")
    assert "!replace" not in out.read_text() and yaml.safe_load(out.read_text())["method"] == {"name": "cave"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("!replace {method: {name: cave}}\n", r"top level \(!replace marks a section, not the whole file\)"),
        (
            "base: base.yaml\nrun: {report_to: [!replace jsonl]}\n",
            r"run\.report_to\[0\]: !replace marks the value",
        ),
        (
            "method: !!python/object/apply:os.system [echo hi]\n",
            r"is not valid YAML: could not determine a constructor",
        ),
        (
            "method: !replace_all {name: cave}\n",
            r"could not determine a constructor for the tag '!replace_all'",
        ),
        ("method: !replace &m {name: cave}\nsft: {method: *m}\n", r"uses a YAML alias \*m"),
        ("base: !replace base.yaml\n", r"base: in .* must name a config file"),
    ],
)
def test_hostile_uses_of_the_tag_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    _write(tmp_path / "base.yaml", "run: {steps: 5}\n")
    with pytest.raises(ConfigError, match=message) as err:
        read_config_file(_write(tmp_path / "r.yaml", text))
    assert "\n" not in str(err.value)


def test_the_nesting_cap_reaches_inside_a_replaced_section(tmp_path: Path) -> None:
    deep = "{a: " * 40 + "1" + "}" * 40
    with pytest.raises(ConfigError, match="more than 32 levels deep"):
        read_config_file(_write(tmp_path / "r.yaml", f"method: !replace {deep}\n"))
