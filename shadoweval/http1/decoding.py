"""Incremental content decoding of HTTP bodies (RFC 9110 §8.4 content codings).

The live path forwards bytes still content-encoded; the builder decodes them afterwards,
one captured piece at a time, so every decoded piece keeps the arrival time of the
encoded piece that produced it (a streamed response's TTFT and ITL stay right even when
the upstream gzips its SSE).

Codings (``Content-Encoding`` lists them in the order they were applied; they are undone
in reverse order, RFC 9110 §8.4):

* ``gzip`` (and its alias ``x-gzip``, RFC 9110 §8.4.1.3): RFC 1952 members, several
  members one after another are all decoded (as ``gzip -d`` does); bytes after the last
  member that do not start another member are ignored (as browsers do) and counted;
* ``deflate``: the zlib format of RFC 1950 — or, because some servers send it, a raw RFC 1951
  stream without the zlib header (detected from the first two bytes, as curl and browsers
  do);
* ``br``: Brotli, RFC 7932 (the ``brotli`` package);
* ``zstd``: Zstandard, RFC 8878 (the ``zstandard`` package, when importable);
* ``identity`` or no header: the bytes as they are.

Errors: an unknown coding, corrupt data, or output beyond ``max_output_bytes`` (a
decompression bomb) raise :class:`ContentDecodingError` (corruption is detected as far as
the format allows: gzip and zlib carry a CRC-32/Adler-32, brotli is checked structurally,
zstd only when the frame has its optional content checksum); a body that simply ended before
its end marker (a capture cut at the size limit, a cancelled response) does not raise —
:attr:`BodyDecoder.complete` tells the caller, who knows whether the end was expected.

Memory: gzip/deflate and br output is bounded per call (``max_length`` /
``output_buffer_limit``), so a bomb is stopped at the limit; zstd output is checked after
each call (``zstandard`` has no per-call output bound), so one piece may inflate past the
limit before it is refused.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Iterator
from typing import Any, Protocol

import brotli

from shadoweval.errors import RecordDecodeError


def _load_zstd() -> Any:
    """The ``zstandard`` module, or ``None``: zstd is decoded only when it is installed."""
    try:
        return importlib.import_module("zstandard")
    except ImportError:  # pragma: no cover - depends on the environment
        return None


_zstd = _load_zstd()

DEFAULT_MAX_OUTPUT_BYTES = 256 * 1024 * 1024
"""Default bound on a body's decoded size (bytes); more is refused as a decompression bomb."""

_GZIP_MAGIC = b"\x1f\x8b"


class ContentDecodingError(RecordDecodeError):
    """A captured body could not be content-decoded.

    Attributes:
        coding: the content coding that failed (``"gzip"``, ``"br"``, ...).
        reason: ``unsupported_coding``, ``corrupt`` or ``too_large``.
    """

    def __init__(self, message: str, *, coding: str, reason: str) -> None:
        super().__init__(message, reason=reason)
        self.coding = coding


def supported_codings() -> frozenset[str]:
    """Return the content codings this process can decode (``zstd`` only with zstandard)."""
    codings = {"gzip", "x-gzip", "deflate", "br", "identity"}
    if _zstd is not None:
        codings.add("zstd")
    return frozenset(codings)


def parse_content_encoding(header: str | None) -> tuple[str, ...]:
    """Split a ``Content-Encoding`` value into codings, in the order they were applied.

    Names are lower-cased and stripped; ``identity`` and empty items are dropped;
    ``x-gzip`` becomes ``gzip``. ``None`` or ``""`` → ``()``.
    """
    if not header:
        return ()
    codings: list[str] = []
    for item in header.split(","):
        name = item.strip().lower()
        if name in ("", "identity"):
            continue
        codings.append("gzip" if name == "x-gzip" else name)
    return tuple(codings)


class _Stage(Protocol):
    """One content coding being undone, fed piece by piece."""

    coding: str
    trailing_bytes: int

    def decode(self, data: bytes, limit: int) -> bytes:
        """Decode ``data``; output more than ``limit`` bytes raises ``too_large``."""

    def flush(self) -> bytes:
        """Return what is still buffered at end of input."""

    @property
    def complete(self) -> bool:
        """Whether the encoded stream reached its end marker."""


