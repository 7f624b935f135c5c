"""Content decoding undoes gzip/deflate/br/zstd piece by piece, whatever the piece sizes."""

from __future__ import annotations

import gzip
import random
import zlib

import brotli
import pytest

from shadoweval.capture.decoding import (
    BodyDecoder,
    ContentDecodingError,
    decode_pieces,
    parse_content_encoding,
    supported_codings,
)

PLAIN = ('data: {"x": "Grüße 日本語 🙂"}\n\n' * 200).encode("utf-8")


def _zstd() -> object:
    return pytest.importorskip("zstandard")


def encode(coding: str, data: bytes) -> bytes:
    if coding == "gzip":
        return gzip.compress(data)
    if coding == "deflate":
        return zlib.compress(data)
    if coding == "deflate-raw":
        c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        return c.compress(data) + c.flush()
    if coding == "br":
        return bytes(brotli.compress(data))
    if coding == "zstd":
        zstd = pytest.importorskip("zstandard")
        # with a content checksum, as the zstd CLI writes by default: without one a
        # damaged literal cannot be detected by any decoder
        return bytes(zstd.ZstdCompressor(write_checksum=True).compress(data))
    raise AssertionError(coding)


def split(data: bytes, seed: int, max_piece: int = 50) -> list[bytes]:
    rng = random.Random(seed)
    pieces, i = [], 0
    while i < len(data):
        n = rng.randint(1, max_piece)
        pieces.append(data[i : i + n])
        i += n
    return pieces


def decode_all(header: str | None, pieces: list[bytes], **kw: int) -> tuple[bytes, BodyDecoder]:
    decoder = BodyDecoder(header, **kw)
    out = b"".join(decoder.decode(p) for p in pieces) + decoder.finish()
    return out, decoder


@pytest.mark.parametrize(
    ("header", "coding"),
    [
        ("gzip", "gzip"),
        ("x-gzip", "gzip"),
        ("deflate", "deflate"),
        ("deflate", "deflate-raw"),
        ("br", "br"),
        ("zstd", "zstd"),
        ("GZIP", "gzip"),
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_coding_decodes_in_arbitrary_pieces(header: str, coding: str, seed: int) -> None:
    encoded = encode(coding, PLAIN)
    out, decoder = decode_all(header, split(encoded, seed))
    assert out == PLAIN
    assert decoder.complete
    assert decoder.trailing_bytes == 0


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br"])
def test_one_byte_pieces(coding: str) -> None:
    encoded = encode(coding, PLAIN[:2000])
    out, decoder = decode_all(coding, [encoded[i : i + 1] for i in range(len(encoded))])
    assert out == PLAIN[:2000]
    assert decoder.complete


def test_identity_and_no_header_pass_bytes_through() -> None:
    for header in (None, "", "identity", " Identity "):
        out, decoder = decode_all(header, [b"ab", b"", b"c"])
        assert out == b"abc"
        assert decoder.identity
        assert decoder.complete


def test_codings_are_undone_in_reverse_order_of_application() -> None:
    # Content-Encoding: gzip, br  — gzip applied first, then br (RFC 9110 §8.4)
    encoded = bytes(brotli.compress(gzip.compress(PLAIN)))
    out, decoder = decode_all("gzip, br", split(encoded, 7))
    assert out == PLAIN
    assert decoder.codings == ("gzip", "br")
    assert decoder.complete


def test_several_gzip_members_are_all_decoded() -> None:
    encoded = gzip.compress(b"first ") + gzip.compress(b"second")
    out, decoder = decode_all("gzip", split(encoded, 3, max_piece=7))
    assert out == b"first second"
    assert decoder.complete


def test_several_zstd_frames_are_all_decoded() -> None:
    zstd = pytest.importorskip("zstandard")
    c = zstd.ZstdCompressor()
    encoded = c.compress(b"first ") + c.compress(b"second")
    out, decoder = decode_all("zstd", split(encoded, 3, max_piece=5))
    assert out == b"first second"
    assert decoder.complete


def test_trailing_garbage_after_gzip_is_ignored_and_counted() -> None:
    out, decoder = decode_all("gzip", [gzip.compress(b"hello") + b"\x00\x00\x00"])
    assert out == b"hello"
    assert decoder.complete
    assert decoder.trailing_bytes == 3


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
def test_a_body_cut_short_is_incomplete_not_an_error(coding: str) -> None:
    encoded = encode(coding, PLAIN)
    out, decoder = decode_all(coding, [encoded[: len(encoded) // 2]])
    assert not decoder.complete
    assert PLAIN.startswith(out)


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
def test_corrupt_data_is_a_clear_error(coding: str) -> None:
    if coding == "zstd":
        _zstd()
    encoded = bytearray(encode(coding, PLAIN))
    # damage the compressed stream well after any header
    for i in range(len(encoded) // 3, len(encoded) // 3 + 16):
        encoded[i] ^= 0xFF
    garbage = b"this is not compressed at all, not even close........"
    for bad in (bytes(encoded), garbage):
        with pytest.raises(ContentDecodingError) as info:
            decode_all(coding, split(bad, 5))
        assert info.value.coding == coding
        assert info.value.reason == "corrupt"


def test_unsupported_coding_is_refused_at_construction() -> None:
    with pytest.raises(ContentDecodingError) as info:
        BodyDecoder("compress")
    assert info.value.reason == "unsupported_coding"
    assert "compress" in str(info.value)


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
def test_decompression_bomb_is_stopped_at_the_limit(coding: str) -> None:
    bomb = encode(coding, b"\0" * 5_000_000)
    assert len(bomb) < 20_000
    with pytest.raises(ContentDecodingError) as info:
        decode_all(coding, split(bomb, 1, max_piece=4096), max_output_bytes=100_000)
    assert info.value.reason == "too_large"


def test_decode_pieces_keeps_each_pieces_arrival_time() -> None:
    # Sync-flush after each event: each encoded piece decodes to exactly its event.
    events = [b"data: one\n\n", b"data: two\n\n", b"data: three\n\n"]
    comp = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    pieces = []
    for t, event in zip((10, 20, 30), events, strict=True):
        pieces.append((t, comp.compress(event) + comp.flush(zlib.Z_SYNC_FLUSH)))
    pieces.append((40, comp.flush()))
    decoded = list(decode_pieces(pieces, BodyDecoder("gzip")))
    assert decoded == [(10, events[0]), (20, events[1]), (30, events[2])]


def test_parse_content_encoding() -> None:
    assert parse_content_encoding(None) == ()
    assert parse_content_encoding("identity") == ()
    assert parse_content_encoding(" GZIP , br") == ("gzip", "br")
    assert parse_content_encoding("x-gzip") == ("gzip",)
    assert {"gzip", "deflate", "br", "identity"} <= supported_codings()
