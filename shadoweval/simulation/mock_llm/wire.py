"""What every mock-llm route shares on the wire: its marker header, the proxy's HTML error
page, OpenAI-style JSON errors, the JSON object body a request must carry, SSE responses,
and the pacing and hang helpers (event-loop clock, ``anyio``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

MOCK_HEADER = ("x-mock-llm", "shadow-eval test double")
OWNED_BY = "shadow-eval-mock"

PROXY_502_HTML = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)


def error_json(
    status: int, message: str, *, type_: str, code: str, param: str | None = None
) -> JSONResponse:
    """An OpenAI-style error response."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=dict([MOCK_HEADER]))


async def json_object_body(
    request: Request, *, not_json: str, not_object: str
) -> dict[str, Any] | JSONResponse:
    """The request's body as a JSON object, or the 400 answer (:func:`error_json`) to
    send instead: ``"{not_json}: {the parse error}"`` (code ``invalid_json``) for a body
    that is not JSON, ``not_object`` (code ``invalid_request``) for JSON that is not an
    object."""
    try:
        payload = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        return error_json(
            400, f"{not_json}: {exc}", type_="invalid_request_error", code="invalid_json"
        )
    if not isinstance(payload, dict):
        return error_json(400, not_object, type_="invalid_request_error", code="invalid_request")
    return payload


async def sleep(seconds: float) -> None:
    """Wait ``seconds`` (nothing for 0 or less)."""
    if seconds > 0:
        await anyio.sleep(seconds)


async def sleep_until(deadline: float) -> None:
    """Sleep until ``deadline`` on the event loop's clock (``anyio.current_time``)."""
    await sleep(deadline - anyio.current_time())


async def hang(request: Request, limit_s: float) -> Response:
    """Send nothing until the client disconnects (or ``limit_s`` passes)."""
    with anyio.move_on_after(limit_s):
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                break
    return error_json(
        504,
        f"mock-llm injected hang released after {limit_s:g} s",
        type_="server_error",
        code="injected_hang",
    )


def event_stream(events: AsyncIterator[bytes]) -> StreamingResponse:
    """A ``text/event-stream`` response of ``events`` (uncached, with the mock's header)."""
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", MOCK_HEADER[0]: MOCK_HEADER[1]},
    )
