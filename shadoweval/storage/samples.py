"""Samples: a run's pairs for people to read, filtered and paged (dashboard, export).

A :class:`Sample` is one pair as an analyst sees it: the request, both answers, the
similarity and the pair's flags, and its latest human label. :class:`SampleStore` (mixed
into :class:`~shadoweval.storage.repository.Repository`) pages through the pairs of a run
matching a :class:`SampleFilter` in a fixed order:

1. pairs **without** similarity (an error on either side), by ``exchange_id`` — only
   when the filter sets no similarity bound;
2. pairs with similarity, by ``(similarity ascending, exchange_id)`` (most divergent
   first).

Paging is keyset pagination (Markus Winand, "Paging Through Results", use-the-index-luke):
a :class:`SampleCursor` holds the phase and the last ``(similarity, exchange_id)`` shown,
and the next page starts strictly after it on the ``pair_score`` paging indexes — never
``OFFSET`` — so page 4,000 of a run with 200,000 pairs costs what page 1 costs. A page
reads its pair-score keys first (id, similarity, flags), then the JSON records of just
those pairs.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import orjson
from sqlalchemy import ColumnElement, Row, select
from sqlalchemy.orm import Session

from shadoweval.errors import InvalidDataError, RecordDecodeError, StorageError
from shadoweval.pair_flags import PairFlag, flags_from_mask, flags_mask
from shadoweval.records import (
    PAIR_KEY_FIELDS,
    STORED,
    CapturedTokens,
    Exchange,
    HumanLabel,
    PairScore,
    ReplayOutcome,
    ToolCall,
    same_named,
)
from shadoweval.storage import queries
from shadoweval.storage import rows as rows_
from shadoweval.storage.database import Database
from shadoweval.storage.models import PairScoreRow

__all__ = ["Sample", "SampleCursor", "SampleFilter", "SamplePage", "SampleStore"]

_IN_CHUNK = 500
"""Exchange ids per ``IN (...)`` list when reading records by id."""

_TOKEN_VERSION = 1
_SHOWN_TOKEN_CHARS = 80

_SCORE_FIELDS = (*PAIR_KEY_FIELDS, "captured_at", "noise_similarity")
"""What a :class:`Sample` takes from the pair's score under the same name."""


@dataclass(frozen=True)
class SampleFilter:
    """Which pairs of a run to show.

    * ``task_types``: only these task types (empty: all);
    * ``flags``: the pair has **all** of these :class:`~shadoweval.pair_flags.PairFlag`
      (empty: no condition);
    * ``min_similarity`` / ``max_similarity``: inclusive bounds on the cosine similarity;
      when either is set, pairs without similarity are excluded.

    Sequences given as lists are stored as tuples and flag strings as :class:`PairFlag`,
    so a filter is hashable (a cache key).

    Raises:
        InvalidDataError: (a ``ValueError``) an unknown flag, a bound that is NaN, or
            ``min_similarity > max_similarity``; the message names the fields and values.
    """

    task_types: tuple[str, ...] = ()
    flags: tuple[PairFlag, ...] = ()
    min_similarity: float | None = None
    max_similarity: float | None = None

    def __post_init__(self) -> None:
        flags_mask(self.flags)  # names an unknown flag
        object.__setattr__(self, "task_types", tuple(self.task_types))
        object.__setattr__(self, "flags", tuple(PairFlag(f) for f in self.flags))
        for name in ("min_similarity", "max_similarity"):
            value = getattr(self, name)
            if value is not None and math.isnan(value):
                raise InvalidDataError(
                    f"SampleFilter.{name} is NaN; give a number or None", name=name, count=1
                )
        low, high = self.min_similarity, self.max_similarity
        if low is not None and high is not None and low > high:
            raise InvalidDataError(
                f"SampleFilter.min_similarity={low} is greater than max_similarity={high}",
                name="min_similarity",
                count=1,
            )

    @property
    def has_similarity_bound(self) -> bool:
        """True when a similarity bound is set (pairs without similarity are excluded)."""
        return self.min_similarity is not None or self.max_similarity is not None

    @property
    def flags_mask(self) -> int:
        """Bitmask of :attr:`flags` (``pair_score.flags`` bits)."""
        return flags_mask(self.flags)


