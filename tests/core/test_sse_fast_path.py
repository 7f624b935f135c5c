"""The SSE decoder's fast path (single-line ``data:`` events split at ``\\n\\n``) gives
exactly the events of the line-by-line parser, for any text cut at any points."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from shadoweval.llm_protocol.sse import SSEDecoder, SSEEvent

PIECES = st.sampled_from(
    [
        "data: ",
        "data:",
        "data",
        "dat",
        "event: e",
        "id: 7",
        "id:",
        "retry: 30",
        "error: {}",
        ": ping",
        ":",
        "\n",
        "\n\n",
        "\r",
        "\r\n",
        " ",
        "x",
        "[DONE]",
        '{"a": 1}',
        "é",
        "日本",
        "🙂",
        "id: 7\n\n",
        "data: x\n\n",
        "data: é\n\ndata:y\n\n",
    ]
)
"""Bits of SSE text: field names, comments, every line ending, non-ASCII characters,
whole events."""

TEXTS = st.lists(PIECES, max_size=40).map("".join)


def run(decoder: SSEDecoder, pieces: list[bytes]) -> list[object]:
    """Per fed piece the events it completed, then the events of ``close``, then the
    counters."""
    out: list[object] = [decoder.feed(p) for p in pieces]
    out.append(decoder.close())
    out.append((decoder.comments, decoder.bytes_in))
    return out


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at ``cuts`` (byte offsets, possibly inside a UTF-8 character)."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def same_events(data: bytes, cuts: list[int]) -> None:
    pieces = split(data, cuts)
    assert run(SSEDecoder(), pieces) == run(SSEDecoder(fast=False), pieces)


@settings(max_examples=1500, deadline=None)
@given(TEXTS, st.lists(st.integers(min_value=0, max_value=10_000), max_size=8))
def test_fast_path_gives_the_line_by_line_events(text: str, cuts: list[int]) -> None:
    same_events(text.encode("utf-8"), cuts)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.one_of(TEXTS.map(str.encode), st.binary(max_size=4)), max_size=6).map(b"".join),
    st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
)
def test_fast_path_with_invalid_utf8(data: bytes, cuts: list[int]) -> None:
    same_events(data, cuts)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=8), st.integers(min_value=1, max_value=7))
def test_plain_data_streams_read_in_any_piece_size(payloads: list[str], size: int) -> None:
    """A stream of single-line ``data:`` events (the fast path's case), read ``size``
    bytes at a time: the events of the line-by-line parser, each in the same piece."""
    lines = [p.replace("\r", "").replace("\n", "") for p in payloads]
    data = "".join(f"data: {p}\n\n" for p in lines).encode("utf-8")
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    assert run(SSEDecoder(), pieces) == run(SSEDecoder(fast=False), pieces)
    decoder = SSEDecoder()
    assert decoder.feed(data) + decoder.close() == [SSEEvent(p) for p in lines]


def test_fast_path_keeps_the_last_event_id() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 9\ndata: a\n\n") == [SSEEvent("a", id="9")]
    assert decoder.feed(b"data: b\n\ndata:c\n\n") == [SSEEvent("b", id="9"), SSEEvent("c", id="9")]
