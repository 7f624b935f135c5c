"""The access log of the API under a real uvicorn never shows a token (issue 13).

A client may put its token in the URL (``?token=…``, ``?access_token=…``, ``?api_key=…``);
uvicorn's access log writes the request target with its query string. The API installs
:class:`shadoweval.serving.AccessLogRedaction` on ``uvicorn.access``; these tests serve
real requests through a real uvicorn and read the lines the access logger emitted.
"""

from __future__ import annotations

import io
import logging

import httpx
from pydantic import SecretStr

from shadoweval.api.app import build_app
from shadoweval.serving import ACCESS_LOGGER, BackgroundServer
from shadoweval.storage import Repository
from tests.waiting import wait_until

from .conftest import TOKEN

SECRETS = {
    "token": "tok-" + "1" * 24,
    "access_token": "acc-" + "2" * 24,
    "api_key": "key-" + "3" * 24,
    "Authorization": "Bearer%20" + "4" * 24,
}


def _attach(out: io.StringIO) -> logging.Handler:
    # After uvicorn configured its loggers (that replaces their handlers).
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger(ACCESS_LOGGER).addHandler(handler)
    return handler


def test_query_tokens_are_redacted_in_the_access_log(api_repo: Repository) -> None:
    out = io.StringIO()
    server = BackgroundServer(build_app(api_repo, SecretStr(TOKEN)), log_level="info")
    handler = _attach(out)
    try:
        with server:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            ok = httpx.get(f"{server.url}/v1/runs?limit=2&token={TOKEN}", headers=auth)
            assert ok.status_code == 200
            for name, value in SECRETS.items():
                refused = httpx.get(f"{server.url}/v1/runs?status=held&{name}={value}")
                assert refused.status_code == 401
            wait_until(lambda: out.getvalue().count("\n") >= 5, "5 access-log lines")
    finally:
        logging.getLogger(ACCESS_LOGGER).removeHandler(handler)
    text = out.getvalue()
    assert TOKEN not in text
    for value in SECRETS.values():
        assert value not in text
        assert value.removeprefix("Bearer%20") not in text
    lines = text.splitlines()
    assert '"GET /v1/runs?limit=2&token=[REDACTED] HTTP/1.1" 200' in lines[0]
    for line, name in zip(lines[1:], SECRETS, strict=True):
        assert f'"GET /v1/runs?status=held&{name}=[REDACTED] HTTP/1.1" 401' in line


def test_a_target_without_credentials_is_logged_as_it_came(api_repo: Repository) -> None:
    out = io.StringIO()
    server = BackgroundServer(build_app(api_repo, SecretStr(TOKEN)), log_level="info")
    handler = _attach(out)
    try:
        with server:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            httpx.get(f"{server.url}/v1/runs?status=held&limit=3", headers=auth)
            wait_until(lambda: "\n" in out.getvalue(), "the access-log line")
    finally:
        logging.getLogger(ACCESS_LOGGER).removeHandler(handler)
    assert '"GET /v1/runs?status=held&limit=3 HTTP/1.1" 200' in out.getvalue()
