"""The judge client: one pairwise judge call over httpx to an OpenAI-compatible endpoint.

``POST <url>/v1/chat/completions`` (non-streamed) with the judge's model, its own bearer
key, the sampling of the judge identity and the prompt of :mod:`shadoweval.judge.prompt` in the
client's response format (``text``: a verdict line, no ``response_format`` sent;
``json_schema`` / ``json_object``: the request carries
:func:`shadoweval.judge.prompt.response_format_body` and the answer is read as a JSON verdict). At
most
``concurrency`` calls are in flight (an :class:`asyncio.Semaphore` around each call).

Failures are data, as in the replay client (:mod:`shadoweval.replay.client`): every call returns a
:class:`~shadoweval.records.JudgeVote`; a failed one has ``preferred=None`` and ``error``
saying why — ``HTTP <status>: <message>``, ``timeout: ...``, ``connect: ...``, ``decode:
...`` (a body that is not a chat completion) or ``unparseable verdict: ...``
(:mod:`shadoweval.judge.parse`; when the server says ``finish_reason: length`` the error adds that
the
answer was cut at ``max_tokens``). Only connection *establishment* errors are retried (the
request never reached the judge, so a retry cannot be billed twice), with exponential
backoff and jitter; a 5xx, a timeout or an unparseable answer is not retried here (a later
``judge run`` retries pairs whose judgement failed). The whole request — headers and body —
is bounded by ``timeout_s`` (``asyncio.timeout``). The judge's token usage (``usage``) is
recorded on every vote that got a response, failed parses included.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson

from shadoweval.errors import ConfigError
from shadoweval.judge.parse import VerdictParseError, parse_answer
from shadoweval.judge.prompt import (
    PROMPT_SHA256_BY_FORMAT,
    RESPONSE_FORMATS,
    Order,
    PairText,
    ResponseFormat,
    build_messages,
    response_format_body,
)
from shadoweval.lifecycle import AsyncLifecycle, aclose_all
from shadoweval.records import JudgeIdentity, JudgeVote

__all__ = ["JudgeClient", "JudgeProbe", "chat_completions_url", "public_endpoint"]

logger = logging.getLogger(__name__)

_MAX_ERROR_CHARS = 300
Side = Literal["candidate", "baseline", "tie"]
_SIDES: dict[Order, dict[str, Side]] = {
    "baseline_first": {"A": "baseline", "B": "candidate", "TIE": "tie"},
    "candidate_first": {"A": "candidate", "B": "baseline", "TIE": "tie"},
}


def chat_completions_url(url: str) -> str:
    """The chat-completions URL of a judge base URL.

    ``http://host:port`` → ``http://host:port/v1/chat/completions``; a URL whose path ends
    in ``/v1`` gets ``/chat/completions``; one that already ends in
    ``/chat/completions`` is kept.

    Raises:
        ConfigError: not an ``http(s)://host`` URL (field ``judge.url``).
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"judge url {url!r}: expected http://HOST[:PORT][/v1]", field="judge.url", value=url
        )
    path = parts.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path = f"{path}/chat/completions" if path.endswith("/v1") else f"{path}/v1/chat/completions"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def public_endpoint(url: str) -> str:
    """The judge's base URL as named in reports and its identity: no credentials, query
    or fragment (``https://user:pw@host/v1?key=x`` → ``https://host/v1``)."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


class JudgeClient(AsyncLifecycle):
    """An httpx client bound to one judge endpoint, model and sampling.

    Args:
        url: the judge's base URL (see :func:`chat_completions_url`).
        model: the judge model name sent with every request.
        api_key: the judge's own bearer token (``None``: no ``Authorization`` header).
        concurrency: judge calls in flight at most (≥ 1).
        timeout_s: limit on one whole judge request, seconds.
        connect_timeout_s: limit on establishing a connection, seconds.
        retries: retries after a connection could not be established.
        backoff_s: first backoff, seconds; doubles per retry, with ±50% jitter.
        temperature, max_tokens, seed: sampling sent with every request (``seed`` only
            when not ``None``).
        redact: text redactor run over each filled prompt before it is sent.
        response_format: how the judge answers (:data:`shadoweval.judge.prompt.ResponseFormat`:
            ``text``, ``json_schema`` or ``json_object``); it picks the prompt, the
            ``response_format`` sent and the parser, and enters the identity through the
            prompt hash.
        transport: an httpx transport seam for tests.

    Use as an async context manager, or :meth:`start` / :meth:`stop`
    (:mod:`shadoweval.lifecycle`: started once, not restartable).

    Raises:
        ConfigError: a bad URL, an empty model name, ``concurrency`` < 1, or an unknown
            ``response_format``.
    """

    def __init__(
        self,
        url: str,
        *,
        model: str,
        api_key: str | None = None,
        concurrency: int = 4,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: int | None = None,
        redact: Callable[[str], str] | None = None,
        response_format: ResponseFormat = "text",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = chat_completions_url(url)
        self.endpoint = public_endpoint(url)
        if not model.strip():
            raise ConfigError(
                "judge model is empty: set SHADOWEVAL_JUDGE__MODEL", field="judge.model"
            )
        if concurrency < 1:
            raise ConfigError(
                f"judge concurrency must be >= 1, got {concurrency}",
                field="judge.concurrency",
                value=concurrency,
            )
        if response_format not in RESPONSE_FORMATS:
            raise ConfigError(
                f"judge response_format must be one of {', '.join(RESPONSE_FORMATS)}, got "
                f"{response_format!r}",
                field="judge.response_format",
                value=response_format,
            )
        self.model = model
        self.concurrency = concurrency
        self.response_format: ResponseFormat = response_format
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.redact = redact
        self._semaphore = asyncio.Semaphore(concurrency)
        self._rng = random.Random(seed)
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._client_kwargs: dict[str, Any] = {
            # The whole request is bounded by asyncio.timeout(timeout_s) in _send; httpx
            # bounds only the connection (so one clock, not two racing, decides a timeout).
            "timeout": httpx.Timeout(None, connect=connect_timeout_s),
            "limits": httpx.Limits(
                max_connections=concurrency, max_keepalive_connections=concurrency
            ),
            "transport": transport,
            "headers": headers,
            "follow_redirects": False,
        }
        self._client: httpx.AsyncClient | None = None

    @property
    def identity(self) -> JudgeIdentity:
        """Who judges: endpoint (public form), model, prompt hash and sampling.

        The prompt hash is that of the client's response format
        (:data:`shadoweval.judge.prompt.PROMPT_SHA256_BY_FORMAT`), so the format is part of the
        identity frozen with a run.
        """
        return JudgeIdentity(
            endpoint=self.endpoint,
            model=self.model,
            prompt_sha256=PROMPT_SHA256_BY_FORMAT[self.response_format],
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            seed=self.seed,
        )

    async def start(self) -> None:
        """Open the connection pool.

        Raises:
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            self._client = httpx.AsyncClient(**self._client_kwargs)

    async def stop(self) -> None:
        """Close the pool (idempotent)."""
        if self._stopping():
            client, self._client = self._client, None
            await aclose_all(client)

    def request_body(self, pair: PairText, order: Order) -> dict[str, Any]:
        """The JSON body of the judge request for ``pair`` shown in ``order``.

        ``response_format`` is a member only in the JSON formats.
        """
        body: dict[str, Any] = {
            "model": self.model,
            "messages": build_messages(pair, order, self.redact, self.response_format),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "stream": False,
        }
        if self.seed is not None:
            body["seed"] = self.seed
        response_format = response_format_body(self.response_format)
        if response_format is not None:
            body["response_format"] = response_format
        return body

    def _request(self, pair: PairText, order: Order) -> tuple[httpx.AsyncClient, bytes]:
        """The started pool and the encoded judge request of ``pair`` in ``order``.

        Raises:
            RuntimeError: the client is not started.
        """
        if self._client is None:
            raise RuntimeError("JudgeClient is not started")
        return self._client, orjson.dumps(self.request_body(pair, order))

    async def vote(self, pair: PairText, order: Order) -> JudgeVote:
        """Ask the judge about ``pair`` shown in ``order``; never raises for judge failures.

        Raises:
            RuntimeError: the client is not started.
        """
        client, content = self._request(pair, order)
        async with self._semaphore:
            return await self._send(client, content, order, pair.exchange_id)

    async def probe(self, pair: PairText, order: Order = "baseline_first") -> JudgeProbe:
        """Send the judge request of ``pair`` in ``order`` once, as :meth:`vote` does (same
        URL, key, model and sampling; connection establishment retried), and say what came
        back — for the preflight (:mod:`shadoweval.judge.preflight`), which needs the
        status and body a vote's error folds away.

        Raises:
            RuntimeError: the client is not started.
        """
        client, content = self._request(pair, order)
        async with self._semaphore:
            outcome = await self._post(client, content, pair.exchange_id)
        if isinstance(outcome, JudgeProbe):
            return outcome
        if outcome.status_code >= 400:
            return JudgeProbe(
                status=outcome.status_code,
                body=outcome.content.decode("utf-8", errors="replace"),
                error=f"HTTP {outcome.status_code}",
            )
        vote = _vote_from_response(outcome, order, self.response_format, self.max_tokens)
        return JudgeProbe(error=vote.error or "", vote=vote)

    async def _post(
        self, client: httpx.AsyncClient, content: bytes, exchange_id: str
    ) -> httpx.Response | JudgeProbe:
        """POST ``content``: the response, or a failed :class:`JudgeProbe` (no response)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                async with asyncio.timeout(self.timeout_s):
                    return await client.post(self.url, content=content)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt > self.retries:
                    return JudgeProbe(
                        error=f"connect: {type(exc).__name__}: {exc} (after {attempt} tries)",
                        connected=False,
                    )
                delay = self.backoff_s * 2 ** (attempt - 1) * self._rng.uniform(0.5, 1.5)
                logger.debug("judge connect failed for %s, retry in %.2fs", exchange_id, delay)
                await asyncio.sleep(delay)
            except (TimeoutError, httpx.TimeoutException) as exc:
                detail = f"no complete response within {self.timeout_s:g} s"
                if isinstance(exc, httpx.TimeoutException):
                    detail = f"{type(exc).__name__}: {exc or detail}"
                return JudgeProbe(error=f"timeout: {detail}")
            except httpx.TransportError as exc:
                return JudgeProbe(
                    error=f"connect: connection lost mid-response: {type(exc).__name__}: {exc}"
                )

    async def _send(
        self, client: httpx.AsyncClient, content: bytes, order: Order, exchange_id: str
    ) -> JudgeVote:
        outcome = await self._post(client, content, exchange_id)
        if isinstance(outcome, JudgeProbe):
            return JudgeVote(order=order, error=_cap(outcome.error))
        return _vote_from_response(outcome, order, self.response_format, self.max_tokens)


@dataclass(frozen=True)
class JudgeProbe:
    """What one judge request got (:meth:`JudgeClient.probe`).

    Attributes:
        status: the HTTP status of a 4xx/5xx answer, else ``None`` (no response, or a 2xx).
        body: that answer's body, else ``None``.
        error: why the request failed (``connect: ...``, ``timeout: ...``, ``HTTP 404``,
            ``decode: ...``, an unparseable verdict), ``""`` when the judge answered a verdict.
        connected: a connection was established (``False``: refused, unresolvable host).
        vote: the vote read from a 2xx answer (with the judge's ``usage``, which the
            budget counts), else ``None``.
    """

    status: int | None = None
    body: str | None = None
    error: str = ""
    connected: bool = True
    vote: JudgeVote | None = None

    @property
    def failed(self) -> bool:
        """The request got no verdict."""
        return bool(self.error)


def _cap(text: str, keep_end: str = "") -> str:
    """``text`` cut to :data:`_MAX_ERROR_CHARS` (marked ``…``), then ``keep_end`` uncut."""
    limit = max(0, _MAX_ERROR_CHARS - len(keep_end))
    return (text if len(text) <= limit else text[:limit] + "…") + keep_end


def _usage(payload: Any) -> tuple[int | None, int | None]:
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return None, None

    def count(name: str) -> int | None:
        value = usage.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return count("prompt_tokens"), count("completion_tokens")


def _error_message(body: bytes) -> str:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return " ".join(body.decode("utf-8", errors="replace").split())[:200] or "(empty body)"
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        return str(payload["error"].get("message", payload["error"]))[:200]
    return body.decode("utf-8", errors="replace")[:200]


def _finish_reason(payload: Any) -> str | None:
    try:
        reason = payload["choices"][0]["finish_reason"]
    except (KeyError, IndexError, TypeError):
        return None
    return reason if isinstance(reason, str) else None


def _vote_from_response(
    response: httpx.Response, order: Order, response_format: ResponseFormat, max_tokens: int
) -> JudgeVote:
    body = response.content
    if response.status_code >= 400:
        return JudgeVote(
            order=order, error=_cap(f"HTTP {response.status_code}: {_error_message(body)}")
        )
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return JudgeVote(order=order, error=_cap(f"decode: the response is not JSON: {exc}"))
    prompt_tokens, completion_tokens = _usage(payload)
    content: Any = None
    try:
        content = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return JudgeVote(
            order=order,
            error="decode: the response has no choices[0].message.content",
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )
    try:
        parsed = parse_answer(content if isinstance(content, str) else None, response_format)
    except VerdictParseError as exc:
        cut = ""
        if _finish_reason(payload) == "length":
            cut = f" [the answer was cut at max_tokens {max_tokens}: finish_reason length]"
        return JudgeVote(
            order=order,
            error=_cap(str(exc), keep_end=cut),
            rationale=content[:2000] if isinstance(content, str) else "",
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )
    preferred = _SIDES[order][parsed.choice]
    return JudgeVote(
        order=order,
        preferred=preferred,
        rationale=parsed.rationale,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )
