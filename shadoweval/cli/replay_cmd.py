"""``shadow-eval replay run``: replay a capture log or a Kafka topic into a run (no scoring,
no gate)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from shadoweval.cli.option_groups import takes_option_groups
from shadoweval.cli.options import (
    DatabaseUrlOpt,
    PolicyOpt,
    ProgressOpt,
    ReplayLoadOptions,
    RunIdOpt,
    RunNameOpt,
    RunTargetOptions,
)
from shadoweval.cli.render import exit_on_error, load_warnings, print_warnings
from shadoweval.ports import REPLAY_METRICS_PORT

replay_app = typer.Typer(help="Replay captured requests to shadow targets.", no_args_is_help=True)

SourceOpt = Annotated[
    str,
    typer.Option(
        "--source",
        help="Capture log to replay (segment file or directory), or a Kafka topic to "
        "consume: kafka://HOST:PORT[,HOST:PORT]/TOPIC.",
    ),
]
UntilIdleOpt = Annotated[
    float | None,
    typer.Option(
        "--until-idle",
        min=0.0,
        help="Kafka: stop once no record arrived and nothing was in flight for this many "
        "seconds (default: run until SIGTERM/SIGINT).",
    ),
]
MetricsPortOpt = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        help="Kafka: serve /metrics, /healthz and /readyz on this port "
        "(default: SHADOWEVAL_WORKER__METRICS_PORT, else none; the docs and deploy files "
        f"use {REPLAY_METRICS_PORT}).",
    ),
]
GroupIdOpt = Annotated[
    str | None,
    typer.Option(
        "--group-id",
        help="Kafka consumer group (default: SHADOWEVAL_WORKER__GROUP_ID, else "
        "shadoweval-replay.<run id>).",
    ),
]
BaselineModelOpt = Annotated[
    str | None,
    typer.Option(
        "--baseline-model",
        help="Kafka: the live (baseline) model's name for a new run (default: the resumed "
        "run's, else read from the first exchange on the topic).",
    ),
]
SessionTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--session-timeout",
        min=0.5,
        max=300.0,
        help="Kafka: consumer-group session timeout, seconds (a crashed worker's partitions "
        "move to the others after this long).",
    ),
]


@replay_app.command("run")
@takes_option_groups
def replay_run(
    source: SourceOpt,
    targets: RunTargetOptions,
    run_id: RunIdOpt = None,
    name: RunNameOpt = None,
    policy: PolicyOpt = None,
    database_url: DatabaseUrlOpt = None,
    load: ReplayLoadOptions = ReplayLoadOptions(),
    progress: ProgressOpt = True,
    until_idle: UntilIdleOpt = None,
    metrics_port: MetricsPortOpt = None,
    group_id: GroupIdOpt = None,
    baseline_model: BaselineModelOpt = None,
    session_timeout: SessionTimeoutOpt = 10.0,
) -> None:
    """Replay every exchange of a capture log or Kafka topic to the candidate (and a
    baseline replica).

    Several --candidate-url: one run per candidate (<run id>-<name>); a Kafka topic is
    consumed by one worker per candidate at once, each in its own consumer group, so
    every record reaches every candidate; the counts are printed per candidate.

    Outcomes are stored idempotently: running it again on the same run resumes, and sends
    only what has no outcome yet. A Kafka worker commits offsets only after the outcomes
    are stored; a restarted worker passes the same --run-id (its group is derived from
    it). SIGTERM/SIGINT stop a Kafka worker gracefully. Warm-up requests (--warmup) are
    sent and completed before the measured ones; --pace capture replays at the captured
    inter-arrival times (--pace-speed to speed up). Prints the replay counts as JSON, and a
    warning on stderr when the measured requests started below 95% of the asked rate.
    Exit 3 on error.
    """
    from rich.console import Console

    from shadoweval.application.candidate_runs import same_url_warnings
    from shadoweval.application.replaying import (
        KafkaReplayOptions,
        ReplayRequest,
        parse_replay_source,
        replay,
        replay_candidates,
    )
    from shadoweval.cli.evaluate_cmd import build_settings

    err = Console(stderr=True, soft_wrap=True)
    with exit_on_error(err, FileNotFoundError):
        replay_source = parse_replay_source(source)
        settings = build_settings(database_url=database_url, load=load)
        request = ReplayRequest(
            source=replay_source,
            run=targets.run_request(
                policy_path=policy,
                run_name=name,
                run_id=run_id,
                command="shadow-eval replay run",
            ),
            progress=progress,
            kafka=KafkaReplayOptions(
                baseline_model=baseline_model,
                until_idle_s=until_idle,
                session_timeout_ms=round(session_timeout * 1000),
                group_id=group_id,
                metrics_port=metrics_port,
            ),
        )
        candidates = targets.candidates()
        print_warnings(err, same_url_warnings(candidates))
        if len(candidates) > 1:
            several = replay_candidates(request, candidates, settings, console=err)
        else:
            result = replay(request, settings, console=err)
    if len(candidates) > 1:
        by_name = {}
        for name, each in several:
            by_name[name] = {"run_id": each.run.run_id, **each.report.as_dict()}
            print_warnings(err, [*each.warnings, *load_warnings(each.report.as_dict())])
        typer.echo(json.dumps(by_name, indent=2))
        return
    counts = result.report.as_dict()
    print_warnings(err, [*result.warnings, *load_warnings(counts)])
    typer.echo(json.dumps(counts, indent=2))


def register(app: typer.Typer) -> None:
    """Add the ``replay`` group to the CLI."""
    app.add_typer(replay_app, name="replay")
