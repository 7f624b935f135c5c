"""Option groups: Typer sees a group's fields one by one; the command gets the group."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from shadoweval.cli.option_groups import option_group, takes_option_groups

NameOpt = Annotated[str, typer.Option("--name", help="A name.")]
CountOpt = Annotated[int, typer.Option("--count", help="A count.")]
LoudOpt = Annotated[bool, typer.Option("--loud/--quiet", help="Loud or not.")]


@option_group
@dataclass(frozen=True)
class Greeting:
    name: NameOpt
    count: CountOpt = 1


def test_the_group_spreads_in_place_and_gathers_back() -> None:
    seen: list[tuple[Greeting, bool]] = []

    @takes_option_groups
    def greet(greeting: Greeting, loud: LoudOpt = False) -> None:
        """Greet."""
        seen.append((greeting, loud))

    assert list(inspect.signature(greet).parameters) == ["name", "count", "loud"]
    assert greet.__doc__ == "Greet."
    app = typer.Typer()
    app.command("greet")(greet)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["greet", "--name", "x", "--count", "3", "--loud"])
    assert result.exit_code == 0, result.output
    assert seen == [(Greeting(name="x", count=3), True)]
    help_text = CliRunner().invoke(app, ["greet", "--help"]).output
    assert help_text.index("--name") < help_text.index("--count") < help_text.index("--loud")


def test_a_repeated_name_is_refused() -> None:
    def clash(greeting: Greeting, name: NameOpt = "y") -> None:
        """Clash."""

    with pytest.raises(TypeError, match="repeats a parameter name"):
        takes_option_groups(clash)


def test_only_a_dataclass_is_a_group() -> None:
    with pytest.raises(TypeError, match="not a dataclass"):
        option_group(int)


def test_exit_on_error_prints_the_error_and_exits_3() -> None:
    from rich.console import Console

    from shadoweval.cli.render import exit_on_error
    from shadoweval.errors import ConfigError

    app = typer.Typer()

    @app.command("fail")
    def fail(kind: str) -> None:
        """Fail."""
        with exit_on_error(Console(stderr=True, soft_wrap=True), FileNotFoundError):
            if kind == "config":
                raise ConfigError("--x 'y': bad [value]", field="--x", value="y")
            if kind == "missing":
                raise FileNotFoundError("no such file: a.csv")
            raise KeyError(kind)

    @app.command("other")
    def other() -> None:
        """Another command, so that ``fail`` is a subcommand."""

    runner = CliRunner()
    config = runner.invoke(app, ["fail", "config"])
    assert (config.exit_code, config.output) == (3, "error: --x 'y': bad [value]\n")
    missing = runner.invoke(app, ["fail", "missing"])
    assert (missing.exit_code, missing.output) == (3, "error: no such file: a.csv\n")
    other_error = runner.invoke(app, ["fail", "other"])
    assert isinstance(other_error.exception, KeyError)  # not an error it was told of
