"""shadoweval.application.canary.ingest_capture_log: the Envoy front's capture log → canary
observations.

Written with the real capture-log writer; read twice (nothing stored twice), a broken line
kept as a rejected record, a line still being written left for the next call, exchanges
outside the split and outside every step counted, not stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from shadoweval.application.canary import CANARY_REJECT_STAGE, canary_view, ingest_capture_log
from shadoweval.capture_log import CaptureLogWriter
from shadoweval.errors import ConfigError
from shadoweval.records import Exchange
from shadoweval.storage import Repository
from tests.storage.factories import make_exchange


def _served(n: int, cluster: str | None, *, status: int = 200) -> Exchange:
    ex = make_exchange(n)
    assert ex.response is not None
    response = ex.response.model_copy(update={"status_code": status})
    return ex.model_copy(update={"served_by": cluster, "response": response})


def test_each_exchange_is_observed_once_on_the_arm_that_served_it(
    repo: Repository, canary: str, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    with CaptureLogWriter(log) as writer:
        writer.write(_served(1, "candidate_model"))  # before the canary began
        writer.write(_served(10, "candidate_model"))
        writer.write(_served(11, "live_model", status=503))
        writer.write(_served(12, None))  # not served through the split
        writer.write_line(b'{"not": "an exchange"}\n')
    first = ingest_capture_log(repo, canary, log)
    assert (first.lines, first.stored, first.outside_steps, first.unassigned) == (5, 2, 1, 1)
    assert first.rejected == 1
    assert first.by_arm == {"candidate": 1, "baseline": 1}
    observed = {o.exchange_id: o for o in repo.canary_observations(canary)}
    assert observed["ex-00010"].arm == "candidate"
    assert not observed["ex-00010"].error
    assert observed["ex-00011"].error
    assert observed["ex-00011"].e2e_ms is None
    assert observed["ex-00011"].detail["status_code"] == 503
    rejected = repo.list_rejected(run_id="run-1")
    assert [r.stage for r in rejected] == [CANARY_REJECT_STAGE]
    assert sum(canary_view(repo, canary).rejected_lines.values()) == 1
    again = ingest_capture_log(repo, canary, log)
    assert (again.lines, again.stored) == (0, 0)


def test_a_line_still_being_written_waits_for_the_next_call(
    repo: Repository, canary: str, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    log.mkdir()
    line = _served(20, "candidate_model").model_dump_json().encode()
    segment = log / "capture-000001.jsonl"
    segment.write_bytes(line[:40])
    report = ingest_capture_log(repo, canary, log)
    assert (report.lines, report.rejected) == (0, 0)
    segment.write_bytes(line + b"\n")
    report = ingest_capture_log(repo, canary, log)
    assert (report.lines, report.stored) == (1, 1)


def test_unknown_canary_and_missing_log_name_the_value(repo: Repository, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="canary_id = 'nope'"):
        ingest_capture_log(repo, "nope", tmp_path)


def test_a_poll_resumes_at_the_byte_offset_it_reached(
    repo: Repository, canary: str, tmp_path: Path
) -> None:
    """The cursor is a byte offset: bytes before it are never read again (here they are
    overwritten with garbage of the same length, and nothing is rejected)."""
    log = tmp_path / "log"
    with CaptureLogWriter(log) as writer:
        writer.write(_served(10, "candidate_model"))
        writer.write(_served(11, "live_model"))
    (segment,) = sorted(log.iterdir())
    first = ingest_capture_log(repo, canary, log)
    assert (first.lines, first.stored) == (2, 2)
    size = segment.stat().st_size
    assert repo.get_canary(canary).ingest_state[segment.name] == {"lines": 2, "bytes": size}  # type: ignore[union-attr]
    line = _served(12, "candidate_model").model_dump_json().encode() + b"\n"
    segment.write_bytes(b"x" * (size - 1) + b"\n" + line)
    second = ingest_capture_log(repo, canary, log)
    assert (second.lines, second.stored, second.rejected) == (1, 1, 0)
    assert repo.list_rejected(run_id="run-1") == []
    (latest,) = [o for o in repo.canary_observations(canary) if o.exchange_id == "ex-00012"]
    assert latest.arm == "candidate"


def test_an_old_line_count_cursor_is_read_on_from_that_line(
    repo: Repository, canary: str, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    with CaptureLogWriter(log) as writer:
        for n in (10, 11, 12):
            writer.write(_served(n, "candidate_model"))
    (segment,) = sorted(log.iterdir())
    repo.save_canary_observations(canary, [], ingest_state={segment.name: 2})
    report = ingest_capture_log(repo, canary, log)
    assert (report.lines, report.stored) == (1, 1)
    assert [o.exchange_id for o in repo.canary_observations(canary)] == ["ex-00012"]
    cursor = repo.get_canary(canary).ingest_state[segment.name]  # type: ignore[union-attr]
    assert cursor == {"lines": 3, "bytes": segment.stat().st_size}


def test_gzip_segments_are_read_once_rotated(repo: Repository, canary: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    with CaptureLogWriter(log, compress=True, max_segment_bytes=1) as writer:
        writer.write(_served(10, "candidate_model"))
        writer.write(_served(11, "live_model"))
    segments = sorted(log.iterdir())
    assert len(segments) == 2
    first = ingest_capture_log(repo, canary, log)
    assert (first.lines, first.stored) == (2, 2)
    state = repo.get_canary(canary).ingest_state  # type: ignore[union-attr]
    assert state[segments[0].name] == {"lines": 1, "complete": True}
    assert state[segments[1].name] == {"lines": 1, "complete": False}
    again = ingest_capture_log(repo, canary, log)
    assert (again.lines, again.stored) == (0, 0)
