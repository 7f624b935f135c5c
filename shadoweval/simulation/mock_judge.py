"""mock-judge: a **test double** of an LLM judge behind an OpenAI-compatible endpoint.

It answers the pairwise judge prompt of :mod:`shadoweval.judge.prompt` without a model: it reads
``Answer A`` and ``Answer B`` out of the prompt (the text between ``[Answer A]`` and
``[End of Answer A]``, and the same for B) and decides by a rule the caller supplies,
``decide(answer_a, answer_b) -> "A" | "B" | "TIE"``. Two rules are provided:

* :func:`prefer_higher` — a quality score per answer text (a function, or
  :func:`quality_table` for a mapping from answer text to score); the higher score wins,
  equal scores are a tie. This is the demo's "judge that says the better candidate is
  better".
* :func:`always` — always the same letter (``always("A")`` is a maximally position-biased
  judge: :mod:`shadoweval.judge.pairwise` must turn it into ties).

The answer is ``"<one sentence>\\nVERDICT: <A|B|TIE>"`` with ``usage``
(whitespace-separated words of all the request's messages, and of the answer). A request
whose ``response_format`` has ``type`` ``json_schema`` or ``json_object`` (the judge's JSON
formats, :mod:`shadoweval.judge.prompt`) is answered with the JSON object ``{"rationale": "<one
sentence>", "verdict": "<A|B|TIE>"}`` instead, as a server that constrains decoding to the
schema would. ``response_formats`` names the ``type`` values the double accepts (both by
default); any other is refused with HTTP 500 and a validation message, as
llama-cpp-python's server (0.3.36) refuses ``json_schema``
(``response_formats=("json_object",)`` mimics it). Seeded faults, per request, reuse
mock-llm's :class:`~shadoweval.simulation.mock_llm.faults.FaultConfig` bands (``error_rate``: HTTP
500, ``hang_rate``: accepted and never answered, ``malformed_rate``: a body cut in half,
``html_rate``: a proxy's 502 page) and add ``unparseable_rate`` (a 200 answer with no
verdict: in the text format a sentence without a verdict line, in a JSON format an object
cut short with ``finish_reason: length``, as when ``max_tokens`` ends the answer) and
``delay_s`` (every answer waits that long: a slow judge). Draws come from SHA-256 of (seed,
prompt, attempt), as in mock-llm.

For tests the app's state counts requests, the requests in flight and their maximum, and
keeps each request's headers and body (``app.state.judge``: :class:`JudgeState`); a test
may hold every answer until it releases ``state.release`` (a :class:`threading.Event`, so
a test thread can release a server thread).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from shadoweval.simulation.mock_llm.faults import FaultConfig, FaultKind, seeded_unit
from shadoweval.simulation.mock_llm.wire import PROXY_502_HTML, error_json, json_object_body

__all__ = [
    "JSON_TYPES",
    "MOCK_JUDGE_HEADER",
    "UNPARSEABLE_ANSWER",
    "UNPARSEABLE_JSON_ANSWER",
    "Choice",
    "JudgeFaults",
    "JudgeState",
    "always",
    "create_judge_app",
    "prefer_higher",
    "quality_table",
]

Choice = Literal["A", "B", "TIE"]
Decide = Callable[[str, str], Choice]

MOCK_JUDGE_HEADER = ("x-mock-judge", "shadow-eval test double")
UNPARSEABLE_ANSWER = "Both answers have merits; I would rather not pick one."
UNPARSEABLE_JSON_ANSWER = '{"rationale": "Both answers have merits; I would rather not'
"""The JSON formats' unparseable answer: an object cut short (``finish_reason: length``)."""
JSON_TYPES = ("json_schema", "json_object")

_ANSWER = re.compile(r"\[Answer (A|B)\]\n(.*?)\n\[End of Answer \1\]", re.DOTALL)


