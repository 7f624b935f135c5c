"""The ``shadow-eval`` command line (Typer): the composition root.

Only this package builds :class:`~shadoweval.config.Settings`, configures logging and
wires components together. Each command group lives in its own module and registers
itself through a ``register(app)`` function; heavy imports happen inside the commands.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="shadow-eval",
    help="Shadow evaluation of LLM upgrades: capture, replay, compare, gate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_COMMAND_MODULES: tuple[str, ...] = (
    "db_cmd",
    "import_cmd",
    "mock_llm_cmd",
    "replay_cmd",
    "compare_cmd",
    "gate_cmd",
    "evaluate_cmd",
    "demo_cmd",
)

for _name in _COMMAND_MODULES:
    importlib.import_module(f"shadoweval.cli.{_name}").register(app)


def main() -> None:
    """Console-script entry point."""
    app()
