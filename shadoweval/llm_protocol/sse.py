"""Incremental Server-Sent Events framing.

Network reads do not line up with events or even with UTF-8 characters. This decoder
takes bytes in whatever pieces they arrive, decodes UTF-8 incrementally (a character
split across two reads is joined, never turned into U+FFFD; only genuinely invalid bytes
are replaced), buffers to event boundaries and yields complete events.

Framing follows the WHATWG HTML "server-sent events" parsing rules: lines end in CRLF,
LF or CR (a CR at the end of one read may be followed by LF in the next); a blank line
dispatches the event; ``:`` lines are comments (keep-alive pings); ``data`` fields of one
event are joined with ``\\n``; one leading space after the colon is dropped. One field
outside the standard is kept: ``error:`` lines, which llama.cpp's ``llama-server`` sends for
an error inside a stream (``server_sent_event(sink, "error", ...)`` in
tools/server/server.cpp) and which a standard reader would drop. vLLM's
benchmark client uses the same buffer-to-boundary approach
(vllm/benchmarks/lib/endpoint_request_func.py).

Fast path: most streams are runs of single-line ``data: ...`` events separated by ``\n\n``.
When no field of an unfinished event is pending and the buffered text has no CR,
:meth:`SSEDecoder.feed` splits it at ``\n\n`` and takes blocks that are one ``data:``
line each directly (the event the line-by-line rules give: that data, the last event id,
no name, retry or error); anything else in the piece (a comment, an ``event:``/``id:``/
``error:`` field, several lines in one event) sends the whole piece through the
line-by-line parser. ``tests/core/test_sse_fast_path.py`` checks both give the same events
for arbitrary texts cut at arbitrary points.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

_EOL = re.compile(r"\r\n|\r|\n")
"""An SSE line terminator: CRLF, CR or LF."""


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event: ``data`` joined from its data lines, ``event`` name if any,
    ``error`` joined from its ``error:`` lines (llama.cpp's non-standard field), if any."""

    data: str
    event: str | None = None
    id: str | None = None
    retry_ms: int | None = None
    error: str | None = None


@dataclass(slots=True)
class SSEDecoder:
    """Feed bytes, iterate complete :class:`SSEEvent` s.

    Counters: ``comments`` (ping/comment lines seen), ``bytes_in`` (bytes fed).
    Call :meth:`close` at end of stream to flush a final event that lacked its blank line.
    """

    comments: int = 0
    bytes_in: int = 0
    _decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace")
    )
    _pending: str = ""
    _data: list[str] = field(default_factory=list)
    _error: list[str] = field(default_factory=list)
    _event: str | None = None
    _id: str | None = None
    _retry: int | None = None
    _has_field: bool = False
    fast: bool = True
    """Take the fast path (module doc) where it applies; ``False``: every piece through the
    line-by-line parser (the reference the fast path is tested against)."""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Add raw bytes; return the events completed by them (possibly none)."""
        self.bytes_in += len(chunk)
        text = self._decoder.decode(chunk, final=False)
        if self.fast and not self._has_field:
            buf = self._pending + text
            cut = buf.rfind("\n\n")
            if cut >= 0 and "\r" not in buf:
                events = self._data_blocks(buf[:cut])
                if events is not None:
                    self._pending = ""
                    if cut + 2 < len(buf):
                        events.extend(self._consume(buf[cut + 2 :], final=False))
                    return events
        return list(self._consume(text, final=False))

    def close(self) -> list[SSEEvent]:
        """End of stream: flush the decoder and any event not yet dispatched."""
        text = self._decoder.decode(b"", final=True)
        events = list(self._consume(text, final=True))
        if self._has_field:
            events.append(self._dispatch())
        return events

    def _data_blocks(self, head: str) -> list[SSEEvent] | None:
        """The events of ``head`` (text from a line start with no field pending, up to a
        blank line) when each of its ``\n\n``-separated blocks is empty or one ``data:``
        line; ``None`` (nothing changed) otherwise."""
        blocks = head.split("\n\n")
        if head.count("\n") != 2 * (len(blocks) - 1):
            return None  # a block with more than one line
        events: list[SSEEvent] = []
        for block in blocks:
            if not block:
                continue  # blank lines with no field: nothing to dispatch
            if not block.startswith("data:"):
                return None
            value = block[6:] if block.startswith(" ", 5) else block[5:]
            events.append(SSEEvent(value, None, self._id))
        return events

    def _consume(self, text: str, *, final: bool) -> Iterator[SSEEvent]:
        buf = self._pending + text
        start = 0
        n = len(buf)
        # Line terminators are found by the regex engine (C), not a per-character loop.
        for match in _EOL.finditer(buf):
            if match.end() == n and not final and buf[n - 1] == "\r":
                break  # a CR at the very end may be the first half of CRLF
            line = buf[start : match.start()]
            start = match.end()
            event = self._line(line)
            if event is not None:
                yield event
        self._pending = buf[start:]
        if final and self._pending:
            event = self._line(self._pending)
            self._pending = ""
            if event is not None:
                yield event

    def _line(self, line: str) -> SSEEvent | None:
        if line == "":
            return self._dispatch() if self._has_field else None
        if line.startswith(":"):
            self.comments += 1
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        self._has_field = True
        if name == "data":
            self._data.append(value)
        elif name == "error":
            self._error.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent:
        error = "\n".join(self._error) if self._error else None
        event = SSEEvent("\n".join(self._data), self._event, self._id, self._retry, error)
        self._data = []
        self._error = []
        self._event = None
        self._retry = None
        self._has_field = False
        return event
