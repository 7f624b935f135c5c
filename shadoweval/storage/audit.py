"""The policy audit log: who created, used or was refused a run's frozen gate policy.

A run is judged under one policy, frozen and hashed when the run is created (DESIGN §1:
"numbers written before the run starts"). The audit log shows that this held: one
``created`` row per run (written with the run, in the same transaction), a ``used`` row
each time a command applied the run's policy, and a ``refused`` row with both hashes each
time a command presented a different one. Rows are append-only. Use it through
:class:`~shadoweval.storage.repository.Repository`.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from datetime import datetime

from pydantic import JsonValue
from sqlalchemy import select
from sqlalchemy.orm import Session

from shadoweval.records import same_named, utc_now
from shadoweval.storage.database import Database
from shadoweval.storage.models import PolicyAuditRow
from shadoweval.storage.types import PolicyAuditAction, PolicyAuditEntry


def current_actor() -> str:
    """The OS user name of this process (``uid:<n>`` when no name can be found).

    ``getpass.getuser`` reads ``LOGNAME``/``USER``/``LNAME``/``USERNAME``, then the
    password database; a container user without an entry there has no name.
    """
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no env variable and no passwd entry
        getuid = getattr(os, "getuid", None)
        return f"uid:{getuid()}" if getuid is not None else "unknown"


def audit_row(
    *,
    run_id: str,
    policy_hash: str,
    action: PolicyAuditAction,
    command: str,
    actor: str | None = None,
    detail: Mapping[str, JsonValue] | None = None,
    recorded_at: datetime | None = None,
) -> PolicyAuditRow:
    """An unsaved ``policy_audit`` row (``actor`` defaults to :func:`current_actor`)."""
    return PolicyAuditRow(
        run_id=run_id,
        policy_hash=policy_hash,
        recorded_at=recorded_at or utc_now(),
        action=PolicyAuditAction(action).value,
        command=command,
        actor=actor if actor is not None else current_actor(),
        detail=dict(detail or {}),
    )


def add_audit_row(session: Session, row: PolicyAuditRow) -> int:
    """Add ``row`` in ``session`` (the caller's transaction) and return its id."""
    session.add(row)
    session.flush()
    return row.id


_AUDIT_FIELDS = ("id", "run_id", "policy_hash", "recorded_at", "command", "actor")
"""The audit row's columns a :class:`PolicyAuditEntry` holds as they are."""


def audit_entry(row: PolicyAuditRow) -> PolicyAuditEntry:
    """The :class:`PolicyAuditEntry` of a ``policy_audit`` row."""
    return PolicyAuditEntry(
        **same_named(row, _AUDIT_FIELDS),
        action=PolicyAuditAction(row.action),
        detail=dict(row.detail),
    )


class PolicyAuditLog:
    """Append to and read the policy audit log (a mixin of ``Repository``)."""

    _db: Database

    def record_policy_audit(
        self,
        *,
        run_id: str,
        policy_hash: str,
        action: PolicyAuditAction | str,
        command: str,
        actor: str | None = None,
        detail: Mapping[str, JsonValue] | None = None,
        recorded_at: datetime | None = None,
    ) -> int:
        """Append one audit row and return its id.

        Args:
            run_id: the run whose policy was created, used or refused.
            policy_hash: the hash the command presented.
            action: ``created``, ``used`` or ``refused``.
            command: what asked (``"shadow-eval gate"``).
            actor: who asked; the OS user of this process by default.
            detail: free JSON (for ``refused``: ``run_policy_hash`` and
                ``presented_policy_hash``).
            recorded_at: timezone-aware time; now (UTC) by default.

        Raises:
            ValueError: ``action`` is not a :class:`PolicyAuditAction`.
            StorageError: e.g. the run does not exist, or ``recorded_at`` is naive.
        """
        row = audit_row(
            run_id=run_id,
            policy_hash=policy_hash,
            action=PolicyAuditAction(action),
            command=command,
            actor=actor,
            detail=detail,
            recorded_at=recorded_at,
        )
        with self._db.session() as session:
            return add_audit_row(session, row)

    def policy_audit(self, run_id: str) -> list[PolicyAuditEntry]:
        """Return the run's audit rows, oldest first (by ``recorded_at``, then id).

        An unknown run has an empty log.
        """
        stmt = (
            select(PolicyAuditRow)
            .where(PolicyAuditRow.run_id == run_id)
            .order_by(PolicyAuditRow.recorded_at, PolicyAuditRow.id)
        )
        with self._db.session() as session:
            return [audit_entry(row) for row in session.scalars(stmt)]
