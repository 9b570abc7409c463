"""The shape the code keeps, measured where it matters: a function fits on a screen, a module says in
its docstring the one thing it does. No line budget per file: a module is as long as its concern."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "evidra"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_FUNCTION_LINES = 60  # body lines after the docstring
# flag declarations: one add_argument per flag, read top to bottom like the --help they print
DECLARATIONS = {("cli", "register")}


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = node.body[0]
    documented = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    start = first.end_lineno + 1 if documented and len(node.body) > 1 else first.lineno  # type: ignore[operator]
    return int(node.end_lineno or start) - int(start) + 1


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    folder = path.relative_to(PACKAGE).parts[0]
    return [
        f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({_body_lines(node)} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and _body_lines(node) > limit
        and (folder, node.name) not in DECLARATIONS
    ]


def test_the_scan_measures_a_function_without_its_docstring(tmp_path: Path) -> None:
    probe = PACKAGE / "core" / "errors.py"
    assert long_functions(probe) == []
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    fake = tmp_path / "probe.py"
    fake.write_text(f'def f():\n    """Doc."""\n{body}\n', encoding="utf-8")
    tree = ast.parse(fake.read_text(encoding="utf-8"))
    assert _body_lines(tree.body[0]) == 61  # type: ignore[arg-type]


def test_every_function_fits_on_a_screen() -> None:
    found = [row for path in MODULES for row in long_functions(path)]
    assert found == [], "split these where the concern changes:\n" + "\n".join(found)


def test_every_module_says_what_it_does() -> None:
    silent = [
        str(path.relative_to(PACKAGE))
        for path in MODULES
        if path.stat().st_size and ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) is None
    ]
    assert silent == [], f"give these a docstring naming their one concern: {silent}"


def test_no_line_is_packed_to_meet_a_budget() -> None:
    packed = [str(p.relative_to(PACKAGE)) for p in MODULES if "fmt: skip" in p.read_text(encoding="utf-8")]
    assert packed == [], f"format these normally (no `fmt: skip`): {packed}"