def prefer_higher(quality: Callable[[str], float]) -> Decide:
    """A rule: the answer with the higher ``quality(text)`` wins; equal scores are a tie."""

    def decide(answer_a: str, answer_b: str) -> Choice:
        a, b = quality(answer_a), quality(answer_b)
        return "A" if a > b else "B" if b > a else "TIE"

    return decide


def quality_table(scores: Mapping[str, float], default: float = 0.0) -> Callable[[str], float]:
    """``quality`` from a mapping of answer text (blanks trimmed) to score; others ``default``."""
    table = {text.strip(): value for text, value in scores.items()}
    return lambda text: table.get(text.strip(), default)


def always(choice: Choice) -> Decide:
    """A rule that always says ``choice`` (``always("A")``: pure position bias)."""
    return lambda answer_a, answer_b: choice


@dataclass(frozen=True)
class JudgeFaults:
    """Injected faults: mock-llm's bands, then ``unparseable_rate``; ``delay_s`` per answer."""

    bands: FaultConfig = field(default_factory=FaultConfig)
    unparseable_rate: float = 0.0
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.unparseable_rate <= 1.0:
            raise ValueError(f"unparseable_rate must be in [0, 1], got {self.unparseable_rate}")
        if self.delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {self.delay_s}")


@dataclass
class JudgeState:
    """What a running mock judge holds and counts (read by tests)."""

    decide: Decide
    faults: JudgeFaults
    seed: int
    model_name: str
    hold: bool = False
    response_formats: tuple[str, ...] = JSON_TYPES
    api_key: str | None = None
    release: threading.Event = field(default_factory=threading.Event)
    requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    seen: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    _attempts: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, key: str) -> int:
        """Count one request for prompt ``key`` in; return its 0-based attempt number."""
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            attempt = self._attempts.get(key, 0)
            self._attempts[key] = attempt + 1
            return attempt

    def leave(self) -> None:
        """Count one request out."""
        with self._lock:
            self.in_flight -= 1


def _words(text: str) -> int:
    return len(text.split())


def _answers(prompt: str) -> tuple[str, str] | None:
    found: dict[str, str] = {m.group(1): m.group(2) for m in _ANSWER.finditer(prompt)}
    if "A" not in found or "B" not in found:
        return None
    return found["A"], found["B"]


async def _hang(request: Request) -> Response:
    with anyio.move_on_after(600):
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                break
    return error_json(504, "mock-judge hang released", type_="server_error", code="hang")


def _json_type(payload: Mapping[str, Any]) -> str | None:
    """The request's ``response_format.type`` (``None``: none sent, or ``text``)."""
    response_format = payload.get("response_format")
    if not isinstance(response_format, Mapping):
        return None
    kind = response_format.get("type")
    return None if kind in (None, "text") else str(kind)


