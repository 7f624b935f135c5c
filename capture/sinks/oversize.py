"""Exchanges too large for a Kafka message: drop the raw body, else offload, else drop.

A payload over the limit is never sent as is (the producer would refuse it, or the broker
would, and a naive retry loop would stall the sink — goreplay #849). :meth:`OversizeHandler.fit`
makes it fit, in order:

1. ``raw_body_dropped``: decode the :class:`~shadoweval.records.Exchange`, leave out
   ``response.body`` (the raw SSE/JSON text; the reassembled text, tool calls and usage
   stay) and mark ``oversize``. Done if the result fits.
2. ``offloaded``: write the full original line to ``<offload dir>/<exchange_id>.jsonl``
   (a one-line capture log, readable by :func:`shadoweval.capture_log.read_capture_log`)
   and send a stub: same ids, route, task type, timings, usage, outcome and models, with
   ``request.body = ""`` and the response's body, text, reasoning text and tool calls
   removed; ``oversize.offload_ref`` is the file's absolute path.
3. ``dropped``: the stub itself does not fit, the payload does not decode, the offload
   directory is over its byte budget, or the file cannot be written. The caller counts
   ``dropped{reason}`` with :attr:`FitResult.reason`.

A broker-side rejection (the broker's ``message.max.bytes`` is below ours) calls
:meth:`OversizeHandler.fit` with ``rejected=True``: the same steps, starting from the
record the broker refused (step 1 is skipped if it was already applied, so at most three
attempts happen per record). After such a rejection of a ``raw_body_dropped`` record, the
offloaded line is that record (its raw body is already gone).

The offload file lives on the sidecar's disk: a replay worker on another machine needs a
shared volume to follow ``offload_ref``. Methods are synchronous (CPU-bound decoding and a
file write): asyncio callers use :func:`asyncio.to_thread`.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson
from pydantic import ValidationError

from shadoweval.disk import Opener, open_binary, replace_durably
from shadoweval.records import Exchange, OversizeNote, RequestRecord

logger = logging.getLogger(__name__)

RECORD_HEADROOM_BYTES = 512
"""Kept free below ``max_message_bytes`` for the record batch header and record framing."""

FitAction = Literal["as_is", "raw_body_dropped", "offloaded", "dropped"]


@dataclass(frozen=True, slots=True)
class FitResult:
    """What :meth:`OversizeHandler.fit` did to a payload.

    * ``payload``: the bytes to send (``None`` when ``action == "dropped"``).
    * ``action``: ``as_is`` (it fitted), ``raw_body_dropped``, ``offloaded`` or ``dropped``.
    * ``reason``: for ``dropped`` — ``oversize`` (even the stub is too big),
      ``oversize_undecodable``, ``offload_full`` or ``offload_io``.
    * ``offload_path``: the written file, for ``offloaded``.
    """

    payload: bytes | None
    action: FitAction
    reason: str = ""
    offload_path: Path | None = None


def message_limit_bytes(max_message_bytes: int, key: bytes, headers_bytes: int = 0) -> int:
    """Largest payload, bytes, that fits a Kafka message of ``max_message_bytes``.

    Leaves :data:`RECORD_HEADROOM_BYTES` plus the key and header sizes free.
    """
    return max_message_bytes - RECORD_HEADROOM_BYTES - len(key) - headers_bytes


def serialize(exchange: Exchange) -> bytes:
    """An Exchange as one compact capture-log line (no newline), as the builder makes it."""
    return orjson.dumps(exchange.model_dump(mode="json"))


def stub_of(exchange: Exchange, note: OversizeNote) -> Exchange:
    """The small stand-in of an offloaded exchange (bodies and outputs removed)."""
    request = RequestRecord(
        method=exchange.request.method,
        path=exchange.request.path,
        headers=exchange.request.headers,
        body="",
    )
    response = exchange.response
    if response is not None:
        response = response.model_copy(
            update={"body": None, "text": None, "reasoning_text": None, "tool_calls": ()}
        )
    return exchange.model_copy(update={"request": request, "response": response, "oversize": note})


class OversizeHandler:
    """Make exchange payloads fit under ``limit_bytes`` (see the module docstring).

    Args:
        limit_bytes: largest payload to send, bytes (see :func:`message_limit_bytes`).
        offload_dir: where offloaded lines go (created on first use).
        max_offload_bytes: budget of the offload directory, bytes (``None``: unbounded).
            Files already there count. Nothing here deletes offload files: whoever reads
            them (or the operator) does.
        opener: opens the temporary file of each offload (a seam for disk-full tests,
            :data:`shadoweval.disk.Opener`); default :meth:`pathlib.Path.open`.

    A write that fails (disk full, I/O error) leaves no file behind, does not use up
    the budget and is a drop with reason ``offload_io``.

    Thread-safe.
    """

    def __init__(
        self,
        limit_bytes: int,
        offload_dir: str | Path,
        *,
        max_offload_bytes: int | None = None,
        opener: Opener | None = None,
    ) -> None:
        if limit_bytes <= 0:
            raise ValueError(f"limit_bytes must be positive, got {limit_bytes}")
        self.limit_bytes = limit_bytes
        self.offload_dir = Path(offload_dir).absolute()
        self.max_offload_bytes = max_offload_bytes
        self._opener: Opener = opener or open_binary
        self._lock = threading.Lock()
        self._offload_bytes: int | None = None  # measured lazily (a directory scan)

    def fit(
        self, payload: bytes, *, rejected: bool = False, limit_bytes: int | None = None
    ) -> FitResult:
        """Return ``payload`` unchanged if it fits, else a smaller form or a drop.

        Args:
            payload: one serialized :class:`Exchange`.
            rejected: the payload was refused for its size by the producer or broker even
                though it passed this check; shrink it whatever its size.
            limit_bytes: this record's limit when it differs from the handler's (e.g. a
                long Kafka key leaves less room), bytes.

        Never raises for bad input (an undecodable oversize payload is a drop).
        """
        limit = self.limit_bytes if limit_bytes is None else limit_bytes
        if not rejected and len(payload) <= limit:
            return FitResult(payload, "as_is")
        try:
            exchange = Exchange.model_validate_json(payload)
        except ValidationError as exc:
            logger.error("oversize payload of %d bytes does not decode: %s", len(payload), exc)
            return FitResult(None, "dropped", reason="oversize_undecodable")
        note = exchange.oversize
        response = exchange.response
        if note is None and response is not None and response.body is not None:
            slim = exchange.model_copy(
                update={
                    "response": response.model_copy(update={"body": None}),
                    "oversize": OversizeNote(
                        original_bytes=len(payload),
                        limit_bytes=limit,
                        action="raw_body_dropped",
                    ),
                }
            )
            slim_payload = serialize(slim)
            if len(slim_payload) <= limit and len(slim_payload) < len(payload):
                return FitResult(slim_payload, "raw_body_dropped")
        if note is None or note.action == "raw_body_dropped":
            return self._offload(exchange, payload, limit)
        logger.error(
            "exchange %s: even its offload stub (%d bytes) is too large; dropped",
            exchange.exchange_id,
            len(payload),
        )
        return FitResult(None, "dropped", reason="oversize")

    def _offload(self, exchange: Exchange, payload: bytes, limit: int) -> FitResult:
        path = self.offload_dir / f"{exchange.exchange_id}.jsonl"
        stub = stub_of(
            exchange,
            OversizeNote(
                original_bytes=len(payload),
                limit_bytes=limit,
                action="offloaded",
                offload_ref=str(path),
            ),
        )
        stub_payload = serialize(stub)
        if len(stub_payload) > limit:
            logger.error(
                "exchange %s: offload stub of %d bytes exceeds %d; dropped",
                exchange.exchange_id,
                len(stub_payload),
                limit,
            )
            return FitResult(None, "dropped", reason="oversize")
        with self._lock:
            try:
                used = self._used_bytes()
                if self.max_offload_bytes is not None and used + len(payload) > (
                    self.max_offload_bytes
                ):
                    logger.error(
                        "offload directory %s holds %d bytes (budget %d); exchange %s dropped",
                        self.offload_dir,
                        used,
                        self.max_offload_bytes,
                        exchange.exchange_id,
                    )
                    return FitResult(None, "dropped", reason="offload_full")
                written = self._write_atomically(path, payload + b"\n")
            except OSError as exc:
                logger.error("cannot offload exchange %s: %s", exchange.exchange_id, exc)
                return FitResult(None, "dropped", reason="offload_io")
            self._offload_bytes = used + written
        return FitResult(stub_payload, "offloaded", offload_path=path)

    def _used_bytes(self) -> int:
        if self._offload_bytes is None:
            self.offload_dir.mkdir(parents=True, exist_ok=True)
            self._offload_bytes = sum(
                p.stat().st_size for p in self.offload_dir.glob("*.jsonl") if p.is_file()
            )
        return self._offload_bytes

    def _write_atomically(self, path: Path, data: bytes) -> int:
        """Write ``data`` to ``path`` via a temporary file; return the bytes added."""
        previous = path.stat().st_size if path.exists() else 0
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            replace_durably(self._opener, tmp, path, data)
        finally:
            tmp.unlink(missing_ok=True)
        return len(data) - previous
