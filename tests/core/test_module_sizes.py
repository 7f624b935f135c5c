"""Modules and functions that fit on a screen (issue 28; docs/design.md §3, "Sizes").

Every product module (each file the wheel ships, at its real path) has at most 600 lines and
every function or method at most 100 lines, counted from its ``def`` (decorators excluded) to
its last line. The exceptions are named in :data:`EXCEPTIONS` with their reason, and each must
also be named in docs/design.md; an exception that no longer needs to be one fails too, so the
list cannot go stale.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE_LINES_MAX = 600
FUNCTION_LINES_MAX = 100

# "path" (a module) or "path:qualified.function" → why it may be longer.
EXCEPTIONS: dict[str, str] = {
    "migrations/versions/0001_initial.py:upgrade": (
        "a released migration is history: rewriting it would change what upgraded databases ran"
    ),
}


def _product_files() -> list[Path]:
    """Every .py file under shadoweval/, at its real path (the stage links resolved), once."""
    seen: dict[Path, None] = {}
    for folder, _dirs, files in os.walk(ROOT / "shadoweval", followlinks=True):
        for file in sorted(files):
            if file.endswith(".py"):
                seen.setdefault((Path(folder) / file).resolve(), None)
    return sorted(seen)


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int]]:
    """(qualified name, lines) of every function and method in ``tree``."""
    found: list[tuple[str, int]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            found.append((prefix + node.name, node.end_lineno - node.lineno + 1))
            found += _functions(node, prefix + node.name + ".")
        elif isinstance(node, ast.ClassDef):
            found += _functions(node, prefix + node.name + ".")
        else:
            found += _functions(node, prefix)
    return found


def _oversized() -> dict[str, int]:
    over: dict[str, int] = {}
    for path in _product_files():
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines > MODULE_LINES_MAX:
            over[_name(path)] = lines
        for function, length in _functions(ast.parse(text)):
            if length > FUNCTION_LINES_MAX:
                over[f"{_name(path)}:{function}"] = length
    return over


def test_no_module_over_600_lines_and_no_function_over_100() -> None:
    over = _oversized()
    unexcused = {place: n for place, n in over.items() if place not in EXCEPTIONS}
    assert not unexcused, (
        f"over {MODULE_LINES_MAX} lines a module or {FUNCTION_LINES_MAX} a function "
        f"(split by concept, or name the exception with its reason here and in "
        f"docs/design.md): {unexcused}"
    )
    stale = sorted(set(EXCEPTIONS) - set(over))
    assert not stale, f"exceptions that fit now, remove them: {stale}"


def test_every_exception_is_named_in_the_design() -> None:
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    missing = [place for place in EXCEPTIONS if place not in design]
    assert not missing, f"name these exceptions in docs/design.md with their reason: {missing}"
