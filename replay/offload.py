"""Resolve offloaded exchange stubs to the full exchange (reference failure case 9).

An exchange larger than the broker's maximum message size is carried on Kafka as a *stub*
(no request or response bodies) with ``oversize.action == "offloaded"``; the full record
is a one-line capture-log file (optionally gzip) at ``oversize.offload_ref``. The replay
worker reads that file before replaying. When it cannot — the file is gone, unreadable,
holds no decodable exchange, or another exchange — the exchange is not replayed from the
stub: it gets a ``skipped`` outcome whose reason starts with ``offload_unavailable``, so
coverage shows it (never silently dropped).

``offload_ref`` is a filesystem path or a ``file://`` URI; a relative path is resolved
against ``base_dir`` (default: the working directory). Other schemes are reported as
unavailable.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from shadoweval.capture_log import read_capture_log
from shadoweval.records import Exchange

OFFLOAD_UNAVAILABLE = "offload_unavailable"
"""Prefix of the skip reason of an exchange whose offloaded record cannot be read."""


@dataclass(frozen=True, slots=True)
class OffloadUnavailable:
    """Why an offloaded exchange could not be resolved. ``reason`` is the skip reason
    stored on its outcomes: ``"offload_unavailable: <detail>"``."""

    exchange_id: str
    detail: str

    @property
    def reason(self) -> str:
        """``offload_unavailable: <detail>``."""
        return f"{OFFLOAD_UNAVAILABLE}: {self.detail}"


def is_offloaded(exchange: Exchange) -> bool:
    """True when ``exchange`` is a stub whose full record was offloaded."""
    return exchange.oversize is not None and exchange.oversize.action == "offloaded"


def offload_path(ref: str, base_dir: Path | None = None) -> Path:
    """The file an ``offload_ref`` names.

    Raises:
        ValueError: a URI scheme other than ``file`` (``s3://`` etc. are not supported).
    """
    parts = urlsplit(ref)
    if parts.scheme == "file":
        path = Path(unquote(parts.path))
    elif parts.scheme and len(parts.scheme) > 1:  # one letter: a Windows drive
        raise ValueError(f"offload_ref scheme {parts.scheme!r} is not supported")
    else:
        path = Path(ref)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path


def resolve_offloaded(
    exchange: Exchange, *, base_dir: Path | None = None
) -> Exchange | OffloadUnavailable:
    """Return the full exchange behind a stub (``exchange`` itself when not offloaded).

    Blocking file I/O: call it from a worker thread in async code. Never raises for a
    missing or bad file; returns :class:`OffloadUnavailable` with the reason.
    """
    note = exchange.oversize
    if note is None or note.action != "offloaded":
        return exchange
    if not note.offload_ref:
        return OffloadUnavailable(exchange.exchange_id, "no offload_ref on the stub")
    try:
        path = offload_path(note.offload_ref, base_dir)
        lines = read_capture_log(path)
        try:
            entry = next(lines, None)
        finally:
            if isinstance(lines, Generator):
                lines.close()  # closes the file now, not when collected
    except (OSError, ValueError) as exc:
        return OffloadUnavailable(exchange.exchange_id, f"{note.offload_ref}: {exc}")
    if entry is None:
        return OffloadUnavailable(exchange.exchange_id, f"{note.offload_ref}: file is empty")
    if entry.exchange is None:
        return OffloadUnavailable(
            exchange.exchange_id, f"{note.offload_ref}: {entry.error or 'undecodable'}"
        )
    full = entry.exchange
    if full.exchange_id != exchange.exchange_id:
        return OffloadUnavailable(
            exchange.exchange_id,
            f"{note.offload_ref} holds exchange {full.exchange_id}, not {exchange.exchange_id}",
        )
    if is_offloaded(full):
        return OffloadUnavailable(exchange.exchange_id, f"{note.offload_ref} holds a stub")
    return full
