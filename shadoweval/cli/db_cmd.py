"""``shadow-eval db``: create, upgrade and check the results database.

Commands:

* ``db upgrade [--database-url URL] [--revision REV]``: run migrations to head (or REV).
* ``db check [--database-url URL]``: exit 1 when the schema is behind head or differs
  from the models (an ``alembic check`` equivalent); exit 0 when it is current.
* ``db current [--database-url URL]``: print the database's revision and the head.

The URL defaults to ``SHADOWEVAL_DATABASE__URL``, else ``sqlite:///shadow-eval.db``
(read through :class:`~shadoweval.config.Settings`). Exit codes: 0 success; 1 the schema
is behind or drifted (``check``) or a migration failed (``upgrade``); 2 the database could
not be opened or reached, or the settings are invalid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from shadoweval.storage import Database

EXIT_OK = 0
EXIT_SCHEMA = 1
EXIT_ERROR = 2

DatabaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="SQLAlchemy URL; default SHADOWEVAL_DATABASE__URL, else sqlite:///shadow-eval.db.",
        show_default=False,
    ),
]


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


def _open(database_url: str | None) -> Database:
    from pydantic import ValidationError

    from shadoweval.config import Settings
    from shadoweval.errors import ShadowEvalError
    from shadoweval.storage import Database

    try:
        settings = Settings().database
    except ValidationError as exc:
        raise _fail(f"invalid settings: {exc}", EXIT_ERROR) from exc
    url = database_url or settings.url
    try:
        return Database(url, echo=settings.echo)
    except ShadowEvalError as exc:
        raise _fail(str(exc), EXIT_ERROR) from exc


def upgrade(
    database_url: DatabaseUrlOption = None,
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
) -> None:
    """Create or upgrade the database schema (Alembic migrations, in-process)."""
    from shadoweval.errors import StorageError
    from shadoweval.storage import head_revision

    db = _open(database_url)
    try:
        try:
            before = db.current_revision()
        except StorageError as exc:
            raise _fail(str(exc), EXIT_ERROR) from exc
        try:
            db.upgrade(revision)
            after = db.current_revision()
            target = head_revision() if revision == "head" else revision
        except StorageError as exc:
            raise _fail(str(exc), EXIT_SCHEMA) from exc
    finally:
        db.dispose()
    if before == after:
        typer.echo(f"{db.safe_url}: already at {after} (target {target})")
    else:
        typer.echo(f"{db.safe_url}: upgraded {before or 'empty'} -> {after}")


def check(database_url: DatabaseUrlOption = None) -> None:
    """Exit 1 when the schema is behind head or differs from the models."""
    from shadoweval.errors import StorageError

    db = _open(database_url)
    try:
        try:
            db.current_revision()  # reachable? (an unreachable database is exit 2, not 1)
        except StorageError as exc:
            raise _fail(str(exc), EXIT_ERROR) from exc
        try:
            db.check_schema()
        except StorageError as exc:
            raise _fail(str(exc), EXIT_SCHEMA) from exc
        try:
            diffs = db.schema_diff()
        except StorageError as exc:
            raise _fail(str(exc), EXIT_ERROR) from exc
    finally:
        db.dispose()
    if diffs:
        lines = "\n".join(f"  {d}" for d in diffs)
        raise _fail(
            f"database at {db.safe_url} differs from the models "
            f"({len(diffs)} difference(s)):\n{lines}",
            EXIT_SCHEMA,
        )
    typer.echo(f"{db.safe_url}: schema is current")


def current(database_url: DatabaseUrlOption = None) -> None:
    """Print the database's revision and the head revision."""
    from shadoweval.errors import StorageError
    from shadoweval.storage import head_revision

    db = _open(database_url)
    try:
        revision = db.current_revision()
        head = head_revision()
    except StorageError as exc:
        raise _fail(str(exc), EXIT_ERROR) from exc
    finally:
        db.dispose()
    state = "head" if revision == head else f"behind head {head}"
    typer.echo(f"{revision or 'none (empty database)'} ({state})")


def register(app: typer.Typer) -> None:
    """Add the ``db`` command group to ``app``."""
    db_app = typer.Typer(
        name="db",
        help="Create, upgrade and check the results database.",
        no_args_is_help=True,
    )
    db_app.command("upgrade")(upgrade)
    db_app.command("check")(check)
    db_app.command("current")(current)
    app.add_typer(db_app, name="db")
