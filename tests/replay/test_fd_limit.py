"""The open-file limit is raised for the pool's connections, or the run refuses to start."""

from __future__ import annotations

import resource

import pytest

from shadoweval.errors import ConfigError
from shadoweval.http1.fd_limit import ensure_fd_limit


class Limits:
    """An injected RLIMIT_NOFILE (soft, hard); records what was set."""

    def __init__(self, soft: int, hard: int) -> None:
        self.soft, self.hard = soft, hard
        self.set_to: tuple[int, int] | None = None

    def get(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def set(self, which: int, limits: tuple[int, int]) -> None:
        self.set_to = limits
        self.soft, self.hard = limits


def test_enough_already_changes_nothing() -> None:
    limits = Limits(4096, 4096)
    assert ensure_fd_limit(256, getrlimit=limits.get, setrlimit=limits.set) == 4096
    assert limits.set_to is None


def test_soft_limit_is_raised_towards_the_hard_limit() -> None:
    limits = Limits(1024, 1_048_576)
    assert ensure_fd_limit(1024, getrlimit=limits.get, setrlimit=limits.set) == 1024 + 64
    assert limits.set_to == (1024 + 64, 1_048_576)


def test_hard_limit_too_low_names_the_setting_and_both_numbers() -> None:
    limits = Limits(256, 512)
    with pytest.raises(ConfigError) as info:
        ensure_fd_limit(1024, getrlimit=limits.get, setrlimit=limits.set)
    assert info.value.field == "replay.concurrency"
    assert info.value.value == 1024
    message = str(info.value)
    assert "replay.concurrency=1024" in message
    assert "soft 512" in message
    assert "hard 512" in message
