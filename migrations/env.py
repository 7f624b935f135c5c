"""Alembic environment of shadow-eval.

Three ways in:

* **In-process** (``shadow-eval db upgrade``, :meth:`Database.upgrade`): the caller builds
  the :class:`~alembic.config.Config` in code and passes an open connection in
  ``config.attributes["connection"]``; migrations run on it, inside its transaction.
* **Online from the ``alembic`` command** (developers, with the repo-root ``alembic.ini``):
  the URL is ``-x url=...`` or ``sqlalchemy.url``; a ``NullPool`` engine is used.
* **Offline** (``alembic upgrade head --sql``): SQL is written for the URL's dialect.

Logging: ``fileConfig`` runs only when an ini file is in use, and with
``disable_existing_loggers=False``, so running migrations in-process never silences the
application's loggers.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from shadoweval.storage.models import Base

DEFAULT_URL = "sqlite:///shadow-eval.db"

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    return (
        context.get_x_argument(as_dictionary=True).get("url")
        or config.get_main_option("sqlalchemy.url")
        or DEFAULT_URL
    )


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )


def run_migrations_offline() -> None:
    """Write the migration SQL for the configured URL's dialect."""
    url = _url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run migrations on the passed-in connection, or on a fresh ``NullPool`` engine."""
    connection = config.attributes.get("connection")
    if isinstance(connection, Connection):
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as fresh:
            _configure(fresh)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
