"""Every recipe path (``configs/....yaml``) named in the code's docstrings, help texts and the docs
exists, so a command copied from them finds its file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
SOURCES = [*sorted((ROOT / "src").rglob("*.py")), ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a path with a placeholder in it (configs/NAME.yaml, configs/X.yaml, configs/lang2act_stage{1,2}.yaml)
# names a pattern, not a file
PLACEHOLDER = re.compile(r"[A-Z]|\{")
NAMED = re.compile(r"configs/[\w./{},-]+?\.yaml")


def named_configs(text: str) -> set[str]:
    """The concrete recipe paths a text names.

    >>> sorted(named_configs("run configs/tiny/lat.yaml or configs/NAME.yaml, configs/lat.yaml"))
    ['configs/lat.yaml', 'configs/tiny/lat.yaml']
    """
    return {p for p in NAMED.findall(text) if not PLACEHOLDER.search(p.removeprefix("configs/"))}


def test_named_configs_exist() -> None:
    missing = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in SOURCES
        for name in named_configs(path.read_text(encoding="utf-8"))
        if not (ROOT / name).is_file()
    )
    assert not missing, "recipes named but absent:\n" + "\n".join(missing)


def test_a_missing_recipe_is_found() -> None:
    assert named_configs("evidra train rl --config configs/toy.yaml run.steps=20") == {"configs/toy.yaml"}
    assert not (ROOT / "configs/toy.yaml").exists()
