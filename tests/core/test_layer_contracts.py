"""The import-linter contracts cover every package the wheel ships (docs/design.md §2).

``make layers`` checks the contracts; this test checks that a new top-level package cannot
slip past them: each one the wheel includes must be a root package of the checks, sit in a
layer of the layers contract (or, for ``migrations``, have contracts of its own), and be
covered by the cycle check.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


def _shipped_packages(config: dict[str, Any]) -> set[str]:
    patterns = config["tool"]["setuptools"]["packages"]["find"]["include"]
    return {pattern.rstrip("*") for pattern in patterns}


def _contract(config: dict[str, Any], contract_id: str) -> dict[str, Any]:
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["id"] == contract_id]
    return contract


def test_every_shipped_package_is_checked() -> None:
    config = _pyproject()
    shipped = _shipped_packages(config)
    roots = set(config["tool"]["importlinter"]["root_packages"])
    assert shipped <= roots, f"packages the contracts never read: {sorted(shipped - roots)}"


def test_every_shipped_package_has_a_layer_and_no_cycles() -> None:
    config = _pyproject()
    shipped = _shipped_packages(config) - {"migrations"}
    layered = {
        name.strip().split(".")[0]
        for layer in _contract(config, "layers")["layers"]
        for name in layer.split("|")
    }
    assert shipped <= layered, f"packages in no layer: {sorted(shipped - layered)}"
    acyclic = set(_contract(config, "no-cycles")["ancestors"])
    assert shipped <= acyclic, f"packages the cycle check skips: {sorted(shipped - acyclic)}"


def test_every_top_level_package_in_the_tree_is_shipped() -> None:
    shipped = _shipped_packages(_pyproject())
    on_disk = {
        path.parent.name
        for path in ROOT.glob("*/__init__.py")
        if path.parent.name not in {"tests", "benchmarks"}
    }
    assert on_disk <= shipped, f"packages in the tree the wheel leaves out: {on_disk - shipped}"
