"""The canary split with the real Envoy binary and two real mock-llm servers.

The baseline mock-llm answers as model ``baseline-v1``, the candidate as ``candidate-v2``:
which version served a request is read from the response body (its ``model``) and from the
captured exchange (``Exchange.served_by``). Share changes are written with
:func:`shadoweval.capture.canary_split.write_split` and waited on through Envoy's admin
(``version_info`` of the dynamic route configuration), never a sleep.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import httpx
import orjson
import pytest

from shadoweval.capture.canary_split import (
    ARM_HEADER,
    BASELINE_CLUSTER,
    CANDIDATE_CLUSTER,
    WEIGHT_TOTAL,
    Split,
    applied_revision,
    write_split,
)
from shadoweval.capture.envoy_config import EnvoyConfigSpec, render_envoy_config
from shadoweval.capture.session_router import stable_bucket
from shadoweval.config import CaptureSettings, EnvoyCanarySettings, EnvoySettings
from shadoweval.records import Exchange, ExchangeOutcome
from shadoweval.simulation.mock_llm import FaultConfig, create_app
from shadoweval.simulation.mock_llm.latency import Delays, LatencyProfile
from shadoweval.tables import RecordedRow
from tests.capture.envoy_harness import FrontEndThread, envoy_binary
from tests.capture.test_envoy_front import CollectingSink
from tests.capture.upstreams import ScriptedUpstream, ServerThread
from tests.waiting import wait_until

CHAT = "/v1/chat/completions"
BASELINE, CANDIDATE = "baseline-v1", "candidate-v2"
MODEL_OF_CLUSTER = {BASELINE_CLUSTER: BASELINE, CANDIDATE_CLUSTER: CANDIDATE}
HELLO = [{"role": "user", "content": "hello"}]
SLOW = [{"role": "user", "content": "tell me a long story slowly"}]
SLOW_PIECES = 100


def _row(key: str, messages: list[dict[str, str]], text: str) -> RecordedRow:
    return RecordedRow(
        key=key,
        messages=messages,
        tools=None,
        output_text=text,
        tool_calls=(),
        task_type="default",
        model=None,
        latency_ms=None,
        ttft_ms=None,
        itl_ms=None,
        prompt_tokens=None,
        completion_tokens=None,
        location=f"test#{key}",
    )


ROWS = [
    _row("hello", HELLO, "hello there"),
    _row("slow", SLOW, " ".join(f"word{i}" for i in range(SLOW_PIECES))),
]


@dataclass(frozen=True, slots=True)
class SlowStoryLatency(LatencyProfile):
    """No delay, except the slow story: 50 ms between pieces (a stream that lasts ~5 s)."""

    def delays(self, row: RecordedRow, pieces: int, rng: random.Random) -> Delays:
        return Delays(0.0, 0.05) if row.key == "slow" else Delays(0.0, 0.0)

    def describe(self) -> str:
        return "slow story"


def _mock(model: str) -> ServerThread:
    app = create_app(
        ROWS, latency=SlowStoryLatency(), faults=FaultConfig(), seed=0, model_name=model
    )
    return ServerThread(app)


@pytest.fixture(scope="module")
def models() -> Iterator[tuple[str, str]]:
    with _mock(BASELINE) as baseline, _mock(CANDIDATE) as candidate:
        yield baseline.url, candidate.url


ROUTER_TIMEOUT_MS = 10_000
"""Envoy's wait for the session router in these tests (see :class:`CanaryFront`)."""


