"""The import-linter contracts cover every module the wheel ships (docs/design.md §2).

``make layers`` checks the contracts; this test checks that nothing can slip past them: the
wheel ships one import name, ``shadoweval``, which is the root of the checks; every module
directly under it sits in exactly one layer of the layers contract (import-linter ignores a
module that is in no layer, so a new module must be placed); the cycle check covers it; and
every package folder at the repository's top (the specification's stage folders) is linked
into the namespace, so none is shipped or checked under a second name.
"""

from __future__ import annotations

import pkgutil
import re
import tomllib
from pathlib import Path
from typing import Any

import shadoweval

ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


def _contract(config: dict[str, Any], contract_id: str) -> dict[str, Any]:
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["id"] == contract_id]
    return contract


def test_one_import_name_is_shipped_and_checked() -> None:
    config = _pyproject()
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["shadoweval*"]
    assert "shadoweval" in config["tool"]["importlinter"]["root_packages"]
    assert _contract(config, "no-cycles")["ancestors"] == ["shadoweval"]


def test_every_module_of_the_namespace_is_in_exactly_one_layer() -> None:
    layers = _contract(_pyproject(), "layers")
    assert layers["containers"] == ["shadoweval"]
    placed = [name for layer in layers["layers"] for name in re.split(r"\s*[|:]\s*", layer.strip())]
    children = {info.name for info in pkgutil.iter_modules(shadoweval.__path__)}
    assert len(placed) == len(set(placed)), f"placed twice: {placed}"
    assert set(placed) == children, (
        f"in no layer: {sorted(children - set(placed))}; "
        f"in a layer but not in shadoweval: {sorted(set(placed) - children)}"
    )


def test_every_top_level_package_folder_is_linked_into_the_namespace() -> None:
    on_disk = {
        path.parent.name
        for path in ROOT.glob("*/__init__.py")
        if path.parent.name not in {"tests", "benchmarks", "shadoweval"}
    }
    assert on_disk >= {"capture", "replay", "compare", "stats", "dashboard", "migrations"}
    for stage in sorted(on_disk):
        link = ROOT / "shadoweval" / stage
        assert link.is_symlink(), f"{stage}/ is not linked as shadoweval/{stage} -> ../{stage}"
        assert link.resolve() == (ROOT / stage).resolve()
