"""Fixtures of the judge tests: pairs to judge and a mock judge on a real socket."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from shadoweval.judge import Answer, JudgeClient, PairText
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_judge import JudgeState

GOOD = "Paris is the capital of France."
BAD = "The capital of France is Lyon, a city famous for its cheese."


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_pair(
    n: int = 0,
    *,
    baseline: str = BAD,
    candidate: str = GOOD,
    task_type: str = "chat",
    user: str = "What is the capital of France?",
    stratum: int | None = 1,
) -> PairText:
    """A pair whose candidate answers better than its baseline (by default)."""
    return PairText(
        run_id="run-j",
        exchange_id=f"ex-{n:05d}",
        task_type=task_type,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": user}],
        baseline=Answer(text=baseline),
        candidate=Answer(text=candidate),
        stratum=stratum,
    )


@contextmanager
def serving(app: Any) -> Iterator[tuple[str, JudgeState]]:
    """Serve ``app`` (a mock judge) on a loopback port; yield its URL and state."""
    with BackgroundServer(app, start_timeout_s=60.0) as server:
        yield server.url, app.state.judge


def client(url: str, **kwargs: Any) -> JudgeClient:
    """A judge client with the tests' defaults (key, seed, fast backoff)."""
    options: dict[str, Any] = {
        "model": "judge-test",
        "api_key": "judge-key-123",
        "seed": 11,
        "backoff_s": 0.001,
        "timeout_s": 30.0,
    }
    options.update(kwargs)
    return JudgeClient(url, **options)