class CanaryFront:
    """The front end with the canary on, a collecting sink (or, with ``log_dir``, the real
    file sink writing a capture log there), and split helpers."""

    def __init__(
        self,
        baseline_url: str,
        candidate_url: str,
        split_dir: Path,
        *,
        log_dir: Path | None = None,
    ) -> None:
        self.sink = CollectingSink()
        self.split_dir = split_dir
        capture = (
            CaptureSettings(upstream_url=baseline_url)
            if log_dir is None
            else CaptureSettings(
                upstream_url=baseline_url, sinks=("file",), file_sink_directory=str(log_dir)
            )
        )
        envoy = EnvoySettings(
            deferred_close_timeout_s=1.0,
            # A generous wait for the router: these tests check the router's decisions
            # (pins, rollback); under a loaded CI machine the production default (20 ms)
            # can pass, and then Envoy's weighted fallback decides instead, which by design
            # may move a session at a share change (docs/capture.md, "Canary split").
            canary=EnvoyCanarySettings(
                candidate_url=candidate_url,
                split_dir=split_dir,
                router_port=0,
                router_timeout_ms=ROUTER_TIMEOUT_MS,
            ),
        )
        sinks = {"sinks": [self.sink]} if log_dir is None else {}
        self.harness = FrontEndThread(capture, envoy, builder_mode="inline", **sinks)
        self.revision = 0
        self.router_stopped = False

    def __enter__(self) -> Self:
        self.harness.__enter__()
        return self

    def __exit__(self, *_: object) -> None:
        self.harness.__exit__()

    @property
    def spec(self) -> EnvoyConfigSpec:
        front = self.harness.front
        return EnvoyConfigSpec.from_settings(front.capture, front.envoy)

    def applied(self) -> int | None:
        return asyncio.run(applied_revision(self.harness.envoy_admin_url))

    def set_share(self, share: float) -> None:
        """Write the next revision at ``share``; wait until Envoy and the router (unless
        :meth:`stop_router` stopped it) apply it."""
        self.revision += 1
        revision = self.revision
        write_split(self.split_dir, self.spec, Split(candidate_share=share, revision=revision))
        self.wait_applied(revision)

    def wait_applied(self, revision: int) -> None:
        """Wait until Envoy and the router (unless stopped) apply split ``revision``."""
        wait_until(lambda: self.applied() == revision, f"Envoy to apply split {revision}")
        if self.router_stopped:
            return
        wait_until(
            lambda: self.router_revision() == revision, f"the router process to read {revision}"
        )

    def router_revision(self) -> int | None:
        """The split revision the session router's process applies (``None``: no answer)."""
        return self.harness.run(self.harness.front.router_revision())

    def stop_router(self) -> None:
        """Stop the session router's process (not restarted): Envoy's fallback serves."""
        self.harness.run(self.harness.front.stop_router())
        self.router_stopped = True

    def chat(
        self, client: httpx.Client, session: str | None, headers: dict[str, str] | None = None
    ) -> str:
        """One non-streamed chat turn; the model that answered (from the body)."""
        sent = dict(headers or {})
        if session is not None:
            sent["x-session-id"] = session
        body = orjson.dumps({"model": "m", "messages": HELLO})
        resp = client.post(f"{self.harness.url}{CHAT}", content=body, headers=sent)
        assert resp.status_code == 200, resp.text
        model = resp.json()["model"]
        assert model in (BASELINE, CANDIDATE)
        return str(model)

    def captured(self, n: int) -> list[Exchange]:
        return self.sink.wait(n, f"{n} captured exchanges")


@pytest.fixture
def canary(models: tuple[str, str], tmp_path: Path) -> Iterator[CanaryFront]:
    with CanaryFront(models[0], models[1], tmp_path / "split") as front:
        yield front


def _served(ex: Exchange) -> str:
    """The model that answered a captured exchange, by its cluster (served_by)."""
    assert ex.served_by in MODEL_OF_CLUSTER, ex.served_by
    return MODEL_OF_CLUSTER[ex.served_by]


# -- configuration ---------------------------------------------------------------------------


def test_canary_config_is_valid_for_the_real_envoy(tmp_path: Path) -> None:
    from shadoweval.capture.envoy_config import CanarySpec

    spec = EnvoyConfigSpec(
        upstream_url="https://models.internal:8443",
        canary=CanarySpec(candidate_url="http://candidate.internal:8000", split_dir=tmp_path),
    )
    write_split(tmp_path, spec, Split(candidate_share=0.25, revision=3))
    config = tmp_path / "envoy.yaml"
    config.write_text(render_envoy_config(spec))
    result = subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(config), "--disable-hot-restart"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout + result.stderr


def test_front_writes_revision_0_all_baseline(canary: CanaryFront) -> None:
    assert canary.applied() == 0
    proc = canary.harness.front.envoy_process
    assert proc is not None
    assert asyncio.run(applied_revision(proc)) == 0
    assert (canary.split_dir / "split.yaml").exists()
    assert (canary.split_dir / "split.0.yaml").exists()


# -- the split ------------------------------------------------------------------------------


def test_share_0_all_baseline_share_1_every_new_session_candidate(canary: CanaryFront) -> None:
    with httpx.Client(timeout=30) as client:
        at_zero = [canary.chat(client, f"s-{i}") for i in range(20)]
        assert set(at_zero) == {BASELINE}
        canary.set_share(1.0)
        # the sessions seen at share 0 are pinned there: at full rollout they finish on the
        # baseline; every new session goes to the candidate
        assert {canary.chat(client, f"s-{i}") for i in range(3)} == {BASELINE}
        at_one = [canary.chat(client, f"new-{i}") for i in range(20)]
        assert set(at_one) == {CANDIDATE}
        # no session key at all: the same
        assert {canary.chat(client, None) for _ in range(5)} == {CANDIDATE}
    exchanges = canary.captured(48)
    assert sorted(_served(ex) for ex in exchanges) == sorted(
        at_zero + [BASELINE] * 3 + at_one + [CANDIDATE] * 5
    )
    assert all(ex.outcome is ExchangeOutcome.DONE for ex in exchanges)
    assert {ex.response.model for ex in exchanges if ex.response} == {BASELINE, CANDIDATE}
    # the router's decisions are counted on the front end's registry
    harness = canary.harness
    assert (
        harness.metric("shadoweval_canary_decisions_total", arm="baseline", reason="rolled_back")
        == 20
    )
    assert harness.metric("shadoweval_canary_decisions_total", arm="candidate", reason="full") == 25
    assert harness.metric("shadoweval_canary_decisions_total", arm="baseline", reason="pinned") == 3


