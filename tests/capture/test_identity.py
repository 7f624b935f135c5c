"""The live model's identity: from settings, else the upstream's /v1/models; never raises."""

from __future__ import annotations

import httpx
import pytest

from shadoweval.capture.identity import UNKNOWN_MODEL, fetch_live_model, resolve_identity
from shadoweval.config import LiveModelSettings
from shadoweval.records import ModelIdentity

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def models_app(payload: object, status: int = 200, seen: list[httpx.Request] | None = None):
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if request.url.path != "/v1/models":
            return httpx.Response(404)
        return httpx.Response(status, json=payload)

    return httpx.MockTransport(handler)


SETTINGS = LiveModelSettings(
    weights_hash="sha256:w",
    tokenizer_hash="sha256:t",
    chat_template_hash="sha256:c",
    sampling_defaults={"temperature": 0.6, "top_p": 0.95},
)


async def test_name_from_the_first_listed_model_with_settings_hashes() -> None:
    seen: list[httpx.Request] = []
    payload = {"object": "list", "data": [{"id": "llama-3-8b"}, {"id": "other"}]}
    identity = await fetch_live_model(
        "http://user:pw@upstream:8000", SETTINGS, transport=models_app(payload, seen=seen)
    )
    assert identity == ModelIdentity(
        name="llama-3-8b",
        weights_hash="sha256:w",
        tokenizer_hash="sha256:t",
        chat_template_hash="sha256:c",
        sampling_defaults={"temperature": 0.6, "top_p": 0.95},
        base_url="http://upstream:8000",  # credentials never recorded
    )
    assert [(r.url.host, r.url.path) for r in seen] == [("upstream", "/v1/models")]
    assert seen[0].headers["authorization"].startswith("Basic ")  # used, never recorded


async def test_base_url_ending_in_v1_is_not_doubled() -> None:
    seen: list[httpx.Request] = []
    transport = models_app({"data": [{"id": "only"}]}, seen=seen)
    identity = await fetch_live_model("http://h/v1/", LiveModelSettings(), transport=transport)
    assert identity.name == "only"
    assert seen[0].url.path == "/v1/models"


async def test_configured_name_means_no_request() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("the upstream must not be asked")

    identity = await fetch_live_model(
        "http://h", LiveModelSettings(name="prod-model"), transport=httpx.MockTransport(handler)
    )
    assert identity.name == "prod-model"


def refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(
    "transport",
    [
        httpx.MockTransport(refuse),
        models_app({"error": "nope"}, status=500),
        models_app({"data": []}),
        models_app({"data": [{"object": "model"}]}),
        models_app(["not", "an", "object"]),
        httpx.MockTransport(lambda r: httpx.Response(200, text="<html>")),
    ],
    ids=["unreachable", "http-500", "empty-list", "no-id", "not-object", "not-json"],
)
async def test_failures_give_unknown_never_raise(transport: httpx.MockTransport) -> None:
    identity = await fetch_live_model("http://h", SETTINGS, transport=transport, timeout_s=1)
    assert identity.name == UNKNOWN_MODEL
    assert identity.weights_hash == "sha256:w"


async def test_resolve_identity_falls_back_to_the_response_model() -> None:
    unknown = ModelIdentity(name=UNKNOWN_MODEL, weights_hash="w")
    assert resolve_identity(unknown, "from-response") == ModelIdentity(
        name="from-response", weights_hash="w"
    )
    assert resolve_identity(unknown, None) == unknown
    assert resolve_identity(ModelIdentity(name=""), None).name == UNKNOWN_MODEL
    known = ModelIdentity(name="configured")
    assert resolve_identity(known, "from-response") is known
