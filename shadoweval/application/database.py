"""Opening the results database for a command, a request or a dashboard session.

Every face opens storage through :func:`open_repository`, so all of them refuse exactly
what the reading commands refuse (a missing SQLite file, a schema behind head).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shadoweval.config import BodyRedactionSettings
from shadoweval.storage import Database, Repository, require_existing_sqlite


@contextmanager
def open_repository(
    database_url: str,
    *,
    upgrade: bool = True,
    body_redaction: BodyRedactionSettings | None = None,
) -> Iterator[Repository]:
    """Open the database (migrating it to head first when ``upgrade``) and yield a repository.

    ``body_redaction``: the rules replay outcomes pass before they are stored (the capture
    sidecar's, ``settings.capture.body_redaction``; the default rules when ``None``).

    Without ``upgrade`` the database must already exist at the current schema: reading
    commands (``compare``, ``gate``) never create an empty SQLite file by accident.

    Raises:
        StorageError: the database cannot be reached, does not exist, or is behind and
            ``upgrade`` is false.
    """
    if not upgrade:
        require_existing_sqlite(database_url)
    db = Database(database_url)
    try:
        if upgrade:
            db.upgrade()
        else:
            db.check_schema()
        yield Repository(db, body_redaction=body_redaction)
    finally:
        db.dispose()