def test_half_share_splits_sessions_by_the_stable_bucket(canary: CanaryFront) -> None:
    canary.set_share(0.5)
    sessions = [f"half-{i}" for i in range(100)]
    with httpx.Client(timeout=30) as client:
        served = {s: canary.chat(client, s) for s in sessions}
    expected = {
        s: CANDIDATE if stable_bucket(s) < WEIGHT_TOTAL // 2 else BASELINE for s in sessions
    }
    assert served == expected
    assert set(served.values()) == {BASELINE, CANDIDATE}


def test_sessions_stay_on_their_version_while_the_share_rises(canary: CanaryFront) -> None:
    sessions = [f"sticky-{i}" for i in range(40)]
    seen: dict[str, set[str]] = {s: set() for s in sessions}
    turns = 0
    with httpx.Client(timeout=30) as client:
        for share in (0.1, 0.5, 0.9):
            canary.set_share(share)
            for _turn in range(3):
                for s in sessions:
                    seen[s].add(canary.chat(client, s))
                    turns += 1
        # no session ever changed version (the response bodies)...
        assert all(len(models) == 1 for models in seen.values()), seen
        first = {s: next(iter(m)) for s, m in seen.items()}
        # ...and they landed by the monotone rule at the share they were first seen at
        assert first == {s: CANDIDATE if stable_bucket(s) < 1000 else BASELINE for s in sessions}
        exchanges = canary.captured(turns)
        # ...nor by the captured records
        by_session: dict[str | None, set[str]] = {}
        for ex in exchanges:
            by_session.setdefault(ex.session_key_hash, set()).add(_served(ex))
        assert len(by_session) == len(sessions)
        assert all(len(models) == 1 for models in by_session.values())
        # rollback: every session on baseline at its next request
        canary.set_share(0.0)
        assert {canary.chat(client, s) for s in sessions} == {BASELINE}
    later = canary.captured(turns + len(sessions))[turns:]
    assert {_served(ex) for ex in later} == {BASELINE}


def test_a_stream_in_flight_at_a_switch_completes_on_its_version(canary: CanaryFront) -> None:
    canary.set_share(1.0)
    body = orjson.dumps({"model": "m", "messages": SLOW, "stream": True})
    lines: list[str] = []
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST", f"{canary.harness.url}{CHAT}", content=body, headers={"x-session-id": "slow"}
        ) as resp,
    ):
        assert resp.status_code == 200
        reader = resp.iter_lines()
        lines.append(next(line for line in reader if line.startswith("data: ")))
        canary.set_share(0.0)  # rollback while the candidate's stream runs
        # the stream is still in flight in Envoy after the switch was applied
        active = canary.harness.envoy_stats("http.live.downstream_rq_active")
        assert active.get("http.live.downstream_rq_active", 0) >= 1, active
        # a new request of the same session goes to the baseline now
        assert canary.chat(client, "slow") == BASELINE
        lines.extend(line for line in reader if line.startswith("data: "))
    assert lines[-1] == "data: [DONE]"
    chunks = [orjson.loads(line[6:]) for line in lines[:-1]]
    assert {c["model"] for c in chunks} == {CANDIDATE}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == ROWS[1].output_text
    exchanges = canary.captured(2)
    streamed = next(ex for ex in exchanges if ex.response and ex.response.streamed)
    assert streamed.served_by == CANDIDATE_CLUSTER
    assert streamed.outcome is ExchangeOutcome.DONE
    assert streamed.response is not None
    assert streamed.response.text == ROWS[1].output_text
    other = next(ex for ex in exchanges if ex is not streamed)
    assert other.served_by == BASELINE_CLUSTER


# -- failures and hostile clients -----------------------------------------------------------