async def _answer(request: Request, state: JudgeState, payload: dict[str, Any]) -> Response:
    json_type = _json_type(payload)
    if json_type is not None and json_type not in state.response_formats:
        accepted = " or ".join(repr(t) for t in ("text", *state.response_formats))
        return error_json(
            500,
            f"1 validation error: response_format.type: Input should be {accepted}, got "
            f"{json_type!r}",
            type_="invalid_request_error",
            code="unsupported_response_format",
        )
    messages = payload.get("messages")
    prompt = ""
    words = 0
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        prompt = str(messages[-1].get("content", ""))
        words = sum(_words(str(m.get("content", ""))) for m in messages if isinstance(m, dict))
    key = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
    attempt = state.enter(key)
    try:
        # ``release`` is set from a test thread: a threading.Event polled here, since an
        # anyio.Event may only be set from the server's own event loop.
        while state.hold and not state.release.is_set():  # noqa: ASYNC110
            await anyio.sleep(0.005)
        if state.faults.delay_s:
            await anyio.sleep(state.faults.delay_s)
        fault = state.faults.bands.pick(seeded_unit(state.seed, "judge-fault", key, attempt))
        if fault is FaultKind.ERROR:
            return error_json(
                500, "mock-judge injected fault", type_="server_error", code="injected_error"
            )
        if fault is FaultKind.HTML:
            return HTMLResponse(PROXY_502_HTML, status_code=502)
        if fault is FaultKind.HANG:
            return await _hang(request)
        answers = _answers(prompt)
        if answers is None:
            return error_json(
                400,
                "mock-judge: the prompt has no [Answer A] / [Answer B] blocks",
                type_="invalid_request_error",
                code="not_a_judge_prompt",
            )
        unparseable = seeded_unit(state.seed, "judge-unparseable", key, attempt)
        finish_reason = "stop"
        if unparseable < state.faults.unparseable_rate:
            content = UNPARSEABLE_ANSWER if json_type is None else UNPARSEABLE_JSON_ANSWER
            finish_reason = "stop" if json_type is None else "length"
        else:
            choice = state.decide(*answers)
            sentence = f"By the test double's rule the verdict is {choice}."
            if json_type is None:
                content = f"{sentence}\nVERDICT: {choice}"
            else:
                content = orjson.dumps({"rationale": sentence, "verdict": choice}).decode()
        body = orjson.dumps(
            {
                "id": f"judge-{key[:12]}-{attempt}",
                "object": "chat.completion",
                "created": 0,
                "model": state.model_name,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": finish_reason,
                    }
                ],
                "usage": {
                    "prompt_tokens": words,
                    "completion_tokens": _words(content),
                    "total_tokens": words + _words(content),
                },
            }
        )
        if fault is FaultKind.MALFORMED:
            body = body[: len(body) // 2]
        return Response(body, media_type="application/json", headers=dict([MOCK_JUDGE_HEADER]))
    finally:
        state.leave()


async def _chat(request: Request) -> Response:
    state: JudgeState = request.app.state.judge
    payload = await json_object_body(
        request, not_json="body is not JSON", not_object="body must be an object"
    )
    if isinstance(payload, JSONResponse):
        return payload
    with state._lock:
        state.seen.append((dict(request.headers), payload))
    if state.api_key is not None and request.headers.get("authorization") != (
        f"Bearer {state.api_key}"
    ):
        return error_json(
            401, "Incorrect API key provided", type_="invalid_request_error", code="invalid_api_key"
        )
    return await _answer(request, state, payload)


async def _models(request: Request) -> Response:
    state: JudgeState = request.app.state.judge
    return JSONResponse(
        {"object": "list", "data": [{"id": state.model_name, "object": "model", "created": 0}]}
    )


def create_judge_app(
    decide: Decide,
    *,
    faults: JudgeFaults | None = None,
    seed: int = 0,
    model_name: str = "mock-judge",
    hold: bool = False,
    response_formats: tuple[str, ...] = JSON_TYPES,
    api_key: str | None = None,
) -> Starlette:
    """Build the mock judge (a test double; see the module docstring).

    Args:
        decide: the rule, ``(answer A text, answer B text) -> "A" | "B" | "TIE"``.
        faults: injected faults (none by default).
        seed: seeds the fault draws.
        model_name: the model id served and echoed.
        hold: hold every answer until ``app.state.judge.release`` is set.
        response_formats: the ``response_format.type`` values answered in JSON (others
            but ``text`` get HTTP 500, as llama-cpp-python answers them);
            ``("json_object",)`` mimics llama-cpp-python.
        api_key: when set, every chat request without ``Authorization: Bearer <api_key>``
            gets HTTP 401 ``invalid_api_key`` (as OpenAI answers a wrong key).

    Returns:
        A Starlette app serving ``POST /v1/chat/completions`` and ``GET /v1/models``.
    """
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", _chat, methods=["POST"]),
            Route("/v1/models", _models, methods=["GET"]),
        ]
    )
    app.state.judge = JudgeState(
        decide=decide,
        faults=faults or JudgeFaults(),
        seed=seed,
        model_name=model_name,
        hold=hold,
        response_formats=response_formats,
        api_key=api_key,
    )
    return app