def _corrupt(coding: str, exc: Exception) -> ContentDecodingError:
    """The error of a body that is not valid ``coding`` (the decoder's ``exc`` says why)."""
    return ContentDecodingError(f"corrupt {coding} body: {exc}", coding=coding, reason="corrupt")


def _too_large(coding: str, limit: int) -> ContentDecodingError:
    return ContentDecodingError(
        f"{coding}-decoded body exceeds {limit} bytes (decompression bomb?)",
        coding=coding,
        reason="too_large",
    )


class _ZlibStage:
    """gzip (RFC 1952, multi-member) or deflate (RFC 1950 zlib, or raw RFC 1951)."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self.trailing_bytes = 0
        self._d: Any = None  # created once the format is known (deflate sniffs 2 bytes)
        self._head = b""
        self._ended = False  # the last member ended and no further member follows
        self._members = 0
        if coding == "gzip":
            self._d = self._new(16 + zlib.MAX_WBITS)

    def _new(self, wbits: int) -> Any:
        self._members += 1
        self._wbits = wbits
        return zlib.decompressobj(wbits)

    def _sniff(self, data: bytes) -> bytes:
        """Deflate: choose zlib (RFC 1950 header check) or raw deflate from 2 bytes."""
        self._head += data
        if len(self._head) < 2:
            return b""
        cmf, flg = self._head[0], self._head[1]
        zlib_header = (cmf & 0x0F) == 8 and (cmf << 8 | flg) % 31 == 0
        self._d = self._new(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
        data, self._head = self._head, b""
        return data

    def decode(self, data: bytes, limit: int) -> bytes:
        if self._d is None:
            data = self._sniff(data)
        out = bytearray()
        pending = data
        while pending:
            if self._ended:
                self.trailing_bytes += len(pending)
                break
            try:
                out += self._d.decompress(pending, max(limit - len(out), 0) + 1)
            except zlib.error as exc:
                raise _corrupt(self.coding, exc) from exc
            if len(out) > limit:
                raise _too_large(self.coding, limit)
            pending = self._d.unconsumed_tail
            if self._d.eof:
                leftover = self._d.unused_data + pending
                pending = b""
                if leftover and self.coding == "gzip" and _GZIP_MAGIC.startswith(leftover[:2]):
                    self._d = self._new(self._wbits)  # another gzip member follows
                    pending = leftover
                elif leftover:
                    self.trailing_bytes += len(leftover)
                    self._ended = True
        return bytes(out)

    def flush(self) -> bytes:
        if self._d is None:
            return b""
        try:
            return bytes(self._d.flush())
        except zlib.error as exc:  # pragma: no cover - flush after bad data raises earlier
            raise _corrupt(self.coding, exc) from exc

    @property
    def complete(self) -> bool:
        return self._d is not None and bool(self._d.eof)


class _BrotliStage:
    """Brotli (RFC 7932) via ``brotli.Decompressor``."""

    coding = "br"

    def __init__(self) -> None:
        self.trailing_bytes = 0
        self._d: Any = brotli.Decompressor()

    def decode(self, data: bytes, limit: int) -> bytes:
        if not data:
            return b""
        if self._d.is_finished():
            self.trailing_bytes += len(data)
            return b""
        try:
            out = bytearray(self._d.process(data, output_buffer_limit=limit + 1))
            while len(out) <= limit and not self._d.can_accept_more_data():
                out += self._d.process(b"", output_buffer_limit=limit + 1 - len(out))
        except brotli.error as exc:
            raise _corrupt("br", exc) from exc
        if len(out) > limit:
            raise _too_large("br", limit)
        return bytes(out)

    def flush(self) -> bytes:
        return b""

    @property
    def complete(self) -> bool:
        return bool(self._d.is_finished())


class _ZstdStage:
    """Zstandard (RFC 8878), several frames one after another."""

    coding = "zstd"

    def __init__(self) -> None:
        assert _zstd is not None
        self.trailing_bytes = 0
        self._d: Any = _zstd.ZstdDecompressor().decompressobj()

    def decode(self, data: bytes, limit: int) -> bytes:
        assert _zstd is not None
        out = bytearray()
        pending = data
        while pending:
            try:
                out += self._d.decompress(pending)
            except _zstd.ZstdError as exc:
                raise _corrupt("zstd", exc) from exc
            if len(out) > limit:
                raise _too_large("zstd", limit)
            pending = b""
            if self._d.eof and self._d.unused_data:
                pending = bytes(self._d.unused_data)
                self._d = _zstd.ZstdDecompressor().decompressobj()
        return bytes(out)

    def flush(self) -> bytes:
        return b""

    @property
    def complete(self) -> bool:
        return bool(self._d.eof)


def _stage(coding: str) -> _Stage:
    if coding in ("gzip", "deflate"):
        return _ZlibStage(coding)
    if coding == "br":
        return _BrotliStage()
    if coding == "zstd" and _zstd is not None:
        return _ZstdStage()
    raise ContentDecodingError(
        f"unsupported content-coding {coding!r} (supported: {sorted(supported_codings())})",
        coding=coding,
        reason="unsupported_coding",
    )


class BodyDecoder:
    """Undo a body's content codings incrementally.

    Usage::

        decoder = BodyDecoder(response_headers.get("content-encoding"))
        for arrival_ns, piece in chunks:
            decoded = decoder.decode(piece)   # bytes, possibly b"" (kept buffered)
        tail = decoder.finish()
        if not decoder.complete: ...          # the encoded body ended early

    Args:
        content_encoding: the ``Content-Encoding`` header value (``None`` = identity).
        max_output_bytes: bound on the decoded size of the whole body.

    Raises:
        ContentDecodingError: at construction for an unsupported coding; from
            :meth:`decode`/:meth:`finish` for corrupt data or output beyond the bound.
    """

    def __init__(
        self, content_encoding: str | None, *, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    ) -> None:
        self.codings = parse_content_encoding(content_encoding)
        self.max_output_bytes = max_output_bytes
        # undo the last-applied coding first
        self._stages = [_stage(c) for c in reversed(self.codings)]
        self._out = 0
        self._finished = False

    @property
    def identity(self) -> bool:
        """True when no content coding applies (bytes pass through unchanged)."""
        return not self._stages

    def decode(self, data: bytes) -> bytes:
        """Decode one piece; return the decoded bytes it completed (possibly ``b""``)."""
        for stage in self._stages:
            if not data:
                return b""
            data = stage.decode(data, self.max_output_bytes - self._out)
        self._out += len(data)
        if self._out > self.max_output_bytes:
            raise _too_large("identity", self.max_output_bytes)
        return data

    def finish(self) -> bytes:
        """End of input: return what the decoders still held (``b""`` for most codings)."""
        if self._finished:
            return b""
        self._finished = True
        tail = b""
        for stage in self._stages:
            if tail:
                tail = stage.decode(tail, self.max_output_bytes - self._out)
            tail += stage.flush()
        self._out += len(tail)
        return tail

    @property
    def complete(self) -> bool:
        """Whether every coding reached its end marker (always true for identity)."""
        return all(stage.complete for stage in self._stages)

    @property
    def trailing_bytes(self) -> int:
        """Bytes ignored after the end of an encoded stream (e.g. padding after gzip)."""
        return sum(stage.trailing_bytes for stage in self._stages)


def decode_pieces(
    pieces: list[tuple[int, bytes]], decoder: BodyDecoder
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(arrival_ns, decoded)`` for each captured ``(arrival_ns, encoded)`` piece.

    Pieces that decode to nothing are skipped; what :meth:`BodyDecoder.finish` returns is
    yielded with the last piece's arrival time. Raises :class:`ContentDecodingError`.
    """
    last_ns: int | None = None
    for arrival_ns, piece in pieces:
        last_ns = arrival_ns
        decoded = decoder.decode(piece)
        if decoded:
            yield arrival_ns, decoded
    tail = decoder.finish()
    if tail and last_ns is not None:
        yield last_ns, tail
