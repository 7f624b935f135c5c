"""A pytest plugin that records every verdict the suite computes, for refactor checks.

``SHADOWEVAL_VERDICT_SNAPSHOT=out.jsonl pytest -p tests.verdict_snapshot tests/stats ...``
appends one JSON line per shadow-gate verdict (:func:`shadoweval.stats.gate.evaluate_gate`)
and per canary step verdict (:func:`shadoweval.stats.canary.verdict.step_verdict`), keyed by
the test's node id and the call's index within it. Two snapshots of the same tests, before
and after a refactor, must be equal line for line (``diff`` them): the gate's verdict as
its full JSON (but ``decided_at``, which is the clock's), the canary's as its stored JSON
form (``StepVerdict.to_json``).
Without the variable the plugin does nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# Taken out of the environment at once: the settings refuse an unknown SHADOWEVAL_ variable.
_PATH = os.environ.pop("SHADOWEVAL_VERDICT_SNAPSHOT", None)
_current: dict[str, Any] = {"node": "(collection)", "index": 0}


def _json(value: Any) -> Any:
    if hasattr(value, "to_json"):  # the canary step verdict (a pydantic record): its stored form
        return value.to_json()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return repr(value)


def _record(kind: str, verdict: Any) -> None:
    assert _PATH is not None
    _current["index"] += 1
    body = _json(verdict)
    if isinstance(body, dict) and "decided_at" in body:
        body["decided_at"] = "(decided_at)"  # the clock's, where a test leaves it unset
    line = {"node": _current["node"], "i": _current["index"], "kind": kind, "v": body}
    with open(_PATH, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, sort_keys=True, default=str) + "\n")


def _wrap(kind: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        verdict = function(*args, **kwargs)
        _record(kind, verdict)
        return verdict

    # functools.wraps gives the wrapper the original's module and qualified name, so pickle
    # (the scoring and gate steps that cross process boundaries) finds it by that name.
    return functools.wraps(function)(wrapper)


def _install() -> None:
    """Wrap the two verdict functions before any test module or conftest binds them."""
    import shadoweval.stats.canary.verdict as canary
    import shadoweval.stats.gate as gate

    wrapped = {
        id(gate.evaluate_gate): _wrap("gate", gate.evaluate_gate),
        id(canary.step_verdict): _wrap("canary", canary.step_verdict),
    }
    # Modules loaded with the stats package already hold the originals by name: swap them too.
    for module in list(sys.modules.values()):
        for name, value in list(vars(module).items()) if module is not None else ():
            if callable(value) and id(value) in wrapped:
                setattr(module, name, wrapped[id(value)])


if _PATH is not None:
    _install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    _current["node"] = item.nodeid
    _current["index"] = 0
    return (yield)
