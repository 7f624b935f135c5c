"""The judge client against the mock judge on a real socket, with faults.

Each fault ends as a failed vote with its reason (never a default verdict): HTTP 5xx and
unparseable answers are not retried (the server sees one request per vote), connection
establishment errors are retried and then reported, a hung judge is a timeout. The
position swap turns an always-"A" judge into ties. In the JSON response formats the
request carries the schema (and only there), the object is read, and a cut object is a
failed vote. At most ``concurrency`` calls are in
flight (the server's count, waited on, not slept on). The judge's tokens are recorded.
"""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from shadoweval.errors import ConfigError
from shadoweval.judge import (
    PROMPT_SHA256,
    PROMPT_SHA256_BY_FORMAT,
    JudgeClient,
    ResponseFormat,
    judge_pair,
    judge_pairs,
    response_format_body,
)
from shadoweval.judge.prompt import JSON_SYSTEM_PROMPT
from shadoweval.records import QualityOutcome
from shadoweval.simulation.mock_judge import (
    UNPARSEABLE_JSON_ANSWER,
    JudgeFaults,
    always,
    create_judge_app,
    prefer_higher,
    quality_table,
)
from shadoweval.simulation.mock_llm import FaultConfig
from tests.judge.conftest import BAD, GOOD, client, make_pair, serving
from tests.waiting import eventually

pytestmark = pytest.mark.anyio

RULE = prefer_higher(quality_table({GOOD: 1.0, BAD: 0.2}))


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_both_orders_prefer_the_better_answer_and_tokens_are_recorded() -> None:
    with serving(create_judge_app(RULE, model_name="judge-test")) as (url, state):
        async with client(url, max_tokens=256) as judge:
            better = await judge_pair(judge, make_pair(0))
            worse = await judge_pair(judge, make_pair(1, baseline=GOOD, candidate=BAD))
            tie = await judge_pair(judge, make_pair(2, baseline=GOOD, candidate=GOOD))
    assert better.outcome is QualityOutcome.CANDIDATE_BETTER
    assert worse.outcome is QualityOutcome.CANDIDATE_WORSE
    assert tie.outcome is QualityOutcome.TIE
    assert [v.preferred for v in better.votes] == ["candidate", "candidate"]
    assert [v.order for v in better.votes] == ["baseline_first", "candidate_first"]
    assert better.error is None
    assert better.stratum == 1
    assert "By the test double's rule the verdict is" in better.votes[0].rationale
    for vote in better.votes:
        assert vote.prompt_tokens is not None
        assert vote.prompt_tokens > 200  # the system prompt alone has about 230 words
        assert vote.completion_tokens == len(vote.rationale.split()) + 2
    assert better.judge is not None
    assert better.judge.model == "judge-test"
    assert better.judge.prompt_sha256 == PROMPT_SHA256
    assert better.judge.endpoint == url
    assert state.requests == 6
    headers, body = state.seen[0]
    assert headers["authorization"] == "Bearer judge-key-123"
    assert body["model"] == "judge-test"
    assert body["temperature"] == 0.0
    assert body["max_tokens"] == 256
    assert body["seed"] == 11
    assert body["stream"] is False
    system, user = body["messages"]
    assert system["role"] == "system"
    assert "VERDICT: TIE" in system["content"]
    assert "What is the capital of France?" in user["content"]
    # The pair's two requests (sent concurrently, in either order): one shows the
    # baseline as Answer A, the other the candidate.
    prompts = [b["messages"][1]["content"] for _, b in state.seen[:2]]
    firsts = sorted("baseline" if p.index(BAD) < p.index(GOOD) else "candidate" for p in prompts)
    assert firsts == ["baseline", "candidate"]


async def test_a_judge_that_always_says_a_gives_ties() -> None:
    with serving(create_judge_app(always("A"))) as (url, _):
        async with client(url) as judge:
            judgements = await judge_pairs(judge, [make_pair(n) for n in range(4)])
    assert [j.outcome for j in judgements] == [QualityOutcome.TIE] * 4
    for judgement in judgements:
        assert [v.preferred for v in judgement.votes] == ["baseline", "candidate"]
        assert judgement.rationale.startswith("orders disagree (position bias)")


async def test_http_500_is_a_failed_vote_and_not_retried() -> None:
    faults = JudgeFaults(bands=FaultConfig(error_rate=1.0))
    with serving(create_judge_app(RULE, faults=faults)) as (url, state):
        async with client(url, retries=3) as judge:
            judgement = await judge_pair(judge, make_pair())
    assert judgement.outcome is None
    assert [v.error for v in judgement.votes] == ["HTTP 500: mock-judge injected fault"] * 2
    assert [v.preferred for v in judgement.votes] == [None, None]
    assert judgement.error == (
        "baseline_first vote failed: HTTP 500: mock-judge injected fault; "
        "candidate_first vote failed: HTTP 500: mock-judge injected fault"
    )
    assert state.requests == 2


