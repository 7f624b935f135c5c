"""``scripts/acceptance_real.py`` without model servers: what counts as lost, and the
``expect`` block it writes for a recorded dialect fixture (from the recorded bytes).

The script itself runs real llama-cpp-python servers (``make acceptance-real``, not part of
``make test``); these tests pin only its pure parts.
"""

from __future__ import annotations

import json
from pathlib import Path

from scripts.acceptance_real import (
    Result,
    Sent,
    _expect_from,
    check_losses,
    replay_accounted,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dialects" / "llama_cpp"


def _sent(n: int) -> list[Sent]:
    return [Sent("chat", "oasst", False, True, 200, 1.0, True, 0, "stop") for _ in range(n)]


def _complete(n: int) -> Result:
    """A run in which nothing was lost: n sent, captured, replayed, scored; gate HOLD."""
    return Result(
        sent=_sent(n),
        captured={"exchanges": n, "sidecar_exit": 0},
        replay={"exit": 0, "exchanges": n, "sent": {"candidate": n, "baseline_repeat": n}},
        compare={"exit": 0, "scored": n},
        gate={"exit": 1},
    )


def test_a_complete_run_lost_nothing() -> None:
    result = _complete(5)
    check_losses(result)
    assert result.losses == []


def test_a_request_not_captured_is_a_loss() -> None:
    result = _complete(5)
    result.captured["exchanges"] = 4
    check_losses(result)
    assert result.losses == ["sent 5 requests, captured 4"]


def test_an_exchange_neither_replayed_nor_skipped_is_a_loss() -> None:
    result = _complete(5)
    result.replay["sent"] = {"candidate": 3}
    result.replay["skipped"] = {"route_not_replayed": 1}
    check_losses(result)
    assert result.losses == ["replay accounted for 4 of 5 captured exchanges"]


def test_skipped_and_rejected_exchanges_are_accounted_for() -> None:
    report = {"sent": {"candidate": 2}, "skipped": {"x": 1}, "rejected": {"schema": 1}}
    assert replay_accounted(report) == 4


def test_a_pair_not_scored_and_a_failed_gate_are_losses() -> None:
    result = _complete(5)
    result.compare["scored"] = 4
    result.gate["exit"] = 3
    check_losses(result)
    assert result.losses == ["compare scored 4 of 5 replayed pairs", "gate exited 3"]


def test_the_expect_block_of_the_recorded_streamed_tool_call() -> None:
    raw = (FIXTURES / "recorded-stream-tool-call.sse").read_bytes()
    expect = _expect_from(raw, is_sse=True, status=200, ends="clean")
    # llama-cpp-python repeats the name in every delta: it is kept once, not concatenated
    assert [c["name"] for c in expect["tool_calls"]] == ["calculate_triangle_area"]
    assert json.loads(expect["tool_calls"][0]["arguments"]) == {"base": 10, "height": 5}
    assert expect["finish_reason"] == "tool_calls"
    assert expect["usage"] == "absent"
    assert expect["done_seen"] is True


def test_the_expect_block_of_an_empty_200_stream_and_of_a_400() -> None:
    empty = _expect_from(b"", is_sse=True, status=200, ends="clean")
    assert empty["error_kind"] == "decode"
    assert empty["done_seen"] is False
    body = (FIXTURES / "recorded-error-context.json").read_bytes()
    error = _expect_from(body, is_sse=False, status=400, ends="clean")
    assert error["error_kind"] == "http_status"
    assert "maximum context length" in error["error_contains"]
