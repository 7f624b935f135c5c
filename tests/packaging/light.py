"""What the light install (``pip install shadow-eval``, no extra) must run without.

The live path — ``capture serve``, ``capture envoy``, ``replay run``, ``mock-llm`` — may not
import the evaluator's weight; the extras of ``pyproject.toml`` bring it (docs/deploy.md,
"Images and extras"). Shared by the fast import-closure checks (in this checkout's full
venv) and the slow light-venv test (a wheel installed with its base dependencies only).
"""

from __future__ import annotations

HEAVY_PACKAGES: tuple[str, ...] = (
    "torch",
    "sentence_transformers",
    "transformers",
    "onnx",
    "onnxruntime",
    "streamlit",
    "statsmodels",
    "scipy",
    "pandas",
    "pyarrow",
    "jsonschema",
)
"""Top-level import names the light commands never import (the issue's six, and what the
extras bring with them)."""

LIGHT_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("capture", "serve"),
    ("capture", "envoy"),
    ("capture", "envoy-config"),
    ("replay", "run"),
    ("mock-llm",),
)
"""The commands the light install runs."""

LIGHT_MODULES: tuple[str, ...] = (
    "shadoweval.cli",
    "shadoweval.cli.evaluate_cmd",
    "shadoweval.application.capture",
    "shadoweval.application.envoy_front",
    "shadoweval.application.replaying",
    "shadoweval.application.runs",
    "shadoweval.application.run_policy",
    "shadoweval.application.mock_llm",
    "shadoweval.application.importing",
    "shadoweval.capture.sidecar",
    "shadoweval.capture.envoy_front",
    "shadoweval.capture.canary_split",
    "shadoweval.capture.session_router",
    "shadoweval.capture.router_process",
    "shadoweval.replay.runner",
    "shadoweval.replay.kafka_worker",
    "shadoweval.simulation.mock_llm",
    "shadoweval.tables",
    "shadoweval.stats.policy",
)
"""The modules those commands import when they run (inside the command functions)."""

CLOSURE_SCRIPT = """
import sys, traceback
heavy = set(sys.argv[1].split(","))
modules = sys.argv[2].split(",")
commands = [c.split() for c in sys.argv[3].split(",") if c.strip()]
first = {}


class Watch:
    # Records who imports a heavy package first; the import itself goes on as usual.
    def find_spec(self, name, path=None, target=None):
        # A heavy name is a top-level package ("scipy") or a dotted prefix ("shadoweval.stats").
        top = next((h for h in heavy if name == h or name.startswith(h + ".")), None)
        if top is not None and top not in first:
            stack = traceback.extract_stack()[:-1]
            first[top] = " <- ".join(
                f"{'/'.join(f.filename.rsplit('/', 2)[-2:])}:{f.lineno}"
                for f in reversed(stack) if "shadoweval" in f.filename or "/tests/" in f.filename
            ) or "?"
        return None


sys.meta_path.insert(0, Watch())
import contextlib, importlib, io
from shadoweval.cli import app
for command in commands:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        app([*command, "--help"], prog_name="shadow-eval", standalone_mode=False)
for module in modules:
    importlib.import_module(module)
found = sorted(p for p in heavy if p in sys.modules)
for p in found:
    print(p, "imported by", first.get(p, "?"))
sys.exit(1 if found else 0)
"""
"""Run with ``python -c``: argv = heavy packages (top-level names or dotted prefixes such as
``shadoweval.stats``), modules, commands (comma-separated);
exit 0 when none of the heavy packages was imported, else 1 with each one's first importer."""