async def test_a_proxy_502_page_is_a_failed_vote_naming_the_status() -> None:
    faults = JudgeFaults(bands=FaultConfig(html_rate=1.0))
    with serving(create_judge_app(RULE, faults=faults)) as (url, _):
        async with client(url) as judge:
            judgement = await judge_pair(judge, make_pair())
    assert judgement.outcome is None
    error = judgement.votes[0].error
    assert error is not None
    assert error.startswith("HTTP 502: <html>")


async def test_unparseable_answers_are_failed_votes_with_tokens() -> None:
    faults = JudgeFaults(unparseable_rate=1.0)
    with serving(create_judge_app(RULE, faults=faults)) as (url, state):
        async with client(url) as judge:
            judgement = await judge_pair(judge, make_pair())
    assert judgement.outcome is None
    for vote in judgement.votes:
        assert vote.preferred is None
        assert vote.error is not None
        assert vote.error.startswith("unparseable verdict: no 'VERDICT: A|B|TIE' line")
        assert vote.rationale == "Both answers have merits; I would rather not pick one."
        assert vote.prompt_tokens is not None
        assert vote.completion_tokens == 10
    assert state.requests == 2


async def test_a_cut_body_is_a_decode_failure() -> None:
    faults = JudgeFaults(bands=FaultConfig(malformed_rate=1.0))
    with serving(create_judge_app(RULE, faults=faults)) as (url, _):
        async with client(url) as judge:
            judgement = await judge_pair(judge, make_pair())
    assert judgement.outcome is None
    error = judgement.votes[0].error
    assert error is not None
    assert error.startswith("decode: the response is not JSON")


async def test_a_hung_judge_is_a_timeout() -> None:
    faults = JudgeFaults(bands=FaultConfig(hang_rate=1.0))
    with serving(create_judge_app(RULE, faults=faults)) as (url, state):
        async with client(url, timeout_s=0.5) as judge:
            judgement = await judge_pair(judge, make_pair())
    assert judgement.outcome is None
    for vote in judgement.votes:
        assert vote.error == "timeout: no complete response within 0.5 s"
    assert state.requests == 2


async def test_a_slow_judge_within_the_timeout_answers() -> None:
    faults = JudgeFaults(delay_s=0.3)
    with serving(create_judge_app(RULE, faults=faults)) as (url, _):
        async with client(url, timeout_s=30.0) as judge:
            judgement = await judge_pair(judge, make_pair())
    assert judgement.outcome is QualityOutcome.CANDIDATE_BETTER


async def test_connection_refused_is_retried_then_a_failed_vote() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with client(url, retries=2) as judge:
        judgement = await judge_pair(judge, make_pair())
    assert judgement.outcome is None
    for vote in judgement.votes:
        assert vote.error is not None
        assert vote.error.startswith("connect: ConnectError")
        assert vote.error.endswith("(after 3 tries)")


