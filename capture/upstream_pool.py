"""The live path's connection pool to the upstream — now the core's :mod:`shadoweval.http1.pool`.

Kept as the capture stage's name for it (the proxy and its tests import from here); the
pool itself lives in the core so the replay client (:mod:`shadoweval.replay.client`) uses the same
connections, parser and stale keep-alive checks.
"""

from __future__ import annotations

from shadoweval.http1.pool import ResponseHandler, UpstreamConnection, UpstreamError, UpstreamPool

__all__ = ["ResponseHandler", "UpstreamConnection", "UpstreamError", "UpstreamPool"]