def test_router_down_requests_are_still_served_by_the_weighted_fallback(
    canary: CanaryFront,
) -> None:
    canary.set_share(0.5)
    canary.stop_router()
    assert canary.router_revision() is None
    sessions = [f"down-{i}" for i in range(60)]
    with httpx.Client(timeout=30) as client:
        first = {s: canary.chat(client, s) for s in sessions}
        again = {s: canary.chat(client, s) for s in sessions}
        no_key = [canary.chat(client, None) for _ in range(10)]
    # every request was served; the fallback hashes the session header: same arm again,
    # and the arm the router's bucket rule gives (Envoy's xxHash64 of the header)
    assert first == again
    assert first == {
        s: CANDIDATE if stable_bucket(s) < WEIGHT_TOTAL // 2 else BASELINE for s in sessions
    }
    assert set(first.values()) == {BASELINE, CANDIDATE}
    assert len(no_key) == 10
    stats = canary.harness.envoy_stats("http.live.ext_proc.shadow_eval_router.")
    assert stats.get("http.live.ext_proc.shadow_eval_router.failure_mode_allowed", 0) >= 1, stats
    exchanges = canary.captured(130)
    assert {ex.served_by for ex in exchanges} == {BASELINE_CLUSTER, CANDIDATE_CLUSTER}


def test_a_router_process_that_dies_is_counted_and_restarted(canary: CanaryFront) -> None:
    canary.set_share(0.5)
    front = canary.harness.front
    router = front.router_process
    assert router is not None
    assert router.process is not None
    first_pid = router.process.pid
    assert first_pid is not None
    # the router has its own process, at the priority the service started with
    assert first_pid != os.getpid()
    assert os.getpriority(os.PRIO_PROCESS, first_pid) == os.getpriority(os.PRIO_PROCESS, 0)
    os.kill(first_pid, signal.SIGKILL)
    with httpx.Client(timeout=30) as client:
        # served whether the router is down (Envoy's fallback) or already back
        served = {s: canary.chat(client, s) for s in (f"dies-{i}" for i in range(10))}
    assert served == {
        s: CANDIDATE if stable_bucket(s) < WEIGHT_TOTAL // 2 else BASELINE for s in served
    }
    harness = canary.harness
    wait_until(
        lambda: harness.metric("shadoweval_canary_router_restarts_total") == 1,
        "the router process to be restarted",
    )
    assert harness.metric("shadoweval_canary_router_exits_total") == 1
    assert front.router_port == router.port
    assert canary.router_revision() == canary.revision
    canary.set_share(0.0)
    with httpx.Client(timeout=30) as client:
        assert {canary.chat(client, s) for s in served} == {BASELINE}
    # Envoy reached the restarted router (its counters start again at 0)
    assert (
        harness.metric("shadoweval_canary_decisions_total", arm="baseline", reason="rolled_back")
        == 10
    )
    ready = httpx.get(f"{harness.admin_url}/readyz", timeout=30)
    assert ready.status_code == 200


def test_a_client_sent_arm_header_does_not_choose_the_arm(canary: CanaryFront) -> None:
    with httpx.Client(timeout=30) as client:
        assert canary.chat(client, "c1", {ARM_HEADER: "candidate"}) == BASELINE
        assert canary.chat(client, None, {ARM_HEADER: "candidate"}) == BASELINE
        canary.set_share(1.0)
        assert canary.chat(client, "c2", {ARM_HEADER: "baseline"}) == CANDIDATE
        # with the router down too (the early header mutation removed it before routing)
        canary.stop_router()
        canary.set_share(0.0)
        assert canary.chat(client, "c3", {ARM_HEADER: "candidate"}) == BASELINE


def test_the_arm_header_never_reaches_an_upstream(models: tuple[str, str], tmp_path: Path) -> None:
    app = ScriptedUpstream()
    with ServerThread(app) as scripted, CanaryFront(scripted.url, models[1], tmp_path) as front:
        with httpx.Client(timeout=30) as client:
            for headers in ({}, {ARM_HEADER: "candidate"}, {ARM_HEADER: "baseline"}):
                resp = client.post(
                    f"{front.harness.url}{CHAT}?mode=echo",
                    content=b'{"model": "m", "messages": []}',
                    headers={"x-session-id": "h", **headers},
                )
                assert resp.status_code == 200
        assert len(app.log.requests) == 3
        for request in app.log.requests:
            names = {name.lower() for name, _ in request["headers"]}
            assert ARM_HEADER not in names, request["headers"]


def test_an_unreachable_candidate_is_captured_as_its_error(
    models: tuple[str, str], tmp_path: Path
) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with CanaryFront(models[0], closed, tmp_path) as front, httpx.Client(timeout=30) as client:
        front.set_share(1.0)
        body = orjson.dumps({"model": "m", "messages": HELLO})
        resp = client.post(
            f"{front.harness.url}{CHAT}", content=body, headers={"x-session-id": "u"}
        )
        assert resp.status_code == 503
        (ex,) = front.captured(1)
        assert ex.outcome is ExchangeOutcome.ERROR
        assert ex.served_by == CANDIDATE_CLUSTER
        front.set_share(0.0)  # the rollback serves the session again
        assert front.chat(client, "u") == BASELINE
