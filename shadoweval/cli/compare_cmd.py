"""``shadow-eval compare run``: score a run's replayed pairs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from shadoweval.cli.option_groups import takes_option_groups
from shadoweval.cli.options import EncoderOptions, StoredRunOptions
from shadoweval.cli.render import exit_on_error
from shadoweval.log_limits import LOG_FORMAT
from shadoweval.ports import COMPARE_METRICS_PORT

if TYPE_CHECKING:
    from shadoweval.application.scoring import CompareReport, ScoringOptions

compare_app = typer.Typer(help="Score replayed pairs.", no_args_is_help=True)

RescoreOpt = Annotated[
    bool, typer.Option("--rescore", help="Score every pair again, not only new ones.")
]
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        min=1,
        help="Compare processes on this machine, each scoring a contiguous range of "
        "exchange ids (default SHADOWEVAL_COMPARE__WORKERS, 1).",
    ),
]
ShardOpt = Annotated[
    str | None,
    typer.Option(
        "--shard",
        metavar="I/N",
        help="Score only shard I of N (0 <= I < N, a stable split by exchange id): "
        "N machines running shards 0/N … N-1/N cover the run exactly once.",
    ),
]
NoEmbeddingCacheOpt = Annotated[
    bool,
    typer.Option(
        "--no-embedding-cache",
        help="Embed every text; neither read nor write the database's embedding cache.",
    ),
]
FollowOpt = Annotated[
    bool,
    typer.Option(
        "--follow",
        help="Keep running: score new pairs as they are replayed, poll again, until "
        "SIGTERM/SIGINT (the batch in hand is written, exit 0) or --until-idle-s. "
        "Several --follow workers on PostgreSQL split the run by bucket locks.",
    ),
]
PollIntervalOpt = Annotated[
    float | None,
    typer.Option(
        "--poll-interval-s",
        help="--follow: seconds to wait after a poll that found nothing "
        "(default SHADOWEVAL_COMPARE__POLL_INTERVAL_S, 2.0).",
    ),
]
UntilIdleOpt = Annotated[
    float | None,
    typer.Option(
        "--until-idle-s",
        help="--follow: exit 0 after this many seconds with nothing new to score "
        "(default: run until signalled).",
    ),
]
FollowMetricsPortOpt = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        help="--follow: serve /metrics, /healthz and /readyz on this port "
        "(default: SHADOWEVAL_COMPARE__METRICS_PORT, else none; the docs and deploy files "
        f"use {COMPARE_METRICS_PORT}).",
    ),
]


@compare_app.command("run")
@takes_option_groups
def compare_run_command(
    run: StoredRunOptions,
    scoring: EncoderOptions = EncoderOptions(),
    rescore: RescoreOpt = False,
    workers: WorkersOpt = None,
    shard: ShardOpt = None,
    no_embedding_cache: NoEmbeddingCacheOpt = False,
    follow: FollowOpt = False,
    poll_interval_s: PollIntervalOpt = None,
    until_idle_s: UntilIdleOpt = None,
    metrics_port: FollowMetricsPortOpt = None,
) -> None:
    """Score every replayed pair of a run not scored yet (similarity, formats, harms, latency).

    The refusal detector's patterns come from ``SHADOWEVAL_COMPARE__REFUSAL_PATTERNS``
    (default: the built-in set); another local sentence-transformers model from
    ``SHADOWEVAL_COMPARE__MODEL_PATH``, with the scripts it covers in
    ``SHADOWEVAL_COMPARE__MODEL_SCRIPTS`` (default ``["Latin"]``); the embedding cache is on unless
    ``--no-embedding-cache`` or ``SHADOWEVAL_COMPARE__EMBEDDING_CACHE=false``. Prints the
    counts as JSON (``embedding_cache`` hits and misses, ``workers``, the ``backend`` used
    and, for ``--backend auto``, ``backend_choice``: what was measured). Exit 3 on error,
    including a failed worker process (named with its exchange-id range and exit code).

    ``--follow`` runs one long-lived worker (``polls`` is added to the counts printed at
    exit); ``--workers``, ``--shard`` and ``--rescore`` are refused with it (run more
    follow workers instead: on PostgreSQL they split the run by 64 bucket locks and take
    over a dead worker's share; on SQLite run one).
    """
    from rich.console import Console

    from shadoweval.application.scoring import ScoringOptions
    from shadoweval.cli.options import database_url as resolve_url
    from shadoweval.config import load_settings
    from shadoweval.errors import ConfigError

    err = Console(stderr=True, soft_wrap=True)
    with exit_on_error(err):
        backend = scoring.backend
        overrides: dict[str, object] = {"backend": backend} if backend is not None else {}
        compare_settings = load_settings({"compare": overrides}).compare
        parsed_shard = parse_shard(shard) if shard is not None else None
        processes = workers if workers is not None else compare_settings.workers
        url = resolve_url(run.database_url)
        options = ScoringOptions.from_settings(
            compare_settings,
            encoder=scoring.encoder,
            device=scoring.device,
            structured_task_types=scoring.structured_task_types,
            rescore=rescore,
            embedding_cache=compare_settings.embedding_cache and not no_embedding_cache,
        )
        if follow:
            report = _follow(
                url,
                run.run_id,
                options,
                poll_interval_s=(
                    poll_interval_s
                    if poll_interval_s is not None
                    else compare_settings.poll_interval_s
                ),
                until_idle_s=until_idle_s,
                workers=workers,
                shard=shard,
                metrics_port=(
                    metrics_port if metrics_port is not None else compare_settings.metrics_port
                ),
            )
        elif poll_interval_s is not None or until_idle_s is not None or metrics_port is not None:
            raise ConfigError(
                "--poll-interval-s, --until-idle-s and --metrics-port apply to --follow only",
                field="follow",
                value=False,
            )
        else:
            report = _score_once(url, run.run_id, options, workers=processes, shard=parsed_shard)
    typer.echo(json.dumps(report.as_dict(), indent=2))


def _score_once(
    url: str,
    run_id: str,
    options: ScoringOptions,
    *,
    workers: int,
    shard: tuple[int, int] | None,
) -> CompareReport:
    """One scoring pass over the run (or shard ``(I, N)`` of it), in ``workers`` processes
    when > 1.

    Raises:
        ShadowEvalError: as :func:`shadoweval.application.scoring.score_stored_run` and
            :func:`~shadoweval.application.scoring.score_stored_run_in_processes`.
    """
    from shadoweval.application.database import open_repository
    from shadoweval.application.scoring import score_stored_run, score_stored_run_in_processes

    if workers > 1:
        return score_stored_run_in_processes(url, run_id, options, workers=workers, shard=shard)
    with open_repository(url, upgrade=False) as repo:
        return score_stored_run(repo, run_id, options, shard=shard)


def _follow(
    url: str,
    run_id: str,
    options: ScoringOptions,
    *,
    poll_interval_s: float,
    until_idle_s: float | None,
    workers: int | None,
    shard: str | None,
    metrics_port: int | None,
) -> CompareReport:
    """Run one follow worker until SIGTERM/SIGINT or idle; the handlers only set a flag.

    Raises:
        ConfigError: ``--workers`` > 1 or ``--shard`` with ``--follow``, or what
            :func:`shadoweval.application.scoring.follow_stored_run` refuses.
        ShadowEvalError: as :func:`shadoweval.application.scoring.follow_stored_run`.
    """
    import logging
    import signal
    import threading

    from shadoweval.application.database import open_repository
    from shadoweval.application.scoring import follow_stored_run
    from shadoweval.errors import ConfigError

    if (workers is not None and workers > 1) or shard is not None:
        raise ConfigError(
            "--workers and --shard cannot be combined with --follow: start more "
            "--follow workers instead (they split the run by bucket locks)",
            field="follow",
            value=True,
        )
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with open_repository(url, upgrade=False) as repo:
            return follow_stored_run(
                repo,
                run_id,
                options,
                stop,
                poll_interval_s=poll_interval_s,
                until_idle_s=until_idle_s,
                metrics_port=metrics_port,
            )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def parse_shard(value: str) -> tuple[int, int]:
    """Read ``--shard I/N`` as ``(I, N)``.

    Raises:
        ConfigError: not two integers ``I/N`` with ``N >= 1`` and ``0 <= I < N``.
    """
    from shadoweval.errors import ConfigError

    index, sep, count = value.strip().partition("/")
    try:
        parsed = (int(index), int(count))
    except ValueError:
        parsed = None
    if not sep or parsed is None or parsed[1] < 1 or not 0 <= parsed[0] < parsed[1]:
        raise ConfigError(
            f"--shard {value!r} is not I/N with N >= 1 and 0 <= I < N (e.g. 0/4)",
            field="shard",
            value=value,
        )
    return parsed


def register(app: typer.Typer) -> None:
    """Add the ``compare`` group to the CLI."""
    app.add_typer(compare_app, name="compare")