@dataclass(frozen=True)
class SampleCursor:
    """Opaque keyset position: where the next page starts (strictly after this pair).

    ``phase`` is ``"no_similarity"`` (the first phase, by ``exchange_id``) or
    ``"similarity"`` (by ``(similarity, exchange_id)``); ``similarity`` is ``None`` in the
    first phase. Pass it back as ``after=``, or carry it as text with :meth:`to_token` /
    :meth:`from_token` (URL-safe base64 of a small JSON object).
    """

    phase: Literal["no_similarity", "similarity"]
    exchange_id: str
    similarity: float | None = None

    def to_token(self) -> str:
        """Return the cursor as a URL-safe token (no padding)."""
        payload: dict[str, object] = {"v": _TOKEN_VERSION, "p": self.phase, "e": self.exchange_id}
        if self.similarity is not None:
            payload["s"] = self.similarity
        raw = orjson.dumps(payload)
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    @classmethod
    def from_token(cls, token: str) -> SampleCursor:
        """Parse a token made by :meth:`to_token`.

        Raises:
            RecordDecodeError: (reason ``invalid_cursor``) the token is not one; the
                message names the token (cut to 80 characters).
        """
        shown = token if len(token) <= _SHOWN_TOKEN_CHARS else token[:_SHOWN_TOKEN_CHARS] + "…"
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            payload = orjson.loads(raw)
        except (binascii.Error, ValueError) as exc:
            raise RecordDecodeError(
                f"invalid sample cursor token {shown!r}: {exc}", reason="invalid_cursor"
            ) from exc
        return cls._from_payload(payload, shown)

    @classmethod
    def _from_payload(cls, payload: Any, shown: str) -> SampleCursor:
        def bad(why: str) -> RecordDecodeError:
            return RecordDecodeError(
                f"invalid sample cursor token {shown!r}: {why}", reason="invalid_cursor"
            )

        if not isinstance(payload, dict) or payload.get("v") != _TOKEN_VERSION:
            raise bad(f"not a version-{_TOKEN_VERSION} cursor")
        exchange_id = payload.get("e")
        if not isinstance(exchange_id, str):
            raise bad("exchange id missing")
        phase = payload.get("p")
        similarity = payload.get("s")
        if phase == "no_similarity" and similarity is None:
            return cls(phase="no_similarity", exchange_id=exchange_id)
        if (
            phase == "similarity"
            and isinstance(similarity, int | float)
            and not isinstance(similarity, bool)
        ):
            return cls(phase="similarity", exchange_id=exchange_id, similarity=float(similarity))
        raise bad(f"phase {phase!r} with similarity {similarity!r}")


@dataclass(frozen=True)
class Sample:
    """One pair as an analyst reads it.

    ``request_messages`` are the captured request's ``messages`` as stored (after capture
    redaction; for a legacy ``/v1/completions`` request its text ``prompt`` as one user
    message; empty when the body is not a JSON object with either);
    ``request_params`` is the rest of the parsed request body (model, temperature,
    max_tokens, tools, response_format, …). ``baseline_text`` is the live answer's
    reassembled text and ``candidate_text`` the candidate replay's ("" when absent);
    tool calls are :class:`~shadoweval.records.ToolCall` dumps (``index``, ``id``,
    ``type``, ``name``, ``arguments``). ``similarity`` is the cosine similarity in
    [-1, 1] (``None`` when a side errored); ``noise_similarity`` the baseline against a
    baseline repeat. ``label`` is the pair's latest human label (any labeller).
    ``tokens`` are the live response's ``usage`` counts as captured and the replayed
    response's completion tokens (:class:`~shadoweval.records.CapturedTokens`, ``None``
    where the server reported none): the judge's cost estimate reads them.
    """

    run_id: str
    exchange_id: str
    task_type: str
    captured_at: datetime
    similarity: float | None
    noise_similarity: float | None
    flags: tuple[PairFlag, ...]
    request_messages: list[dict[str, Any]]
    request_params: dict[str, Any]
    baseline_text: str
    candidate_text: str
    baseline_tool_calls: list[dict[str, Any]]
    candidate_tool_calls: list[dict[str, Any]]
    candidate_error_kind: str | None
    label: HumanLabel | None = None
    tokens: CapturedTokens = field(default_factory=CapturedTokens)


