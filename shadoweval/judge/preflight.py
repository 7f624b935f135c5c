"""Preflight of the judge: one real judge request before ``judge run`` sends its pairs.

A judge URL given as ``http://host:port/v1/v1``, a wrong judge key or a judge that is not
there would otherwise fail every judgement of the run, each stored as a failed judgement.
Before judging, the first selected pair is sent once to the judge through the run's own
client (:meth:`~shadoweval.judge.client.JudgeClient.probe`: the same URL, key, model,
sampling and response format); its answer is not stored.

The rule and the wording are the replay preflight's (:mod:`shadoweval.replay.preflight`),
shared through the core (:func:`shadoweval.records.preflight_stops`,
:func:`shadoweval.records.preflight_message`): the run stops —
:class:`~shadoweval.errors.PreflightError`, exit 3 in the CLI — for no connection or a
configuration status (401/403/404/405/407), naming the URL requested, the status and the
first 200 characters of the body (and a doubled ``/v1`` as the likely cause). Any other
failure (timeout, 5xx, an unparseable verdict) is returned as a warning and the judge run
goes on: its failed judgements are kept and retried by the next run.
"""

from __future__ import annotations

from collections.abc import Callable

from shadoweval.errors import PreflightError
from shadoweval.judge.client import JudgeClient, JudgeProbe
from shadoweval.judge.prompt import PairText
from shadoweval.records import preflight_failure, preflight_message, preflight_stops
from shadoweval.redaction import strip_url_credentials

__all__ = ["JUDGE_TARGET", "preflight_judge"]

JUDGE_TARGET = "judge"
"""The target named in a judge preflight failure."""


async def preflight_judge(
    client: JudgeClient, pair: PairText, *, on_probe: Callable[[JudgeProbe], None] | None = None
) -> str | None:
    """Send ``pair``'s judge request once (``client`` started); ``on_probe`` is given what
    came back (e.g. to count its tokens against a budget) before the rule is applied.

    Returns:
        ``None`` when the judge answered a verdict; a warning (for the caller to print)
        when it failed in a way a retry may fix.

    Raises:
        PreflightError: no connection, or a configuration status; the message names the
            URL requested, the status and the first bytes of the body.
        RuntimeError: the client is not started.
    """
    probe = await client.probe(pair)
    if on_probe is not None:
        on_probe(probe)
    if not probe.failed:
        return None
    url = strip_url_credentials(client.url)
    status, body, error = probe.status, probe.body, probe.error
    head = preflight_failure(
        JUDGE_TARGET, url, status=status, body=body, error=error, stage="judge"
    )
    if preflight_stops(status, body, connected=probe.connected):
        message = preflight_message(head, stage="judge")
        raise PreflightError(message, target=JUDGE_TARGET, url=url, status=status)
    return f"{head}. Judging anyway: failed judgements are kept and retried by the next judge run"
