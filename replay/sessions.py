"""Session consistency of a replay: one conversation, one candidate version (pure).

A session is the exchanges that share a ``session_key_hash`` (the salted hash of the
sticky-session header, :mod:`shadoweval.capture.sampling`; the capture sinks key Kafka records by
it,
so a session's turns share a partition). Its turns are replayed in capture order to one
target; every turn should meet the same candidate. Two things can break that even when
the run names one candidate (``shadoweval.application.runs.resolve_run`` refuses a resumed run with
another candidate name): a candidate endpoint that answers for another model mid-session
(a rolling deploy behind one URL), or workers of one run started against different
candidate identities.

:func:`candidate_version` is what a turn was replayed against: the model the response
reported (``response.model``), else the configured identity's name (the outcome's
``model``), so both kinds of change show. :class:`SessionVersionTracker` counts changes
as outcomes arrive (the Kafka worker, per process); :func:`session_versions` checks a
whole run afterwards from storage (all workers together).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from shadoweval.records import Exchange, ReplayOutcome, ReplayTarget

__all__ = [
    "SessionVersionChange",
    "SessionVersionTracker",
    "SessionVersions",
    "candidate_version",
    "session_versions",
]


def candidate_version(outcome: ReplayOutcome) -> str:
    """The version a turn was replayed against: the response's ``model`` when the target
    reported one, else the configured identity's ``model.name``."""
    reported = outcome.response.model if outcome.response is not None else None
    return reported or outcome.model.name


@dataclass(frozen=True, slots=True)
class SessionVersionChange:
    """One turn replayed against another version than its session's first turn.

    ``exchange_id``: that turn; ``first_version``: the version of the session's first
    replayed turn (in capture order); ``version``: this turn's.
    """

    session_key_hash: str
    target: ReplayTarget
    exchange_id: str
    first_version: str
    version: str


@dataclass(slots=True)
class SessionVersions:
    """A run's sessions and the turns that met another candidate version.

    ``sessions``: distinct ``(session_key_hash, target)`` with at least one replayed turn
    (exchanges without a session key are left out); ``multi_turn``: of those, the ones
    with two turns or more; ``changes``: every turn whose :func:`candidate_version`
    differs from its session's first, in capture order.
    """

    sessions: int = 0
    multi_turn: int = 0
    changes: list[SessionVersionChange] = field(default_factory=list)

    @property
    def consistent(self) -> bool:
        """Every session met one candidate version."""
        return not self.changes


def session_versions(pairs: Iterable[tuple[Exchange, ReplayOutcome]]) -> SessionVersions:
    """Check that each session's turns were replayed against one candidate version.

    Args:
        pairs: ``(exchange, outcome)`` of one run, any order (sorted here by
            ``(captured_at, exchange_id)``); skipped outcomes (``error_kind=skipped``,
            nothing sent) and outcomes without a response carry no reported model and
            count with their configured identity.

    Returns:
        The counts and the changes (:class:`SessionVersions`).
    """
    ordered = sorted(
        (p for p in pairs if p[0].session_key_hash is not None),
        key=lambda p: (p[0].captured_at, p[0].exchange_id),
    )
    turns: dict[tuple[str, ReplayTarget], int] = {}
    first: dict[tuple[str, ReplayTarget], str] = {}
    out = SessionVersions()
    for exchange, outcome in ordered:
        session = exchange.session_key_hash
        assert session is not None
        key = (session, outcome.target)
        version = candidate_version(outcome)
        turns[key] = turns.get(key, 0) + 1
        seen = first.setdefault(key, version)
        if seen != version:
            out.changes.append(
                SessionVersionChange(session, outcome.target, exchange.exchange_id, seen, version)
            )
    out.sessions = len(turns)
    out.multi_turn = sum(1 for n in turns.values() if n > 1)
    return out


class SessionVersionTracker:
    """The first candidate version each session met on this process, and the changes.

    Args:
        max_sessions: sessions remembered (least recently seen forgotten first), so
            memory stays bounded on an endless topic; a forgotten session starts afresh.

    Raises:
        ValueError: ``max_sessions`` < 1.
    """

    def __init__(self, max_sessions: int = 100_000) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions!r}")
        self.max_sessions = max_sessions
        self._first: OrderedDict[tuple[str, ReplayTarget], str] = OrderedDict()

    def observe(self, exchange: Exchange, outcome: ReplayOutcome) -> SessionVersionChange | None:
        """Note the version one replayed turn met; return the change when it differs from
        its session's first (``None`` for a first turn, a same version, or no session)."""
        session = exchange.session_key_hash
        if session is None:
            return None
        key = (session, outcome.target)
        version = candidate_version(outcome)
        seen = self._first.get(key)
        if seen is None:
            self._first[key] = version
            if len(self._first) > self.max_sessions:
                self._first.popitem(last=False)
            return None
        self._first.move_to_end(key)
        if seen == version:
            return None
        return SessionVersionChange(session, outcome.target, exchange.exchange_id, seen, version)
