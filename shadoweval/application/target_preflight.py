"""The replay targets' clients, and the preflight of a capture-log replay's targets.

One run's preflight (:func:`preflight_log`) runs inside its replay
(:func:`shadoweval.application.replaying.replay_capture_log`). Several candidates on one
sample are preflighted together before any of them is replayed
(:func:`preflight_candidates`), so that a wrong URL of the last one stops the command
before the first is replayed, scored and gated: all or nothing. The rule of what stops a
replay and what only warns is :mod:`shadoweval.replay.preflight`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from shadoweval.application.candidate_runs import CandidateTarget, evaluated_so_far
from shadoweval.application.runs import RunRequest, TargetConfig, capture_log_targets
from shadoweval.capture_log import read_capture_log
from shadoweval.config import ReplaySettings, Settings
from shadoweval.errors import PreflightError, ShadowEvalError
from shadoweval.records import ReplayTarget
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.preflight import first_replayable, preflight_targets
from shadoweval.replay.runner import TargetSpec

__all__ = [
    "named_error",
    "naming_evaluated",
    "preflight_candidates",
    "preflight_log",
    "target_specs",
]


def target_specs(
    targets: Sequence[TargetConfig], settings: ReplaySettings
) -> tuple[list[CandidateClient], list[TargetSpec]]:
    """One candidate client per target (not started) and the replay target specs."""
    clients = [
        CandidateClient(
            t.base_url,
            timeout_s=settings.timeout_s,
            connect_timeout_s=settings.connect_timeout_s,
            connect_retries=settings.connect_retries,
            backoff_s=settings.backoff_s,
            max_connections=settings.concurrency,
            keep_raw_body=settings.keep_raw_body,
            cache_hit_rules=settings.cache_hit_rules,
        )
        for t in targets
    ]
    specs = [
        TargetSpec(
            target=t.target,
            client=c,
            model=t.model,
            share=t.share,
            model_name=t.model.name if t.send_model_name else None,
            api_key=t.api_key,
            translate=settings.candidate_translate if t.target is ReplayTarget.CANDIDATE else {},
        )
        for t, c in zip(targets, clients, strict=True)
    ]
    return clients, specs


async def preflight_log(
    specs: Sequence[TargetSpec], capture_log: Path, console: Console | None
) -> None:
    """Send the log's first replayable request once to every target (clients started);
    a transient failure is printed as a warning on ``console`` (stderr by default).

    Raises:
        PreflightError: a target failed it with no connection or a configuration status
            (:func:`shadoweval.replay.preflight.preflight_targets`).
        FileNotFoundError: the capture log does not exist.
    """
    first = first_replayable(read_capture_log(capture_log))
    if first is None:
        return
    for warning in await preflight_targets(specs, first):
        (console or Console(stderr=True)).print(
            f"[yellow]warning:[/] {escape(warning)}", highlight=False
        )


def named_error(error: ShadowEvalError, *, before: str = "", after: str = "") -> ShadowEvalError:
    """``error`` itself (its type and attributes kept) with ``before`` put in front of its
    message and ``after`` behind it: which candidate it is about, which were done."""
    error.args = (f"{before}{error.args[0] if error.args else ''}{after}", *error.args[1:])
    return error


@contextmanager
def naming_evaluated(
    candidate: CandidateTarget,
    run_id: str,
    done: Sequence[tuple[str, str]],
    *,
    what: str = "evaluated, their runs and verdicts stored",
) -> Iterator[None]:
    """Run the block for ``candidate`` (run ``run_id``); a
    :class:`~shadoweval.errors.ShadowEvalError` in it is re-raised naming the candidates
    ``done`` (name, run id) before it, ``what`` (:func:`shadoweval.application.
    candidate_runs.evaluated_so_far`)."""
    try:
        yield
    except ShadowEvalError as exc:
        named_error(exc, after=evaluated_so_far(candidate, run_id, done, what=what))
        raise


def preflight_candidates(
    capture_log: Path,
    candidates: Sequence[tuple[CandidateTarget, RunRequest]],
    settings: Settings,
    *,
    console: Console | None = None,
) -> list[RunRequest]:
    """Resolve every candidate's targets (its model from its ``/v1/models`` when not
    given) and, with ``replay.preflight``, preflight them all (a baseline replica shared by
    the candidates once) before any run is created or replayed.

    Returns:
        The run requests with each candidate's model name resolved (so that the runs do
        not read ``/v1/models`` again).

    Raises:
        PreflightError: a target failed the preflight; the message starts with the
            candidate (``candidate 'b' (--candidate-url b=http://…): ``) and says that
            nothing was replayed.
        ShadowEvalError: a candidate's model name cannot be read (the candidate named).
        FileNotFoundError: the capture log does not exist.
    """
    resolved: list[tuple[CandidateTarget, list[TargetConfig]]] = []
    for candidate, run_request in candidates:
        try:
            targets = capture_log_targets(run_request, settings, capture_log=capture_log)
        except ShadowEvalError as exc:
            raise named_error(
                exc, before=f"{candidate.label}: ", after=" (nothing was replayed)"
            ) from exc
        resolved.append((candidate, targets))
    if settings.replay.preflight:
        asyncio.run(_preflight_all(resolved, capture_log, settings.replay, console))
    return [
        replace(run_request, candidate_model=targets[0].model.name)
        for (_, run_request), (_, targets) in zip(candidates, resolved, strict=True)
    ]


async def _preflight_all(
    resolved: Sequence[tuple[CandidateTarget, Sequence[TargetConfig]]],
    capture_log: Path,
    settings: ReplaySettings,
    console: Console | None,
) -> None:
    seen: set[tuple[ReplayTarget, str, str]] = set()
    for candidate, targets in resolved:
        fresh = [t for t in targets if (t.target, t.base_url, t.model.name) not in seen]
        seen.update((t.target, t.base_url, t.model.name) for t in fresh)
        clients, specs = target_specs(fresh, settings)
        for client in clients:
            await client.start()
        try:
            await preflight_log(specs, capture_log, console)
        except PreflightError as exc:
            if exc.target == ReplayTarget.CANDIDATE.value:
                raise named_error(exc, before=f"{candidate.label}: ") from None
            raise
        finally:
            for client in clients:
                await client.stop()
