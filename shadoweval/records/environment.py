"""Environment versus candidate: which replay failures are the environment's (issue 29).

A replay that fails because of the setup around the model — a wrong base URL, a missing
or wrong credential, a server that is not there, a port answered by another process, a
test double without a recording — says nothing about the candidate model. One set of
rules, read by the compare stage (``PairScore.candidate_infra_error``), the gate's reasons
(:class:`EnvironmentFailure` on :class:`~shadoweval.records.Coverage`), the replay preflight
and a re-run (which replays such failures again):

* **infrastructure**: timeouts, refused or lost connections, undecodable bodies, HTTP
  408/429/5xx (:func:`shadoweval.records.is_infra_failure`);
* **configuration**: HTTP 401, 403 (credential), 404 (path or model name; the test
  double's own ``prompt_not_recorded`` is a 404 too), 405 (method or path), 407 (proxy
  credential): :data:`CONFIG_HTTP_STATUSES`;
* **a rejection repeated on most requests**: the same HTTP 4xx status and message on more
  than half of a target's sent requests (:func:`repeated_rejections`; e.g. a 400
  "unknown parameter" of a server that refuses a field every request carries);
* **shared with the baseline replica**: a failure the replica of the baseline shows on
  the same exchange (the compare stage's rule: both shadows failed, so the model is not
  to blame).

The preflight of every target that is sent requests — the replay's shadow targets
(:mod:`shadoweval.replay.preflight`) and the LLM judge (:mod:`shadoweval.judge.preflight`) —
decides and words its failure here (:func:`preflight_stops`, :func:`preflight_failure`,
:func:`preflight_message`), so both say it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

from shadoweval.records.base import _Record

__all__ = [
    "CONFIG_HTTP_STATUSES",
    "PREFLIGHT_BODY_CHARS",
    "REPEATED_REJECTION_MIN",
    "EnvironmentFailure",
    "doubled_v1",
    "preflight_failure",
    "preflight_message",
    "preflight_stops",
    "repeated_rejections",
    "url_hint",
]

CONFIG_HTTP_STATUSES: frozenset[int] = frozenset({401, 403, 404, 405, 407})
"""HTTP statuses that say the request was sent to the wrong place or with the wrong
credential: a configuration error of the environment, never the model's answer."""

REPEATED_REJECTION_MIN = 3
"""A rejection repeated on most requests counts as configuration from this many on."""


def doubled_v1(url: str) -> bool:
    """Whether ``url``'s path repeats the API version (``/v1/v1/``): a base URL given with
    ``/v1`` while the replayed paths carry their own."""
    path = url.split("://", 1)[-1].partition("/")[2]
    return "v1/v1/" in f"{path}/" or path.startswith("v1/v1")


def url_hint(url: str) -> str:
    """The likely cause to name beside a failed ``url``, or ``""``: a doubled ``/v1``."""
    if not doubled_v1(url):
        return ""
    return (
        "the path has /v1 twice: the base URL probably ends in /v1 while the replayed "
        "path starts with it; give the base URL without /v1 (http://HOST:PORT)"
    )


PREFLIGHT_BODY_CHARS = 200
"""Characters of the response body quoted in a preflight failure."""

_NOT_RECORDED = "prompt_not_recorded"

_PREFLIGHT_WORDS: dict[str, tuple[str, str, str]] = {
    # stage → (when, what was not done, how to fix or skip it)
    "replay": (
        "before the replay",
        "Nothing was replayed",
        "fix the target's URL, model name or API key (or pass --no-preflight for a server "
        "that meters requests)",
    ),
    "judge": (
        "before judging",
        "Nothing was judged",
        "fix SHADOWEVAL_JUDGE__URL, SHADOWEVAL_JUDGE__MODEL or SHADOWEVAL_JUDGE__API_KEY "
        "(or set SHADOWEVAL_JUDGE__PREFLIGHT=false for a judge that meters requests)",
    ),
}


def preflight_stops(status: int | None, body: str | None, *, connected: bool) -> bool:
    """Whether a failed preflight request stops the run: no retry fixes it.

    Args:
        status: the HTTP status answered, or ``None`` when no response came back.
        body: the response body (or its error message), or ``None``.
        connected: a connection was established (``False``: refused, unresolvable host).

    Returns:
        ``True`` for no connection, or a configuration status
        (:data:`CONFIG_HTTP_STATUSES`) other than the test double's
        ``prompt_not_recorded`` 404 (a missing recording of one prompt).
    """
    if not connected:
        return True
    if status is None or status not in CONFIG_HTTP_STATUSES:
        return False
    return _NOT_RECORDED not in (body or "")


