"""The ``shadow-eval`` command line (Typer): the composition root.

Only this package builds :class:`~shadoweval.config.Settings`, configures logging and
wires components together. Each command group lives in its own module and registers
itself through a ``register(app)`` function; heavy imports happen inside the commands.

Exit status (:mod:`shadoweval.cli.exit_codes`): ``gate`` and ``evaluate`` exit 0/1/2 for
PROMOTE/HOLD/ROLLBACK; every usage error and unexpected failure exits 3.

Extras: ``pip install shadow-eval`` runs the live path only; a command whose extra is
missing (its heavy imports happen inside the command) prints which extra to install and
exits 3 (:mod:`shadoweval.cli.extras`).

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
from types import TracebackType
from typing import Any

import typer
from typer.core import TyperGroup

from shadoweval.cli.exit_codes import EXIT_ERROR
from shadoweval.cli.extras import missing_extra_message, require_modules

logger = logging.getLogger(__name__)


class ShadowEvalGroup(TyperGroup):
    """The root command group: maps every non-decision ending to exit status 3.

    Click exits 2 on a usage error (an unknown option, a missing one), which is the
    ROLLBACK status here; an unexpected exception would exit 1, the HOLD status. Both
    become 3, so CI never reads an error as a decision.
    """

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command ``cmd_name``; one that runs a program of an extra (``dashboard``:
        Streamlit) first checks that the program's package is installed."""
        return require_modules(super().get_command(ctx, cmd_name), cmd_name)

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
        except ModuleNotFoundError as exc:
            message = missing_extra_message(_command_path(ctx, exc.__traceback__), exc)
            if message is None:
                _report_unexpected()
            else:
                _print_missing_extra(message)
            raise typer.Exit(EXIT_ERROR) from None
        except Exception:
            _report_unexpected()
            raise typer.Exit(EXIT_ERROR) from None


def _report_unexpected() -> None:
    """Log and print the exception being handled (an unexpected failure: exit 3)."""
    logger.exception("shadow-eval failed unexpectedly")
    import traceback

    traceback.print_exc()


def _print_missing_extra(message: str) -> None:
    from rich.console import Console

    from shadoweval.cli.render import print_error

    print_error(Console(stderr=True, soft_wrap=True), message)


def _command_path(root: Any, tb: TracebackType | None) -> str:
    """``shadow-eval compare run``: the command that was running when ``tb`` was raised (the
    innermost click context on the traceback), named from the root down."""
    ctx = root
    while tb is not None:
        found = tb.tb_frame.f_locals.get("ctx")
        if found is not None and hasattr(found, "info_name") and hasattr(found, "parent"):
            ctx = found
        tb = tb.tb_next
    words: list[str] = []
    while ctx is not None and ctx.parent is not None:
        words.append(str(ctx.info_name))
        ctx = ctx.parent
    return " ".join(["shadow-eval", *reversed(words)])


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
