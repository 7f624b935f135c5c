"""RateLimitedLog: one line per interval and key, the next one counting those not logged;
the clock is injected, so the test moves time instead of sleeping."""

from __future__ import annotations

import logging

import pytest

from shadoweval.log_limits import RateLimitedLog


def test_one_line_per_interval_and_key_with_the_count_of_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    logger = logging.getLogger("tests.log_limits")
    limiter = RateLimitedLog(logger, interval_s=30.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="tests.log_limits")
    logged = [limiter.log(logging.WARNING, "bad thing at %s", "/a", key="a") for _ in range(5)]
    assert logged == [True, False, False, False, False]
    assert limiter.suppressed("a") == 4
    assert limiter.log(logging.WARNING, "other thing", key="b")  # each key on its own
    now[0] = 129.9
    assert not limiter.log(logging.WARNING, "bad thing at %s", "/a", key="a")
    now[0] = 130.0
    assert limiter.log(logging.ERROR, "bad thing at %s", "/b", key="a")
    assert limiter.suppressed("a") == 0
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert messages == [
        (logging.WARNING, "bad thing at /a"),
        (logging.WARNING, "other thing"),
        (logging.ERROR, "bad thing at /b (5 more like it not logged in the last 30 s)"),
    ]


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s must be positive, got 0"):
        RateLimitedLog(logging.getLogger("x"), interval_s=0)
