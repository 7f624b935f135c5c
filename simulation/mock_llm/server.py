"""Run an ASGI app (mock-llm) under a real uvicorn server in a background thread.

For the demo and for tests that need a real socket (the replay client, the official
``openai`` client). The server binds an ephemeral port on loopback unless one is given.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

import uvicorn


class BackgroundServer:
    """uvicorn serving ``app`` on ``host:port`` in a daemon thread.

    Usage::

        with BackgroundServer(app) as server:
            httpx.get(server.url + "/v1/models")

    Attributes:
        url: ``http://host:port`` once started.

    Raises:
        RuntimeError: the server did not start within ``start_timeout_s``.
    """

    def __init__(
        self, app: Any, *, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 10.0
    ) -> None:
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", lifespan="off", ws="none"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._host = host
        self._timeout = start_timeout_s
        self.url = ""

    def start(self) -> BackgroundServer:
        """Start serving; returns when the socket accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + self._timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("uvicorn stopped before it started (port in use?)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start within {self._timeout:g}s")
            time.sleep(0.01)
        sockets = self._server.servers[0].sockets
        port = sockets[0].getsockname()[1]
        self.url = f"http://{self._host}:{port}"
        return self

    def stop(self) -> None:
        """Ask the server to exit and wait for its thread (idempotent)."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
