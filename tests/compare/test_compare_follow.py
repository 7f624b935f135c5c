"""Follow compare workers (``compare run --follow``, issue 15): a long-running worker scores
a run as it grows; several on PostgreSQL split it by bucket locks without scoring a pair
twice, and a dead worker's buckets are taken over. Real PostgreSQL and SQLite, real worker
processes (the CLI) killed with real signals; the hashing encoder keeps them light."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shadoweval.compare.encoders import HashingEncoder
from shadoweval.compare.worker import CompareReport, follow_compare, shard_of
from shadoweval.process_death import die_with_parent_argv
from shadoweval.records import ReplayTarget
from shadoweval.storage import WORK_BUCKETS, Database, Repository, WorkLocks
from tests.compare.test_compare_worker import POISON, PoisonedEncoder
from tests.kafka_broker import free_port
from tests.storage.factories import BASELINE, CANDIDATE, make_exchange, make_outcome
from tests.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 120.0
"""Deadline of a wait on worker processes: only a hang runs out of it (2 loaded cores)."""


@pytest.fixture
def repo(db_url: str) -> Iterator[Repository]:
    with Database(db_url) as db:
        yield Repository(db)


def new_run(repo: Repository) -> str:
    return repo.create_run(
        name="follow", baseline=BASELINE, candidate=CANDIDATE, policy_hash="0" * 64,
        policy_yaml="version: 1\n",
    ).run_id  # fmt: skip


def add_pairs(repo: Repository, run_id: str, numbers: range, *, poison: int | None = None) -> None:
    """Exchanges ``numbers`` and their candidate outcomes (number ``poison`` cannot be scored)."""
    exchanges = [make_exchange(n) for n in numbers]
    repo.save_exchanges(run_id, exchanges)
    repo.save_outcomes(
        make_outcome(run_id, e.exchange_id, text=POISON if n == poison else f"answer {n}")
        for n, e in zip(numbers, exchanges, strict=True)
    )


def scored_ids(repo: Repository, run_id: str) -> list[str]:
    return [s.exchange_id for s in repo.load_pair_scores(run_id)]


# ---------------------------------------------------------------- the locks themselves


@pytest.mark.postgres
def test_a_bucket_lock_is_held_by_one_worker_and_freed_when_it_closes(pg_schema_url: str) -> None:
    with Database(pg_schema_url) as db:
        with WorkLocks(db, "run-a") as first, WorkLocks(db, "run-a") as second:
            assert first.advisory
            assert first.try_acquire(3)
            assert first.try_acquire(3)  # held once, re-taking is a no-op
            assert not second.try_acquire(3)
            assert second.try_acquire(4)
            with WorkLocks(db, "run-b") as other_run:
                assert other_run.try_acquire(3)  # another run's buckets are other locks
            first.release(3)
            assert second.try_acquire(3)
            assert second.held == frozenset({3, 4})
            first.try_acquire(5)
            first.close()  # a closed (or dead) session holds nothing
            assert second.try_acquire(5)
        with pytest.raises(ValueError, match=r"bucket must be in 0\.\.63"):
            WorkLocks(db, "run-a").try_acquire(WORK_BUCKETS)


def test_sqlite_has_no_advisory_locks_and_every_bucket_is_free(tmp_path: Path) -> None:
    with (
        Database(f"sqlite:///{tmp_path / 'x.db'}") as db,
        WorkLocks(db, "r") as first,
        WorkLocks(db, "r") as second,
    ):
        assert not first.advisory
        assert first.try_acquire(1)
        assert second.try_acquire(1)


# ------------------------------------------------------------------- in one process


def test_a_follow_worker_scores_a_growing_run_until_stopped(repo: Repository) -> None:
    run_id = new_run(repo)
    add_pairs(repo, run_id, range(0, 30))
    stop = threading.Event()
    result: list[CompareReport] = []
    locks = WorkLocks(repo.database, run_id)
    worker = threading.Thread(
        target=lambda: result.append(
            follow_compare(
                repo, run_id, PoisonedEncoder(), locks, stop, poll_interval_s=0.05, batch_size=7
            )
        )
    )
    worker.start()
    try:
        wait_until(lambda: len(scored_ids(repo, run_id)) == 30, "the first 30 pairs scored")
        add_pairs(repo, run_id, range(30, 55), poison=40)
        wait_until(lambda: len(scored_ids(repo, run_id)) == 54, "the 24 new scorable pairs")
        wait_until(
            lambda: len(repo.list_rejected(run_id, stage="compare")) == 1, "the poisoned pair kept"
        )
    finally:
        stop.set()
        worker.join(WAIT_S)
        locks.close()
    assert not worker.is_alive()
    (report,) = result
    assert report.scored == 54
    assert dict(report.rejected) == {"score_failed": 1}  # once: a follow worker does not retry
    assert report.polls is not None
    assert report.polls >= 2
    assert sorted(scored_ids(repo, run_id)) == sorted(f"ex-{n:05d}" for n in range(55) if n != 40)


def test_until_idle_returns_once_nothing_is_left(repo: Repository) -> None:
    run_id = new_run(repo)
    add_pairs(repo, run_id, range(12))
    with WorkLocks(repo.database, run_id) as locks:
        report = follow_compare(
            repo, run_id, HashingEncoder(), locks, threading.Event(),
            poll_interval_s=0.01, until_idle_s=0.0,
        )  # fmt: skip
    assert (report.scored, report.polls) == (12, 2)  # one poll scored, the next found nothing
    assert report.as_dict()["polls"] == 2


def test_bad_poll_interval_and_idle_are_refused(repo: Repository) -> None:
    from shadoweval.errors import ConfigError

    with WorkLocks(repo.database, "r") as locks:
        for kwargs in ({"poll_interval_s": 0.0}, {"poll_interval_s": 1.0, "until_idle_s": -1.0}):
            with pytest.raises(ConfigError, match="must be"):
                follow_compare(repo, "r", HashingEncoder(), locks, threading.Event(), **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------ worker processes (CLI)


class FollowWorker:
    """``shadow-eval compare run --follow`` as a child process (stdout/stderr in files)."""

    def __init__(self, url: str, run_id: str, log_dir: Path, name: str, *extra: str) -> None:
        self.stdout_path = log_dir / f"{name}.out"
        self.stderr_path = log_dir / f"{name}.err"
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SHADOWEVAL_DATABASE__URL": url}
        command = [
            sys.executable, "-m", "shadoweval.cli", "compare", "run", "--run-id", run_id,
            "--encoder", "hashing", "--follow", "--poll-interval-s", "0.1", *extra,
        ]  # fmt: skip
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                die_with_parent_argv(command),
                stdout=out,
                stderr=err,
                env=env,
                cwd=REPO_ROOT,
            )

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> dict[str, object]:
        """SIGTERM, wait, and return the JSON report it printed (it must exit 0)."""
        self.process.send_signal(signal.SIGTERM)
        return self.wait_report()

    def wait_report(self) -> dict[str, object]:
        code = self.process.wait(WAIT_S)
        assert code == 0, f"follow worker exited {code}: {self.stderr()[-3000:]}"
        report: dict[str, object] = json.loads(self.stdout_path.read_text(encoding="utf-8"))
        return report

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(WAIT_S)


@pytest.fixture
def workers() -> Iterator[list[FollowWorker]]:
    started: list[FollowWorker] = []
    yield started
    for worker in started:
        worker.kill()


@pytest.mark.postgres
def test_two_follow_workers_split_a_growing_run_without_scoring_a_pair_twice(
    pg_schema_url: str, tmp_path: Path, workers: list[FollowWorker]
) -> None:
    with Database(pg_schema_url) as db:
        db.upgrade()
        repo = Repository(db)
        run_id = new_run(repo)
        add_pairs(repo, run_id, range(0, 150))
        workers += [FollowWorker(pg_schema_url, run_id, tmp_path, f"w{i}") for i in range(2)]
        wait_until(lambda: len(scored_ids(repo, run_id)) > 0, "the first scores", WAIT_S)
        for start in range(150, 600, 50):  # the run grows while they score
            add_pairs(repo, run_id, range(start, start + 50))
        wait_until(lambda: len(scored_ids(repo, run_id)) == 600, "all 600 pairs", WAIT_S)
        reports = [w.stop() for w in workers]  # SIGTERM: each writes what it holds, exits 0
        scored = [int(str(r["scored"])) for r in reports]
        assert sum(scored) == 600, scored  # no pair scored by both workers
        ids = scored_ids(repo, run_id)
        assert len(ids) == len(set(ids)) == 600


@pytest.mark.postgres
def test_a_dead_workers_buckets_are_taken_over(
    pg_schema_url: str, tmp_path: Path, workers: list[FollowWorker]
) -> None:
    """A process holding every bucket (as a worker busy on all of them would) is SIGKILLed:
    PostgreSQL drops its locks with its connection and the live worker scores everything."""
    with Database(pg_schema_url) as db:
        db.upgrade()
        repo = Repository(db)
        run_id = new_run(repo)
        add_pairs(repo, run_id, range(80))
        holder = subprocess.Popen(
            die_with_parent_argv([sys.executable, "-c", HOLD_ALL_BUCKETS, pg_schema_url, run_id]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )  # fmt: skip
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == b"held 64"
            survivor = FollowWorker(pg_schema_url, run_id, tmp_path, "survivor")
            workers.append(survivor)
            busy = len({shard_of(f"ex-{n:05d}", WORK_BUCKETS) for n in range(80)})
            wait_until(
                lambda: f"{busy} buckets with work are held by other workers" in survivor.stderr(),
                "the worker to find every bucket taken",
                WAIT_S,
            )
            assert scored_ids(repo, run_id) == []
            holder.kill()
            holder.wait(WAIT_S)
            wait_until(lambda: len(scored_ids(repo, run_id)) == 80, "all 80 pairs", WAIT_S)
        finally:
            if holder.poll() is None:
                holder.kill()
            holder.wait(WAIT_S)
            for pipe in (holder.stdin, holder.stdout):
                if pipe is not None:
                    pipe.close()
        assert int(str(survivor.stop()["scored"])) == 80


HOLD_ALL_BUCKETS = """
import sys
from shadoweval.storage import WORK_BUCKETS, Database, WorkLocks
locks = WorkLocks(Database(sys.argv[1]), sys.argv[2])
held = sum(locks.try_acquire(b) for b in range(WORK_BUCKETS))
print("held", held, flush=True)
sys.stdin.read()
"""


@pytest.mark.postgres
def test_one_of_two_workers_sigkilled_mid_run_the_other_finishes(
    pg_schema_url: str, tmp_path: Path, workers: list[FollowWorker]
) -> None:
    with Database(pg_schema_url) as db:
        db.upgrade()
        repo = Repository(db)
        run_id = new_run(repo)
        add_pairs(repo, run_id, range(0, 300))
        victim, survivor = (FollowWorker(pg_schema_url, run_id, tmp_path, n) for n in "vs")
        workers += [victim, survivor]
        wait_until(lambda: len(scored_ids(repo, run_id)) > 0, "the first scores", WAIT_S)
        victim.kill()  # SIGKILL: no batch finished, no lock released by the worker
        assert victim.process.returncode == -signal.SIGKILL
        add_pairs(repo, run_id, range(300, 500))
        wait_until(lambda: len(scored_ids(repo, run_id)) == 500, "all 500 pairs", WAIT_S)
        report = survivor.stop()
        assert int(str(report["scored"])) <= 500
        ids = scored_ids(repo, run_id)
        assert len(ids) == len(set(ids)) == 500


@pytest.mark.postgres
def test_sigterm_mid_run_writes_what_was_scored_and_exits_0(
    pg_schema_url: str, tmp_path: Path, workers: list[FollowWorker]
) -> None:
    """SIGTERM while a backlog is being scored: the worker finishes the batch in hand,
    writes it and exits 0; what it reports is exactly what is stored. Its probes and
    metrics answer while it runs."""
    port = free_port()
    with Database(pg_schema_url) as db:
        db.upgrade()
        repo = Repository(db)
        run_id = new_run(repo)
        add_pairs(repo, run_id, range(3000))
        worker = FollowWorker(
            pg_schema_url, run_id, tmp_path, "sigterm", "--metrics-port", str(port)
        )
        workers.append(worker)
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert worker.process.poll() is None, worker.stderr()[-3000:]
            try:
                return httpx.get(f"{base}/readyz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, "the worker's /readyz", WAIT_S)
        wait_until(lambda: len(scored_ids(repo, run_id)) > 0, "the first scores", WAIT_S)
        assert httpx.get(f"{base}/healthz", timeout=5).text == "ok\n"
        scraped = httpx.get(f"{base}/metrics", timeout=5).text
        assert "shadoweval_compare_scored_total" in scraped
        assert "shadoweval_compare_unscored_pairs" in scraped
        report = worker.stop()
        stored = len(scored_ids(repo, run_id))
        assert report["scored"] == stored
        print(f"stored at SIGTERM: {stored} of 3000")
        assert 0 < stored <= 3000


def test_a_single_follow_worker_on_sqlite_exits_when_idle(
    tmp_path: Path, workers: list[FollowWorker]
) -> None:
    url = f"sqlite:///{tmp_path / 'follow.db'}"
    with Database(url) as db:
        db.upgrade()
        repo = Repository(db)
        run_id = new_run(repo)
        add_pairs(repo, run_id, range(40))
        worker = FollowWorker(url, run_id, tmp_path, "solo", "--until-idle-s", "0.5")
        workers.append(worker)
        report = worker.wait_report()  # exits 0 on its own once nothing is new
        assert report["scored"] == 40
        assert int(str(report["polls"])) >= 2
        assert len(scored_ids(repo, run_id)) == 40


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--workers", "2"), "cannot be combined with --follow"),
        (("--shard", "0/2"), "cannot be combined with --follow"),
        (("--rescore",), "--rescore cannot be combined with --follow"),
        (("--poll-interval-s", "0"), "poll_interval_s must be > 0"),
    ],
)
def test_follow_refuses_what_it_cannot_do(
    tmp_path: Path, workers: list[FollowWorker], extra: tuple[str, ...], message: str
) -> None:
    url = f"sqlite:///{tmp_path / 'refuse.db'}"
    with Database(url) as db:
        db.upgrade()
        run_id = new_run(Repository(db))
    worker = FollowWorker(url, run_id, tmp_path, "refused", *extra)
    workers.append(worker)
    assert worker.process.wait(WAIT_S) == 3
    assert message in " ".join(worker.stderr().split())


# ------------------------------------------------------------ baseline repeats


def test_a_pair_sampled_for_a_baseline_repeat_waits_for_the_repeat(repo: Repository) -> None:
    """The replay worker stores each target's outcome as it finishes: a pair scored before
    its baseline repeat arrived would lose its noise estimate, so it waits."""
    run_id = new_run(repo)
    add_pairs(repo, run_id, range(20))
    sampled = {"ex-00003", "ex-00007"}
    stop = threading.Event()
    result: list[CompareReport] = []
    locks = WorkLocks(repo.database, run_id)
    worker = threading.Thread(
        target=lambda: result.append(
            follow_compare(
                repo, run_id, HashingEncoder(), locks, stop, poll_interval_s=0.05,
                expects_repeat=sampled.__contains__,
            )
        )
    )  # fmt: skip
    worker.start()
    try:
        wait_until(lambda: len(scored_ids(repo, run_id)) == 18, "the 18 pairs without a repeat")
        assert sampled.isdisjoint(scored_ids(repo, run_id))
        repo.save_outcomes(
            make_outcome(run_id, i, target=ReplayTarget.BASELINE_REPEAT, text="Hallo 👋 zurück")
            for i in sorted(sampled)
        )
        wait_until(lambda: len(scored_ids(repo, run_id)) == 20, "the two repeated pairs")
    finally:
        stop.set()
        worker.join(WAIT_S)
        locks.close()
    assert result[0].scored == 20
    noise = {s.exchange_id: s.noise_similarity for s in repo.load_pair_scores(run_id)}
    assert all(noise[i] is not None for i in sampled)


def test_follow_stored_run_reads_the_runs_replica_sample(repo: Repository) -> None:
    from shadoweval.application.scoring import ScoringOptions, follow_stored_run

    run_id = repo.create_run(
        name="follow", baseline=BASELINE, candidate=CANDIDATE, policy_hash="0" * 64,
        policy_yaml="version: 1\n",
        settings={"baseline_repeat_url": "http://replica:8000", "baseline_repeat_share": 1.0},
    ).run_id  # fmt: skip
    add_pairs(repo, run_id, range(6))
    options = ScoringOptions(encoder="hashing")

    def follow_until_idle() -> CompareReport:
        return follow_stored_run(
            repo, run_id, options, threading.Event(), poll_interval_s=0.01, until_idle_s=0.0
        )

    assert follow_until_idle().scored == 0  # share 1.0: every pair waits for its repeat
    repo.save_outcomes(
        make_outcome(run_id, f"ex-{n:05d}", target=ReplayTarget.BASELINE_REPEAT) for n in range(6)
    )
    assert follow_until_idle().scored == 6


def test_a_follow_worker_started_before_its_run_waits_for_it(repo: Repository) -> None:
    """Compose and Kubernetes start compare workers beside the replay workers: the run is
    created by the first replay worker later, and the compare worker must not crash-loop."""
    from shadoweval.application.scoring import ScoringOptions, follow_stored_run

    stop = threading.Event()
    result: list[CompareReport] = []
    worker = threading.Thread(
        target=lambda: result.append(
            follow_stored_run(
                repo, "later-run", ScoringOptions(encoder="hashing"), stop, poll_interval_s=0.05
            )
        )
    )
    worker.start()
    try:
        repo.create_run(
            name="follow", baseline=BASELINE, candidate=CANDIDATE, policy_hash="0" * 64,
            policy_yaml="version: 1\n", run_id="later-run",
        )  # fmt: skip
        add_pairs(repo, "later-run", range(8))
        wait_until(lambda: len(scored_ids(repo, "later-run")) == 8, "the late run's pairs scored")
    finally:
        stop.set()
        worker.join(WAIT_S)
    assert not worker.is_alive()
    assert result[0].scored == 8


def test_a_run_that_never_appears_is_reported_after_the_idle_time(repo: Repository) -> None:
    from shadoweval.application.scoring import ScoringOptions, follow_stored_run
    from shadoweval.errors import ShadowEvalError

    with pytest.raises(ShadowEvalError, match="run 'absent' not found"):
        follow_stored_run(
            repo, "absent", ScoringOptions(encoder="hashing"), threading.Event(),
            poll_interval_s=0.01, until_idle_s=0.05,
        )  # fmt: skip


def test_a_worker_waiting_for_its_run_is_live_not_ready_and_stops_with_0(
    tmp_path: Path, workers: list[FollowWorker]
) -> None:
    """Kubernetes probes a compare pod long before the first record creates the run: the
    worker must answer liveness at once, refuse readiness, and exit 0 on SIGTERM."""
    url = f"sqlite:///{tmp_path / 'waiting.db'}"
    with Database(url) as db:
        db.upgrade()
    port = free_port()
    worker = FollowWorker(url, "not-yet", tmp_path, "waiting", "--metrics-port", str(port))
    workers.append(worker)
    base = f"http://127.0.0.1:{port}"

    def live() -> bool:
        assert worker.process.poll() is None, worker.stderr()[-3000:]
        try:
            return httpx.get(f"{base}/healthz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(live, "the waiting worker's /healthz", WAIT_S)
    assert httpx.get(f"{base}/readyz", timeout=5).status_code == 503
    wait_until(lambda: "does not exist yet" in worker.stderr(), "the waiting log line", WAIT_S)
    report = worker.stop()
    assert report["scored"] == 0