def preflight_failure(
    target: str,
    url: str,
    *,
    status: int | None,
    body: str | None,
    error: str,
    stage: str = "replay",
) -> str:
    """The head of a preflight failure: target, URL requested, status (or error) and the
    first :data:`PREFLIGHT_BODY_CHARS` characters of the body, and the likely cause when
    one shows (a doubled ``/v1``, the test double's missing recording).

    Args:
        target: ``candidate``, ``baseline_repeat``, ``judge``.
        url: the URL actually requested (credentials stripped by the caller).
        status: the HTTP status, or ``None`` when no response came back.
        body: the response body or error message (``None``: none).
        error: without a response, what failed (``connect: ...``, ``timeout: ...``).
        stage: ``replay`` or ``judge`` (the wording of *when*).

    Raises:
        KeyError: an unknown ``stage``.
    """
    when = _PREFLIGHT_WORDS[stage][0]
    if status is not None:
        head = " ".join((body or "").split())[:PREFLIGHT_BODY_CHARS]
        what = f"HTTP {status}: {head!r}"
    else:
        what = error or "error: no response"
    hint = url_hint(url)
    if not hint and status is not None and _NOT_RECORDED in (body or ""):
        hint = "the test double (mock-llm) has no recording of this prompt"
    cause = f"; likely cause: {hint}" if hint else ""
    return (
        f"preflight: the {target} target failed one real request {when}: POST {url} → {what}{cause}"
    )


def preflight_message(head: str, *, stage: str = "replay") -> str:
    """The message of a preflight that stops the run: ``head`` (:func:`preflight_failure`),
    then that nothing was done and what to fix, in ``stage``'s words.

    Raises:
        KeyError: an unknown ``stage``.
    """
    _, nothing, fix = _PREFLIGHT_WORDS[stage]
    return f"{head}. {nothing}; {fix}"


def repeated_rejections(
    rejections: Mapping[tuple[int, str], int], sent: int
) -> frozenset[tuple[int, str]]:
    """The (HTTP status, error message) rejections of one target that repeat on most of
    its requests: a 4xx below 500 with the same message on more than half of the ``sent``
    requests, and at least :data:`REPEATED_REJECTION_MIN` times.

    Args:
        rejections: count per (status, message) of the target's HTTP failures.
        sent: the target's requests that were sent (not skipped), failures included.
    """
    return frozenset(
        key
        for key, count in rejections.items()
        if 400 <= key[0] < 500 and count >= REPEATED_REJECTION_MIN and 2 * count > sent
    )


class EnvironmentFailure(_Record):
    """Candidate replays that failed for reasons of the environment, grouped by cause.

    ``cause`` names the failure (``HTTP 404``, ``timeout``, ``connect``; ``HTTP 400``
    for a rejection repeated on most requests); ``count`` the candidate's pairs with it,
    ``shared`` how many of them the baseline replica failed too; ``example_*`` one of
    them: its exchange id, the URL requested, and the first ~200 characters of the
    response body or the error detail. ``hint`` names a likely cause (a doubled ``/v1``,
    the test double's ``prompt_not_recorded``), or is empty.
    """

    cause: str
    count: int
    shared: int = 0
    example_exchange_id: str = ""
    example_url: str = ""
    example_detail: str = ""
    hint: str = ""

    def describe(self) -> str:
        """``HTTP 404 on 805 pairs (805 shared with the baseline replica), e.g. exchange
        x: POST URL → '…' (hint)``."""
        shared = (
            f", {self.shared} of them failed on the baseline replica too" if self.shared else ""
        )
        example = ""
        if self.example_exchange_id:
            where = f"POST {self.example_url}" if self.example_url else "the request"
            body = f" → {self.example_detail!r}" if self.example_detail else ""
            example = f", e.g. exchange {self.example_exchange_id}: {where}{body}"
        hint = f" ({self.hint})" if self.hint else ""
        return f"{self.cause} on {self.count} pairs{shared}{example}{hint}"
