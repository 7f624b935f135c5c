"""Reading which models a server serves: ``GET /v1/models`` of an OpenAI-compatible server.

One reader for every caller: the capture sidecar names the live model from its upstream
(:mod:`shadoweval.capture.identity`), and a new run names its candidate and baseline replica from
theirs (:mod:`shadoweval.application.runs`). The response is the OpenAI API reference's "List
models"
object, ``{"object": "list", "data": [{"id": ...}, ...]}``; vLLM and SGLang list the one
model they serve.

URL rule: ``base_url`` is a server's base URL with or without a trailing ``/v1``
(``http://host:8000`` and ``http://host:8000/v1/`` both read ``http://host:8000/v1/models``).
Credentials in the URL are used for the request (HTTP basic auth) but never appear in a
message: :func:`models_url_for_display` strips them.
"""

from __future__ import annotations

import httpx

from shadoweval.errors import ShadowEvalError
from shadoweval.llm_protocol.messages_request import ANTHROPIC_VERSION
from shadoweval.redaction import strip_url_credentials

__all__ = [
    "ModelListingError",
    "list_model_ids",
    "models_url",
    "models_url_for_display",
]


class ModelListingError(ShadowEvalError):
    """``GET /v1/models`` could not be read: unreachable, an error status, or not JSON.

    Attributes:
        url: the ``/v1/models`` URL asked, without credentials.
        cause: what went wrong (the httpx or JSON error's text).
        status: the HTTP status the server answered, ``None`` when it did not answer.
    """

    def __init__(self, url: str, cause: str, status: int | None = None) -> None:
        super().__init__(f"cannot read {url}: {cause}")
        self.url = url
        self.cause = cause
        self.status = status

    def likely(self) -> str:
        """What an operator most likely has to fix: ``"the server refused the API key
        (HTTP 401)"``, ``"nothing answers at that address"``, … (the status or the failure
        to connect read; the cause itself otherwise)."""
        if self.status in (401, 403):
            return f"the server refused the API key (HTTP {self.status})"
        if self.status == 404:
            return "HTTP 404: no /v1/models there (a wrong base URL, or a doubled /v1?)"
        if self.status is not None:
            return f"HTTP {self.status}"
        if "connect" in self.cause.lower():
            return f"nothing answers at that address ({self.cause})"
        return self.cause


def models_url(base_url: str) -> str:
    """The ``/v1/models`` URL of a server: ``{base}/v1/models``, or ``{base}/models`` when
    ``base_url`` already ends in ``/v1`` (a trailing ``/`` is ignored)."""
    url = base_url.rstrip("/")
    return f"{url}/models" if url.endswith("/v1") else f"{url}/v1/models"


def models_url_for_display(base_url: str) -> str:
    """:func:`models_url` without the credentials, for messages and logs."""
    return models_url(strip_url_credentials(base_url))


async def list_model_ids(
    base_url: str,
    *,
    api_key: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout_s: float = 10.0,
) -> list[str]:
    """The model ids listed by ``GET /v1/models``, in the server's order.

    Args:
        base_url: the server (``http://host:port``, with or without ``/v1``).
        api_key: sent as ``Authorization: Bearer`` and as Anthropic's ``x-api-key`` (with
            its ``anthropic-version``), so an OpenAI-compatible and an Anthropic server both
            read it; ``None`` sends no credential.
        transport: an httpx transport (a seam for tests; default: the network).
        timeout_s: whole-request limit, seconds.

    Returns:
        The ids (non-empty strings) of the ``data`` entries; empty when the body lists
        none, or is not a "List models" object.

    Raises:
        ModelListingError: the server is unreachable, answered an error status, or the
            body is not JSON.
    """
    headers = (
        {
            "authorization": f"Bearer {api_key}",
            "x-api-key": api_key,
            "anthropic-version": ANTHROPIC_VERSION,
        }
        if api_key
        else {}
    )
    try:
        async with httpx.AsyncClient(transport=transport, timeout=timeout_s) as client:
            response = await client.get(models_url(base_url), headers=headers)
            response.raise_for_status()
            payload = response.json()
    except httpx.HTTPStatusError as exc:
        status = exc.response.status_code
        raise ModelListingError(
            models_url_for_display(base_url), f"HTTP {status}", status=status
        ) from exc
    except (httpx.HTTPError, ValueError) as exc:
        raise ModelListingError(models_url_for_display(base_url), str(exc)) from exc
    data = payload.get("data") if isinstance(payload, dict) else None
    return [
        str(item["id"])
        for item in (data if isinstance(data, list) else ())
        if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]
    ]