@dataclass(frozen=True)
class SamplePage:
    """One page of samples, and where the next page starts (``None``: this was the last)."""

    samples: tuple[Sample, ...]
    next_cursor: SampleCursor | None = field(default=None)


def _tool_calls(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    return [call.model_dump(mode="json") for call in calls]


def request_parts(exchange: Exchange) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A captured request's ``messages`` (a legacy completions ``prompt`` as one user turn)
    and its other body parameters; ``([], {})`` when the body is not JSON."""
    body = exchange.request.json_body()
    if body is None:
        return [], {}
    params = {key: value for key, value in body.items() if key != "messages"}
    messages = body.get("messages")
    if not isinstance(messages, list):
        # A legacy /v1/completions request: its prompt is the one user turn (the judge and
        # the Samples page show it as such); token-id prompts stay in the parameters.
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            prompt = "\n".join(prompt)
        if isinstance(prompt, str):
            params.pop("prompt")
            return [{"role": "user", "content": prompt}], params
        return [], params
    return [m if isinstance(m, dict) else {"content": m} for m in messages], params


def _sample(records: Row[Any], label: HumanLabel | None) -> Sample:
    score = PairScore.model_validate(records.score)
    exchange = Exchange.model_validate(records.exchange, context=STORED)
    candidate = (
        None
        if records.candidate is None
        else ReplayOutcome.model_validate(records.candidate, context=STORED)
    )
    messages, params = request_parts(exchange)
    baseline = exchange.response
    replayed = None if candidate is None else candidate.response
    error_kind = score.candidate_error_kind or (None if candidate is None else candidate.error_kind)
    return Sample(
        **same_named(score, _SCORE_FIELDS),
        similarity=records.similarity,
        flags=flags_from_mask(records.flags),
        request_messages=messages,
        request_params=params,
        baseline_text=(baseline.text or "") if baseline is not None else "",
        candidate_text=(replayed.text or "") if replayed is not None else "",
        baseline_tool_calls=_tool_calls(baseline.tool_calls) if baseline is not None else [],
        candidate_tool_calls=_tool_calls(replayed.tool_calls) if replayed is not None else [],
        candidate_error_kind=None if error_kind is None else error_kind.value,
        label=label,
        tokens=CapturedTokens(
            None if baseline is None else baseline.usage.prompt_tokens,
            None if baseline is None else baseline.usage.completion_tokens,
            None if replayed is None else replayed.usage.completion_tokens,
        ),
    )


class SampleStore:
    """Filtered, keyset-paged reading of a run's pairs (a mixin of ``Repository``)."""

    _db: Database

    def sample_page(
        self,
        run_id: str,
        flt: SampleFilter,
        *,
        after: SampleCursor | None = None,
        limit: int = 50,
    ) -> SamplePage:
        """Return up to ``limit`` samples of ``run_id`` matching ``flt``, after ``after``.

        Order: pairs without similarity by ``exchange_id`` (only when ``flt`` sets no
        similarity bound), then by ``(similarity, exchange_id)``. Following
        ``next_cursor`` until it is ``None`` visits every matching pair exactly once
        (pairs scored meanwhile show up if they sort after the cursor). Two short
        queries per phase touched: keys on the paging index, then the records of the
        page's pairs.

        Raises:
            ValueError: ``limit`` < 1.
            StorageError: on database failure.
        """
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        conditions = self._conditions(run_id, flt)
        keys: list[Row[Any]] = []
        phases: list[Literal["no_similarity", "similarity"]] = []
        more = False
        with self._db.session() as session:
            in_null_phase = not flt.has_similarity_bound and (
                after is None or after.phase == "no_similarity"
            )
            if in_null_phase:
                start: tuple[float | None, str] | None = (
                    None if after is None else (None, after.exchange_id)
                )
                stmt = queries.sample_keys(conditions, with_similarity=False, after=start)
                found = session.execute(stmt.limit(limit + 1)).all()
                keys.extend(found[:limit])
                phases.extend(["no_similarity"] * len(keys))
                more = len(found) > limit
            if not more:
                position = (
                    (after.similarity, after.exchange_id)
                    if after is not None and after.phase == "similarity"
                    else None
                )
                room = limit - len(keys)
                stmt = queries.sample_keys(conditions, with_similarity=True, after=position)
                found = session.execute(stmt.limit(room + 1)).all()
                kept = found[:room]
                keys.extend(kept)
                phases.extend(["similarity"] * len(kept))
                more = len(found) > room
            samples = self._load(session, run_id, [key.exchange_id for key in keys])
        next_cursor = None
        if more and keys:
            last = keys[-1]
            next_cursor = SampleCursor(
                phase=phases[-1],
                exchange_id=last.exchange_id,
                similarity=last.similarity if phases[-1] == "similarity" else None,
            )
        return SamplePage(samples=tuple(samples), next_cursor=next_cursor)

    def count_samples(self, run_id: str, flt: SampleFilter) -> int:
        """Return how many pairs of ``run_id`` match ``flt`` (one ``COUNT``)."""
        with self._db.session() as session:
            return int(session.scalar(queries.sample_count(self._conditions(run_id, flt))) or 0)

    def sample_ids(
        self, run_id: str, flt: SampleFilter, task_type: str
    ) -> list[tuple[str, float | None]]:
        """Return ``(exchange_id, similarity)`` of every matching pair of one task type.

        In page order (no similarity first, then by similarity); reads two index columns,
        no JSON. Empty when ``flt.task_types`` is set and does not include ``task_type``.
        """
        if flt.task_types and task_type not in flt.task_types:
            return []
        conditions = self._conditions(run_id, flt, task_types=(task_type,))
        phases = (True,) if flt.has_similarity_bound else (False, True)
        result: list[tuple[str, float | None]] = []
        with self._db.session() as session:
            for with_similarity in phases:
                stmt = queries.sample_keys(
                    conditions, with_similarity=with_similarity, after=None
                ).with_only_columns(PairScoreRow.exchange_id, PairScoreRow.similarity)
                result.extend((row.exchange_id, row.similarity) for row in session.execute(stmt))
        return result

    def samples_by_ids(self, run_id: str, exchange_ids: Sequence[str]) -> list[Sample]:
        """Return the samples of the given pairs of ``run_id``, in the order given.

        Raises:
            StorageError: some ids have no pair score in the run (the message names the
                run and up to ten of them); on database failure.
        """
        wanted = list(dict.fromkeys(exchange_ids))
        by_id: dict[str, Sample] = {}
        with self._db.session() as session:
            for start in range(0, len(wanted), _IN_CHUNK):
                chunk = wanted[start : start + _IN_CHUNK]
                for sample in self._load(session, run_id, chunk):
                    by_id[sample.exchange_id] = sample
        missing = [exchange_id for exchange_id in wanted if exchange_id not in by_id]
        if missing:
            shown = ", ".join(repr(m) for m in missing[:10])
            more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            raise StorageError(f"run {run_id!r} has no pair score for exchange {shown}{more}")
        return [by_id[exchange_id] for exchange_id in exchange_ids]

    def task_types(self, run_id: str) -> list[str]:
        """Return the task types that have pair scores in ``run_id``, sorted."""
        stmt = (
            select(PairScoreRow.task_type)
            .where(PairScoreRow.run_id == run_id)
            .distinct()
            .order_by(PairScoreRow.task_type)
        )
        with self._db.session() as session:
            return list(session.scalars(stmt))

    # -------------------------------------------------------------- internals

    @staticmethod
    def _conditions(
        run_id: str, flt: SampleFilter, *, task_types: Sequence[str] | None = None
    ) -> list[ColumnElement[bool]]:
        return queries.sample_conditions(
            run_id,
            task_types=flt.task_types if task_types is None else task_types,
            flags_mask=flt.flags_mask,
            min_similarity=flt.min_similarity,
            max_similarity=flt.max_similarity,
        )

    @staticmethod
    def _load(session: Session, run_id: str, exchange_ids: Sequence[str]) -> list[Sample]:
        """Samples of the given pairs (those that exist), in the order given."""
        if not exchange_ids:
            return []
        records = {
            row.exchange_id: row
            for row in session.execute(queries.sample_records(run_id, exchange_ids))
        }
        labels: dict[str, HumanLabel] = {}
        for label_row in session.scalars(queries.latest_labels(run_id, exchange_ids)):
            labels.setdefault(label_row.exchange_id, rows_.human_label(label_row))
        return [_sample(records[i], labels.get(i)) for i in exchange_ids if i in records]
