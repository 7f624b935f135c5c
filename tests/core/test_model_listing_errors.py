"""``GET /v1/models`` failures say what to fix: a refused key, a wrong URL, nothing there."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from shadoweval.application.runs import server_model_identity
from shadoweval.errors import ShadowEvalError
from shadoweval.model_listing import ModelListingError, list_model_ids


def _identity(transport: httpx.MockTransport) -> None:
    async def go() -> None:
        await list_model_ids("http://cand:8000", api_key="k-1", transport=transport)

    asyncio.run(go())


def test_the_key_goes_as_bearer_and_as_anthropics_header() -> None:
    seen: list[httpx.Headers] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json={"object": "list", "data": [{"id": "claude-x"}]})

    ids = asyncio.run(
        list_model_ids("http://cand:8000", api_key="k-1", transport=httpx.MockTransport(answer))
    )
    assert ids == ["claude-x"]
    assert seen[0]["authorization"] == "Bearer k-1"
    assert seen[0]["x-api-key"] == "k-1"
    assert seen[0]["anthropic-version"]


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (401, "the server refused the API key (HTTP 401)"),
        (403, "the server refused the API key (HTTP 403)"),
        (404, "a doubled /v1?"),
    ],
)
def test_an_error_status_names_its_likely_cause(status: int, words: str) -> None:
    transport = httpx.MockTransport(lambda _: httpx.Response(status, json={"error": "x"}))
    with pytest.raises(ModelListingError) as caught:
        _identity(transport)
    assert caught.value.status == status
    assert words in caught.value.likely()


def test_the_run_error_names_the_cause_and_the_option() -> None:
    # nothing listens on port 9 of this host: the connection is refused
    with pytest.raises(ShadowEvalError) as caught:
        asyncio.run(server_model_identity("http://127.0.0.1:9", None, "k", timeout_s=5))
    text = str(caught.value)
    assert "nothing answers at that address" in text
    assert "--candidate-model NAME" in text
