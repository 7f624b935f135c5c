"""Incremental content decoding of captured bodies: the core's :mod:`shadoweval.http1.decoding`.

Kept as the capture stage's name for it; the decoders live in the core so the replay
client decodes candidate responses with the same code (gzip, deflate, br, zstd).
"""

from __future__ import annotations

from shadoweval.http1.decoding import (
    DEFAULT_MAX_OUTPUT_BYTES,
    BodyDecoder,
    ContentDecodingError,
    decode_pieces,
    parse_content_encoding,
    supported_codings,
)

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "BodyDecoder",
    "ContentDecodingError",
    "decode_pieces",
    "parse_content_encoding",
    "supported_codings",
]
