"""Preflight: one real request per shadow target before a replay (issue 29).

A wrong base URL (``http://host:port/v1`` makes every replay ``/v1/v1/chat/completions``),
a wrong API key or a server that is not there would otherwise fail every request of the
replay, and the run would blame the candidate. Before a capture-log replay, the log's
first replayable request is sent once to each target through the target's own client
(the same URL, headers and credential as the replay); the answer is not stored.

The preflight stops the replay — :class:`~shadoweval.errors.PreflightError`, exit 3 in
the CLI — only for what no retry fixes: no connection, or a configuration status
(:data:`~shadoweval.records.CONFIG_HTTP_STATUSES`: 401/403/404/405/407; mock-llm's
``prompt_not_recorded`` 404 excepted, a missing recording of one prompt): the rule and
the wording are the core's (:func:`shadoweval.records.preflight_stops`,
:func:`shadoweval.records.preflight_message`), shared with the judge's preflight. A transient
failure (timeout, 408/429/5xx, an interrupted stream, an undecodable body) says how the
server is doing, not how it is configured: it is returned as a warning and the replay goes
on, counting such failures as the environment's. Another rejection (400, 413, 422) may
be about that one request; a rejection repeated on most requests is classified during the
run (:mod:`shadoweval.records.environment`). ``replay.preflight = false``
(``--no-preflight``) skips it for a server that meters requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from shadoweval.capture_log import LogEntry
from shadoweval.errors import PreflightError
from shadoweval.records import (
    Exchange,
    ReplayErrorKind,
    is_infra_failure,
    preflight_failure,
    preflight_message,
    preflight_stops,
)
from shadoweval.redaction import strip_url_credentials
from shadoweval.replay.client import ReplayResult
from shadoweval.replay.exchange_replay import TargetSpec
from shadoweval.replay.rewrite import ReplayRequest, build_replay_request

__all__ = ["first_replayable", "preflight_targets"]


def first_replayable(entries: Iterable[LogEntry]) -> Exchange | None:
    """The first exchange of ``entries`` whose replay request can be built (a replayed
    route with a readable body), or ``None``."""
    for entry in entries:
        exchange = entry.exchange
        if exchange is None:
            continue
        try:
            request = build_replay_request(exchange)
        except Exception:  # an unreplayable line is the replay's to reject, not ours
            continue
        if isinstance(request, ReplayRequest):
            return exchange
    return None


def _facts(result: ReplayResult) -> tuple[int | None, str | None, str]:
    """(status, body, error) of a failed send, as the core's preflight wording takes them."""
    response = result.response
    if response is not None:
        return response.status_code, response.body or response.error_message, ""
    kind = result.error_kind.value if result.error_kind is not None else "error"
    return None, None, f"{kind}: {result.error_detail or 'no response'}"


async def preflight_targets(specs: Sequence[TargetSpec], exchange: Exchange) -> list[str]:
    """Send ``exchange``'s replay request once to every target (clients started).

    Returns:
        One warning per target that failed it transiently (timeout, 408/429/5xx, an
        interrupted stream, an undecodable body, a missing recording), for the caller to
        print; the replay goes on and classifies such failures.

    Raises:
        PreflightError: a target failed it with no connection or a configuration status;
            the message names the URL requested, the status and the first bytes of the body.
        ReplayError: a target's client is not started.
    """
    warnings: list[str] = []
    for spec in specs:
        request = build_replay_request(
            exchange, model=spec.model_name, api_key=spec.api_key, translate=spec.translate
        )
        if not isinstance(request, ReplayRequest):
            continue
        result = await spec.client.send(request)
        if result.error_kind is None:
            continue
        status = result.response.status_code if result.response is not None else None
        if not is_infra_failure(result.error_kind, status):
            continue
        url = strip_url_credentials(f"{spec.client.base_url}{request.path}")
        status, body, error = _facts(result)
        connected = result.error_kind is not ReplayErrorKind.CONNECT
        head = preflight_failure(spec.target.value, url, status=status, body=body, error=error)
        if not preflight_stops(status, body, connected=connected):
            warnings.append(
                f"{head}. Replaying anyway: such failures are counted as the environment's"
            )
            continue
        raise PreflightError(
            preflight_message(head), target=spec.target.value, url=url, status=status
        )
    return warnings