async def test_connect_errors_are_retried_until_the_judge_answers() -> None:
    """Only connection establishment is retried: two refusals, then a real answer."""
    app = create_judge_app(RULE)
    inner = httpx.ASGITransport(app=app)
    calls: list[str] = []

    class FlakyConnect(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            calls.append(request.url.path)
            if len(calls) <= 2:
                raise httpx.ConnectError("refused", request=request)
            return await inner.handle_async_request(request)

    judge = JudgeClient(
        "http://judge.test",
        model="m",
        retries=3,
        backoff_s=0.001,
        concurrency=1,
        transport=FlakyConnect(),
    )
    async with judge:
        vote = await judge.vote(make_pair(), "baseline_first")
    assert vote.preferred == "candidate"
    assert calls == ["/v1/chat/completions"] * 3
    assert app.state.judge.requests == 1


async def test_at_most_concurrency_calls_are_in_flight() -> None:
    app = create_judge_app(RULE, hold=True)
    with serving(app) as (url, state):
        async with client(url, concurrency=3) as judge:
            task = asyncio.ensure_future(judge_pairs(judge, [make_pair(n) for n in range(6)]))
            await eventually(lambda: state.in_flight == 3, "three judge calls in flight")
            assert state.requests == 3
            state.release.set()
            judgements = await task
    assert state.requests == 12
    assert state.max_in_flight == 3
    assert [j.outcome for j in judgements] == [QualityOutcome.CANDIDATE_BETTER] * 6


async def test_the_prompt_is_redacted_before_it_is_sent() -> None:
    secret = "sk-live-SECRET0123456789abcdef"
    pair = make_pair(user=f"My key is {secret}; what is the capital of France?")
    with serving(create_judge_app(RULE)) as (url, state):
        async with client(url, redact=lambda text: text.replace(secret, "[REDACTED]")) as judge:
            await judge_pair(judge, pair)
    for _, body in state.seen:
        assert secret not in body["messages"][1]["content"]
        assert "My key is [REDACTED]" in body["messages"][1]["content"]


async def test_no_judge_key_configured_sends_no_authorization() -> None:
    with serving(create_judge_app(RULE)) as (url, state):
        async with client(url, api_key=None) as judge:
            await judge.vote(make_pair(), "baseline_first")
    headers, _ = state.seen[0]
    assert "authorization" not in headers


@pytest.mark.parametrize("response_format", ["json_schema", "json_object"])
async def test_json_formats_send_the_schema_and_read_the_object(
    response_format: ResponseFormat,
) -> None:
    with serving(create_judge_app(RULE, model_name="judge-test")) as (url, state):
        async with client(url, response_format=response_format) as judge:
            better = await judge_pair(judge, make_pair(0))
            worse = await judge_pair(judge, make_pair(1, baseline=GOOD, candidate=BAD))
            tie = await judge_pair(judge, make_pair(2, baseline=GOOD, candidate=GOOD))
    assert better.outcome is QualityOutcome.CANDIDATE_BETTER
    assert worse.outcome is QualityOutcome.CANDIDATE_WORSE
    assert tie.outcome is QualityOutcome.TIE
    assert better.votes[0].rationale == "By the test double's rule the verdict is B."
    assert better.judge is not None
    assert better.judge.prompt_sha256 == PROMPT_SHA256_BY_FORMAT[response_format]
    assert better.judge.prompt_sha256 != PROMPT_SHA256
    for _, body in state.seen:
        assert body["response_format"] == response_format_body(response_format)
        assert body["messages"][0]["content"] == JSON_SYSTEM_PROMPT
    kinds = {body["response_format"]["type"] for _, body in state.seen}
    assert kinds == {response_format}


async def test_the_text_format_sends_no_response_format() -> None:
    with serving(create_judge_app(RULE)) as (url, state):
        async with client(url) as judge:
            assert judge.response_format == "text"
            await judge_pair(judge, make_pair())
    assert state.requests == 2
    for _, body in state.seen:
        assert "response_format" not in body
        assert body["messages"][0]["content"].endswith("VERDICT: TIE")


async def test_a_cut_json_answer_is_a_failed_vote_naming_max_tokens() -> None:
    faults = JudgeFaults(unparseable_rate=1.0)
    with serving(create_judge_app(RULE, faults=faults)) as (url, state):
        async with client(url, response_format="json_object", max_tokens=96) as judge:
            judgement = await judge_pair(judge, make_pair())
    assert judgement.outcome is None
    for vote in judgement.votes:
        assert vote.preferred is None
        assert vote.error is not None
        assert vote.error.startswith("unparseable verdict: the judge's answer is not a JSON object")
        assert vote.error.endswith("[the answer was cut at max_tokens 96: finish_reason length]")
        assert vote.rationale == UNPARSEABLE_JSON_ANSWER  # the raw answer is kept
        assert vote.completion_tokens is not None
    assert judgement.error is not None
    assert judgement.error.startswith("baseline_first vote failed: unparseable verdict")
    assert state.requests == 2  # not retried


async def test_position_swap_in_json_format_turns_always_a_into_ties() -> None:
    with serving(create_judge_app(always("A"))) as (url, _):
        async with client(url, response_format="json_schema") as judge:
            judgements = await judge_pairs(judge, [make_pair(n) for n in range(3)])
    assert [j.outcome for j in judgements] == [QualityOutcome.TIE] * 3
    for judgement in judgements:
        assert [v.preferred for v in judgement.votes] == ["baseline", "candidate"]
        assert judgement.rationale.startswith("orders disagree (position bias)")


async def test_json_schema_against_a_llama_cpp_python_like_server_fails_as_data() -> None:
    """llama-cpp-python's server reads only ``json_object``: ``json_schema`` comes back as
    an HTTP 500 validation error, a failed vote naming it; ``json_object`` works."""
    app = create_judge_app(RULE, response_formats=("json_object",))
    with serving(app) as (url, _):
        async with client(url, response_format="json_schema") as judge:
            refused = await judge_pair(judge, make_pair())
        async with client(url, response_format="json_object") as judge:
            judged = await judge_pair(judge, make_pair())
    assert refused.outcome is None
    error = refused.votes[0].error
    assert error is not None
    assert error.startswith("HTTP 500: 1 validation error: response_format.type")
    assert "'json_object'" in error
    assert judged.outcome is QualityOutcome.CANDIDATE_BETTER


def test_an_unknown_response_format_is_refused() -> None:
    with pytest.raises(ConfigError, match="judge response_format must be one of") as info:
        JudgeClient("http://judge:1", model="m", response_format="yaml")  # type: ignore[arg-type]
    assert info.value.field == "judge.response_format"
