"""``shadow-eval db upgrade|check|current`` through Typer's CliRunner."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
import typer
from typer.testing import CliRunner

from shadoweval.cli.db_cmd import register
from shadoweval.storage import Database, head_revision


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False)

    @app.callback()
    def _root() -> None:
        """A root like shadowevals's, with other groups beside ``db``."""

    register(app)
    return app


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def test_upgrade_then_check_then_current(app: typer.Typer, runner: CliRunner, url: str) -> None:
    result = runner.invoke(app, ["db", "check", "--database-url", url])
    assert result.exit_code == 1
    assert "is at revision none (empty database), expected head" in result.stderr
    assert "run `shadow-eval db upgrade`" in result.stderr

    result = runner.invoke(app, ["db", "current", "--database-url", url])
    assert result.exit_code == 0, result.output
    assert "none (empty database) (behind head" in result.stdout

    result = runner.invoke(app, ["db", "upgrade", "--database-url", url])
    assert result.exit_code == 0, result.output
    assert f"upgraded empty -> {head_revision()}" in result.stdout

    result = runner.invoke(app, ["db", "upgrade", "--database-url", url])
    assert result.exit_code == 0, result.output
    assert "already at" in result.stdout

    result = runner.invoke(app, ["db", "check", "--database-url", url])
    assert result.exit_code == 0, result.output
    assert "schema is current" in result.stdout

    result = runner.invoke(app, ["db", "current", "--database-url", url])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"{head_revision()} (head)"


def test_check_fails_on_drift(app: typer.Typer, runner: CliRunner, url: str) -> None:
    assert runner.invoke(app, ["db", "upgrade", "--database-url", url]).exit_code == 0
    with Database(url) as db, db.connect() as conn:
        conn.execute(sa.text("DROP INDEX ix_run_status"))
    result = runner.invoke(app, ["db", "check", "--database-url", url])
    assert result.exit_code == 1
    assert "differs from the models (1 difference(s))" in result.stderr
    assert "ix_run_status" in result.stderr


def test_url_comes_from_the_environment(
    app: typer.Typer, runner: CliRunner, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHADOWEVAL_DATABASE__URL", url)
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    with Database(url) as db:
        assert db.current_revision() == head_revision()


def test_default_url_is_a_sqlite_file_in_the_working_directory(
    app: typer.Typer, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert "sqlite:///shadow-eval.db" in result.stdout
    assert (tmp_path / "shadow-eval.db").is_file()


def test_unreachable_database_exits_2(app: typer.Typer, runner: CliRunner) -> None:
    url = "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2"
    for command in ("check", "current", "upgrade"):
        result = runner.invoke(app, ["db", command, "--database-url", url])
        assert result.exit_code == 2, result.output
        assert "database operation failed" in result.stderr
    result = runner.invoke(app, ["db", "upgrade", "--database-url", "bogus://"])
    assert result.exit_code == 2
    assert "cannot open database" in result.stderr


def test_failed_migration_exits_1(app: typer.Typer, runner: CliRunner, url: str) -> None:
    result = runner.invoke(app, ["db", "upgrade", "--database-url", url, "--revision", "9999"])
    assert result.exit_code == 1
    assert "cannot upgrade" in result.stderr


def test_db_without_subcommand_shows_help(app: typer.Typer, runner: CliRunner) -> None:
    result = runner.invoke(app, ["db"])
    assert "upgrade" in result.output
    assert "check" in result.output
    assert "current" in result.output
