"""The ``shadow-eval`` command line (Typer): the composition root.

Only this package builds :class:`~shadoweval.config.Settings`, configures logging and
wires components together. Each command group lives in its own module and registers
itself through a ``register(app)`` function; heavy imports happen inside the commands.

Exit status (:mod:`shadoweval.cli.exit_codes`): ``gate`` and ``evaluate`` exit 0/1/2 for
PROMOTE/HOLD/ROLLBACK; every usage error and unexpected failure exits 3.

Width in CI logs: when stdout is not a terminal and neither ``COLUMNS`` nor Typer's
``TERMINAL_WIDTH`` is set, ``--help`` is rendered :data:`~shadoweval.cli.render.CI_WIDTH`
columns wide (rich's default of 80 truncated option names: ``--baseline-repe…``), as are
the tables (:func:`shadoweval.cli.render.wide_console`). ``COLUMNS`` is honoured when set.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from shadoweval.cli.exit_codes import EXIT_ERROR

logger = logging.getLogger(__name__)


class ShadowEvalGroup(TyperGroup):
    """The root command group: maps every non-decision ending to exit status 3.

    Click exits 2 on a usage error (an unknown option, a missing one), which is the
    ROLLBACK status here; an unexpected exception would exit 1, the HOLD status. Both
    become 3, so CI never reads an error as a decision.
    """

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except typer.TyperException as exc:  # click's ClickException and UsageError
            exc.exit_code = EXIT_ERROR
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.TyperException as exc:
            exc.exit_code = EXIT_ERROR
            raise
        except (typer.Exit, typer.Abort):
            raise
        except BrokenPipeError:
            # The reader of stdout went away (``… | head``): nothing more can be shown, and
            # that is no crash. Point stdout at /dev/null so the interpreter's own flush at
            # exit does not raise again (the recipe of Python's signal module docs).
            with contextlib.suppress(OSError, ValueError):  # stdout may be no file (tests)
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(EXIT_ERROR) from None
        except Exception:
            logger.exception("shadow-eval failed unexpectedly")
            import traceback

            traceback.print_exc()
            raise typer.Exit(EXIT_ERROR) from None


def use_ci_width_for_help() -> None:
    """Render ``--help`` :data:`~shadoweval.cli.render.CI_WIDTH` columns wide when stdout is not a
    terminal and ``COLUMNS``/``TERMINAL_WIDTH`` are unset (Typer's rich help would use 80)."""
    if os.environ.get("COLUMNS") or os.environ.get("TERMINAL_WIDTH"):
        return
    isatty = getattr(sys.stdout, "isatty", None)
    if isatty is not None and isatty():
        return
    from typer import rich_utils

    from shadoweval.cli.render import CI_WIDTH

    if rich_utils.MAX_WIDTH is None:
        rich_utils.MAX_WIDTH = CI_WIDTH


use_ci_width_for_help()

app = typer.Typer(
    name="shadow-eval",
    cls=ShadowEvalGroup,
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
    "capture_cmd",
    "envoy_cmd",
    "api_cmd",
    "export_cmd",
    "labels_cmd",
    "judge_cmd",
    "canary_cmd",
    "dashboard_cmd",
)

for _name in _COMMAND_MODULES:
    importlib.import_module(f"shadoweval.cli.{_name}").register(app)


def main() -> None:
    """Console-script entry point."""
    app()
