"""Malformed records for the property tests of every consumer (issue 13): what a capture
log line, a Kafka record value or a labelled row can hold when something went wrong.

A *mutation* (drawn by hypothesis, :data:`mutations`) is applied to a *base*: a valid
capture-log line whose content is unique per index (:func:`base_payload`), so that no two
records of a test are accidentally the same exchange. Most mutations make the line invalid
(a field set to a hostile value or deleted, the line cut, replaced by bytes, text, other
JSON, nested too deep, left blank, a base64 body that does not decode); some leave it
valid (a hostile value a field may hold): a consumer must store those and reject the rest,
each with its reason. Records are built deterministically from (mutation, index), so one
hypothesis example of a few dozen mutations becomes hundreds of records.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from hypothesis import strategies as st

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

PATHS: tuple[tuple[str, ...], ...] = (
    ("schema_version",),
    ("captured_at",),
    ("monotonic_start_ns",),
    ("route",),
    ("task_type",),
    ("session_key_hash",),
    ("request",),
    ("request", "method"),
    ("request", "path"),
    ("request", "headers"),
    ("request", "body"),
    ("request", "body_encoding"),
    ("response",),
    ("response", "status_code"),
    ("response", "text"),
    ("response", "tool_calls"),
    ("response", "finish_reason"),
    ("response", "usage"),
    ("response", "usage", "prompt_tokens"),
    ("response", "usage", "completion_tokens"),
    ("response", "cache_hit"),
    ("response", "cache_hit_headers"),
    ("timings",),
    ("timings", "ttfb_ms"),
    ("timings", "ttft_ms"),
    ("timings", "ttfc_ms"),
    ("timings", "e2e_ms"),
    ("timings", "tpot_ms"),
    ("timings", "itl"),
    ("timings", "source"),
    ("outcome",),
    ("baseline_model",),
    ("baseline_model", "name"),
    ("redaction",),
    ("source",),
    ("oversize",),
    ("error_detail",),
    ("served_by",),
    ("unknown_field",),
)
"""Where a mutation sets or deletes a value (``unknown_field`` is not a field at all)."""

HOSTILE: tuple[Any, ...] = (
    -1,
    -0.001,
    -1e308,
    1e308,
    0,
    "",
    " ",
    "\t\n",
    "\x00",
    "a\x00b",
    "\u200b",
    "\ufeff",
    "\ud7ff",
    "NaN",
    "-inf",
    "inf",
    "1e999",
    "-5",
    [],
    {},
    None,
    True,
    2**63,
    -(2**63),
    "9" * 400,
    "!!!!",
    "==",
    "abc",
    "2026-13-45T99:99:99Z",
    "2026-03-01T12:00:00",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    [{"name": "x-cache", "value": "HIT"}],
    {"name": "m", "weights_hash": 5},
    "😀" * 30,
)
"""Values that broke, or could break, a consumer (negative times, NUL, lone control
characters, zero-width space, strings shaped like numbers, out-of-range dates …)."""

BAD_IDS: tuple[Any, ...] = ("", " ", "a b", "id\x00", "id\nx", "x" * 201, 5, [], {}, None)
"""``exchange_id`` values: all refused except ``None`` (the line then gets its content id)."""

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=6,
)
values = st.one_of(st.sampled_from(HOSTILE), json_values)

Mutation = tuple[Any, ...]

mutations: st.SearchStrategy[Mutation] = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(PATHS), values),
    st.tuples(st.just("delete"), st.sampled_from(PATHS)),
    st.tuples(st.just("bad_id"), st.sampled_from(BAD_IDS)),
    st.tuples(st.just("base64"), st.text(max_size=24)),
    st.tuples(st.just("truncate"), st.floats(min_value=0.0, max_value=0.999)),
    st.tuples(st.just("bytes"), st.binary(max_size=48)),
    st.tuples(st.just("text"), st.text(max_size=48)),
    st.tuples(st.just("json"), json_values),
    st.tuples(st.just("deep"), st.integers(min_value=50, max_value=3000)),
    st.tuples(st.just("blank"), st.sampled_from(["", " ", "\t \t", "\u3000", "\r"])),
    st.tuples(
        st.just("bom"),
    ),
)
"""One way a record goes wrong (or stays right); see :func:`malformed`."""


def base_payload(index: int, *, prefix: str = "mal") -> dict[str, Any]:
    """A valid capture-log line (as a JSON object) whose content is unique per ``index``."""
    body = {
        "model": "baseline-v1",
        "messages": [{"role": "user", "content": f"Question {prefix} {index}?"}],
        "temperature": 0,
    }
    return {
        "schema_version": 1,
        "exchange_id": f"{prefix}-{index:07d}",
        "captured_at": (T0 + timedelta(milliseconds=index)).isoformat(),
        "route": "/v1/chat/completions",
        "task_type": "chat",
        "request": {
            "method": "POST",
            "path": "/v1/chat/completions",
            "headers": [],
            "body": orjson.dumps(body).decode(),
            "body_encoding": "utf-8",
        },
        "response": {
            "status_code": 200,
            "text": f"Answer {index}.",
            "finish_reason_raw": "stop",
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "usage_source": "reported"},
        },
        "timings": {"ttfb_ms": 10.0, "e2e_ms": 50.0, "source": "measured"},
        "outcome": "done",
        "baseline_model": {"name": "baseline-v1"},
        "source": f"sidecar:{prefix}",
    }


def _set(payload: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node: Any = payload
    for key in path[:-1]:
        child = node.get(key) if isinstance(node, dict) else None
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[path[-1]] = value


def _delete(payload: dict[str, Any], path: tuple[str, ...]) -> None:
    node: Any = payload
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return
    node.pop(path[-1], None)


def malformed(mutation: Mutation, index: int, *, prefix: str = "mal") -> bytes:
    """The record ``mutation`` makes of base ``index`` (bytes, no trailing newline;
    may hold newlines of its own — a file writer must replace them)."""
    kind = mutation[0]
    payload = base_payload(index, prefix=prefix)
    if kind == "set":
        _set(payload, mutation[1], mutation[2])
    elif kind == "delete":
        _delete(payload, mutation[1])
    elif kind == "bad_id":
        payload["exchange_id"] = mutation[1]
    elif kind == "base64":
        text = mutation[1]
        payload["request"]["body_encoding"] = "base64"
        # A valid encoding of the drawn text is the control; every other form is broken.
        encoded = base64.b64encode(text.encode("utf-8", "surrogatepass")).decode()
        payload["request"]["body"] = text if index % 3 else encoded
    elif kind == "truncate":
        line = orjson.dumps(payload)
        return line[: int(len(line) * mutation[1])]
    elif kind == "bytes":
        return bytes(mutation[1])
    elif kind == "text":
        return str(mutation[1]).encode("utf-8", "surrogatepass")
    elif kind == "json":
        return bytes(orjson.dumps(mutation[1]))
    elif kind == "deep":
        depth = int(mutation[1])
        return b'{"schema_version": 1, "request": ' + b"[" * depth + b"]" * depth + b"}"
    elif kind == "blank":
        return str(mutation[1]).encode()
    elif kind == "bom":
        return b"\xef\xbb\xbf" + orjson.dumps(payload)
    return orjson.dumps(payload)


def one_line(record: bytes) -> bytes:
    """``record`` as one capture-log line: its own line breaks replaced by spaces."""
    return record.replace(b"\r\n", b" ").replace(b"\n", b" ").replace(b"\r", b" ")
