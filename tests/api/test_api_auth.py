"""Bearer-token authentication: 401 with a challenge and JSON, ``/healthz`` open, no leaks;
refusals counted by reason (``/metrics``), wrong-token WARNINGs rate-limited (the limiter's
clock injected: the test advances it, never sleeps)."""

from __future__ import annotations

import logging

import httpx
import pytest
from pydantic import SecretStr
from starlette.applications import Starlette

from shadoweval.api.app import build_app, create_app
from shadoweval.api.auth import presented_token, token_matches
from shadoweval.api.metrics import AUTH_FAILURE_REASONS, ApiMetrics
from shadoweval.log_limits import RateLimitedLog
from shadoweval.records import Verdict
from shadoweval.storage import Repository, RunInfo

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


# ------------------------------------------------------------------ counted, rate-limited


def failures(app_metrics: ApiMetrics, reason: str) -> float:
    value = app_metrics.registry.get_sample_value(
        "shadoweval_api_auth_failures_total", {"reason": reason}
    )
    return value or 0.0


async def test_auth_failures_are_counted_by_reason_and_served_at_metrics(
    api_repo: Repository,
) -> None:
    metrics = ApiMetrics()
    app = create_app(api_repo, token=SecretStr(TOKEN), compute_verdict=_never, metrics=metrics)
    for _ in range(3):
        assert (await get(app, "/v1/runs", {"Authorization": "Bearer wrong"})).status_code == 401
    assert (await get(app, "/v1/runs", {})).status_code == 401
    assert (await get(app, "/v1/runs", {"Authorization": f"Basic {TOKEN}"})).status_code == 401
    in_url = await get(app, f"/v1/runs?access_token={TOKEN}", {})
    assert in_url.status_code == 401
    assert "query string is not accepted" in in_url.json()["detail"]
    assert TOKEN not in in_url.text
    assert (await get(app, "/v1/runs", {"Authorization": f"Bearer {TOKEN}"})).status_code == 200
    assert {r: failures(metrics, r) for r in AUTH_FAILURE_REASONS} == {
        "missing": 1,
        "malformed": 1,
        "invalid": 3,
        "query_token": 1,
    }
    assert (await get(app, "/metrics", {})).status_code == 401  # the token, like every path
    scraped = await get(app, "/metrics", {"Authorization": f"Bearer {TOKEN}"})
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    assert 'shadoweval_api_auth_failures_total{reason="invalid"} 3.0' in scraped.text
    assert 'shadoweval_api_auth_failures_total{reason="missing"} 2.0' in scraped.text


async def test_wrong_token_warnings_are_rate_limited(
    api_repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    """A client retrying a wrong token used to log one WARNING per request."""
    now = [0.0]
    app = create_app(
        api_repo,
        token=SecretStr(TOKEN),
        compute_verdict=_never,
        auth_warnings=RateLimitedLog(
            logging.getLogger("shadoweval.api.auth"), interval_s=60.0, clock=lambda: now[0]
        ),
    )
    caplog.set_level(logging.WARNING, logger="shadoweval.api.auth")

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "shadoweval.api.auth"]

    for _ in range(50):
        await get(app, "/v1/runs", {"Authorization": "Bearer wrong-token-123"})
    assert len(warnings()) == 1
    assert "invalid bearer token from 203.0.113.7" in warnings()[0]
    await get(app, f"/v1/runs?token={TOKEN}", {})  # another reason: its own line
    assert len(warnings()) == 2
    assert "parameter token" in warnings()[1]
    now[0] = 59.9
    await get(app, "/v1/runs", {"Authorization": "Bearer wrong-token-123"})
    assert len(warnings()) == 2
    now[0] = 60.0
    await get(app, "/v1/runs", {"Authorization": "Bearer wrong-token-123"})
    assert len(warnings()) == 3
    assert warnings()[2].endswith("(50 more like it not logged in the last 60 s)")
    for text in warnings():
        assert TOKEN not in text
        assert "wrong-token-123" not in text


def _never(repo: Repository, run: RunInfo) -> Verdict:
    raise AssertionError("these tests never gate")
