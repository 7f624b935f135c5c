"""Header rules of the live-path proxy: what crosses the sidecar, in both directions.

Headers are ASGI-shaped: a list of ``(name, value)`` byte pairs, names lower-case
(ASGI guarantees that for request headers; :func:`response_headers_for_client` lower-cases
the upstream's). Everything not named below passes through unchanged and in order.

**Hop-by-hop headers** (RFC 9110 §7.6.1) describe one connection, not the message, and are
never forwarded in either direction: ``Connection`` and every header it names,
``Keep-Alive``, ``Proxy-Connection``, ``TE``, ``Transfer-Encoding``, ``Upgrade`` and
``Trailer``. Framing is redone per connection: httpx sends the (fully read) request body
with ``Content-Length``; the sidecar's server re-chunks a response that has no
``Content-Length`` (an upstream ``Content-Length`` passes through unchanged).

**Host** (RFC 9110 §7.2): the client's ``Host`` names the sidecar, so it is not forwarded;
httpx sets the upstream's own authority so virtual hosting there keeps working. The
client's value is kept as ``X-Forwarded-Host`` (de-facto standard, as nginx and Envoy do):

* ``X-Forwarded-For``: the client's address is appended to any value already present
  (``"a, b, client"``), the list form every reverse proxy uses;
* ``X-Forwarded-Host`` and ``X-Forwarded-Proto``: set from the client's ``Host`` and the
  connection's scheme unless the request already carries them (a proxy in front of the
  sidecar set them first, and theirs name the original request).

The RFC 7239 ``Forwarded`` header is not added (nor removed). The request is otherwise
forwarded as sent: ``Authorization``, cookies and ``Accept-Encoding`` included — the live
model must see exactly what the client meant (redaction happens later, on the captured
copy only).
"""

from __future__ import annotations

from collections.abc import Iterable

HOP_BY_HOP: frozenset[bytes] = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"transfer-encoding",
        b"upgrade",
        b"trailer",
    }
)
"""Hop-by-hop header names (RFC 9110 §7.6.1), lower-case."""

SHADOW_MARKER: bytes = b"x-shadow-eval"
"""Request header carried by shadow-eval's own replay traffic (``shadoweval.replay.rewrite``)."""

_HOST = b"host"
_XFF = b"x-forwarded-for"
_XFH = b"x-forwarded-host"
_XFP = b"x-forwarded-proto"

Headers = list[tuple[bytes, bytes]]
"""ASGI header list: ``(name, value)`` byte pairs, order kept."""


def connection_tokens(values: Iterable[bytes]) -> frozenset[bytes]:
    """Header names listed in ``Connection`` field values (RFC 9110 §7.6.1), lower-case.

    ``[b"keep-alive, X-Trace"]`` → ``{b"keep-alive", b"x-trace"}``; empty items are ignored.
    """
    names: set[bytes] = set()
    for value in values:
        for item in value.split(b","):
            token = item.strip().lower()
            if token:
                names.add(token)
    return frozenset(names)


def _dropped_names(headers: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """``HOP_BY_HOP`` plus the names the ``Connection`` headers list (names lower-case)."""
    listed = [v for k, v in headers if k == b"connection"]
    return HOP_BY_HOP | connection_tokens(listed) if listed else HOP_BY_HOP


def request_headers_for_upstream(
    headers: Iterable[tuple[bytes, bytes]],
    client: tuple[str, int] | None,
    scheme: str,
) -> Headers:
    """The headers to send upstream for a client request.

    Args:
        headers: the client's headers from the ASGI scope (names lower-case).
        client: the client's ``(host, port)`` from the ASGI scope, or ``None``.
        scheme: ``"http"`` or ``"https"``: how the client reached the sidecar.

    Returns:
        The client's headers minus hop-by-hop ones and ``Host``, in their order, then
        ``X-Forwarded-For``/``-Host``/``-Proto`` (see the module docstring). No
        ``Host``/``Content-Length``: httpx adds those for the upstream request.
    """
    headers = headers if isinstance(headers, list) else list(headers)
    dropped = _dropped_names(headers)
    out: Headers = []
    host: bytes | None = None
    forwarded_for: list[bytes] = []
    has_xfh = has_xfp = False
    for name, value in headers:
        if name in dropped:
            continue
        if name == _HOST:
            if host is None:
                host = value
            continue
        if name == _XFF:
            forwarded_for.append(value)
            continue
        if name == _XFH:
            has_xfh = True
        elif name == _XFP:
            has_xfp = True
        out.append((name, value))
    if client is not None:
        forwarded_for.append(client[0].encode("latin-1"))
    if forwarded_for:
        out.append((_XFF, b", ".join(forwarded_for)))
    if host is not None and not has_xfh:
        out.append((_XFH, host))
    if not has_xfp:
        out.append((_XFP, scheme.encode("latin-1")))
    return out


def response_headers_for_client(raw: Iterable[tuple[bytes, bytes]]) -> Headers:
    """The upstream's response headers as sent to the client.

    Args:
        raw: header pairs as received (any case), e.g. ``httpx.Response.headers.raw``.

    Returns:
        Names lower-cased (ASGI), hop-by-hop headers and those ``Connection`` names removed,
        everything else (``Content-Length``, ``Content-Encoding``, ``Set-Cookie``, ``Date``,
        ``Server`` ...) unchanged and in order.
    """
    lowered = [(name.lower(), value) for name, value in raw]
    dropped = _dropped_names(lowered)
    return [(name, value) for name, value in lowered if name not in dropped]


def has_header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bool:
    """Whether a header ``name`` (lower-case bytes) is present in ASGI ``headers``."""
    return any(k == name for k, _ in headers)
