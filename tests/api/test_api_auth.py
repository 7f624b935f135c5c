"""Bearer-token authentication: 401 with a challenge and JSON, ``/healthz`` open, no leaks."""

from __future__ import annotations

import logging

import httpx
import pytest
from pydantic import SecretStr
from starlette.applications import Starlette

from faces.api.app import build_app
from faces.api.auth import presented_token, token_matches
from shadoweval.storage import Repository

from .conftest import TOKEN

pytestmark = pytest.mark.anyio


async def get(app: Starlette, path: str, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 4711))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        # latin-1: a client may send any byte in a header (HTTP allows obs-text)
        raw = [(name.encode(), value.encode("latin-1")) for name, value in headers.items()]
        return await client.get(path, headers=raw)


@pytest.mark.parametrize(
    "path", ["/v1/runs", "/v1/runs/rolled/verdict", "/v1/runs/held/audit", "/openapi.json"]
)
async def test_no_token_is_401_with_a_bearer_challenge(app: Starlette, path: str) -> None:
    response = await get(app, path, {})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="shadow-eval"'
    assert response.json() == {"error": "unauthorized", "detail": "missing bearer token"}


@pytest.mark.parametrize(
    "authorization",
    [
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}",
        "Bearer wrong",
        f"Basic {TOKEN}",
        f"Bearer{TOKEN}",
        "Bearer ",
        f"Bearer ü{TOKEN}",
    ],
)
async def test_a_wrong_token_is_401_and_never_echoed_or_logged(
    app: Starlette, authorization: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    response = await get(app, "/v1/runs", {"Authorization": authorization})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer ")
    assert response.json()["error"] == "unauthorized"
    presented = authorization.partition(" ")[2]
    for text in (response.text, str(response.headers), caplog.text):
        assert TOKEN not in text
        if len(presented) > 6:
            assert presented not in text


async def test_the_right_token_passes_with_any_scheme_case(app: Starlette) -> None:
    for scheme in ("Bearer", "bearer", "BEARER"):
        response = await get(app, "/v1/runs", {"Authorization": f"{scheme} {TOKEN}"})
        assert response.status_code == 200


async def test_healthz_needs_no_token(app: Starlette) -> None:
    response = await get(app, "/healthz", {})
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_without_a_token_configured_everything_is_open(api_repo: Repository) -> None:
    open_app = build_app(api_repo, None)
    response = await get(open_app, "/v1/runs", {})
    assert response.status_code == 200
    document = (await get(open_app, "/openapi.json", {})).json()
    assert "security" not in document


def test_presented_token_parsing() -> None:
    assert presented_token(f"Bearer {TOKEN}") == TOKEN
    assert presented_token(f"  bearer   {TOKEN}  ") == TOKEN
    assert presented_token(None) is None
    assert presented_token("") is None
    assert presented_token("Bearer") is None
    assert presented_token(f"Token {TOKEN}") is None


def test_token_comparison_handles_non_ascii() -> None:
    secret = SecretStr("grüße-" + "x" * 16)
    assert token_matches("grüße-" + "x" * 16, secret)
    assert not token_matches("grusse-" + "x" * 16, secret)
