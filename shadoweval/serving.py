"""An ASGI app under a real uvicorn server in a background thread.

For what must listen on a socket beside other work: a replay worker's ``/metrics`` port,
mock-llm in the demo, tests that need a real socket (the replay client, the official
``openai`` client). A thread, not a task on the caller's loop: uvicorn's ``serve`` takes
over SIGTERM and SIGINT when it runs on the main thread, and those belong to the caller
(the replay worker's graceful stop). The capture sidecar runs its two servers on its own
loop instead (it owns the signals).

uvicorn's access log writes each request's target with its query string. A client that
puts a token in the URL (``?token=…``, ``?access_token=…``, ``?api_key=…``) would have it
written to the log: :class:`AccessLogRedaction` (installed on the ``uvicorn.access``
logger by :func:`install_access_log_redaction`; every server here and the HTTP API
install it) replaces those values before any handler formats the line.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Self

import uvicorn

from shadoweval.lifecycle import SyncLifecycle
from shadoweval.log_limits import LOG_FORMAT
from shadoweval.redaction import redact_request_target

ACCESS_LOGGER = "uvicorn.access"
"""The logger uvicorn writes its access log to."""


class AccessLogRedaction(logging.Filter):
    """Redacts credentials in the request target of uvicorn's access-log records.

    uvicorn logs ``'%s - "%s %s HTTP/%s" %d'`` with the client, method, target
    (``path?query``), HTTP version and status as arguments; the target (argument 3) goes
    through :func:`shadoweval.redaction.redact_request_target`. Records of another shape
    pass unchanged. Never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's target in place; always ``True`` (the record is kept)."""
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            target = redact_request_target(args[2])
            if target != args[2]:
                record.args = (*args[:2], target, *args[3:])
        return True


def install_access_log_redaction(logger_name: str = ACCESS_LOGGER) -> AccessLogRedaction:
    """Add :class:`AccessLogRedaction` to ``logger_name`` once (idempotent); return it.

    A filter on the logger (not a handler) survives uvicorn's logging configuration,
    which replaces the logger's handlers but keeps its filters.
    """
    logger = logging.getLogger(logger_name)
    for existing in logger.filters:
        if isinstance(existing, AccessLogRedaction):
            return existing
    redaction = AccessLogRedaction()
    logger.addFilter(redaction)
    return redaction


def uvicorn_log_config(level: str = "info") -> dict[str, Any]:
    """uvicorn's ``log_config`` (a :func:`logging.config.dictConfig` dict) for a server
    process: uvicorn's lines, its access log and every other logger's (the root's, at
    ``level``; Alembic's at WARNING) on stderr as :data:`~shadoweval.log_limits.LOG_FORMAT`
    lines, with a time and a level like the other services' (uvicorn's own format has
    neither). Loggers configured before keep their filters (:class:`AccessLogRedaction`
    included). ``level``: a uvicorn log level name (``info``, ``warning``, …)."""
    handler = {"class": "logging.StreamHandler", "formatter": "line", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": {"format": LOG_FORMAT}},
        "handlers": {"stderr": handler},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            ACCESS_LOGGER: {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "alembic": {"level": "WARNING"},  # its schema check says "Context impl" each start
        },
        "root": {"handlers": ["stderr"], "level": level.upper()},
    }


class BackgroundServer(SyncLifecycle):
    """uvicorn serving ``app`` on ``host:port`` in a daemon thread.

    Usage::

        with BackgroundServer(app) as server:
            httpx.get(server.url + "/v1/models")

    Args:
        app: the ASGI application.
        host: the interface to bind (loopback by default).
        port: the port to bind; ``0`` (default) picks a free one.
        start_timeout_s: how long :meth:`start` waits for the socket, seconds.
        stop_timeout_s: how long :meth:`stop` waits for the thread, seconds.
        thread_name: the serving thread's name (shown in thread dumps).
        options: more :class:`uvicorn.Config` options (defaults: ``lifespan="off"``,
            ``log_level="warning"``, ``ws="none"``).

    Attributes:
        port: the configured port; the bound one once started.
        url: ``http://host:port`` once started (``""`` before).

    Started once (:mod:`shadoweval.lifecycle`); a second :meth:`start`, or one after
    :meth:`stop`, raises :class:`~shadoweval.errors.LifecycleError`.
    """

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        start_timeout_s: float = 10.0,
        stop_timeout_s: float = 10.0,
        thread_name: str = "shadoweval-server",
        **options: Any,
    ) -> None:
        options = {"log_level": "warning", "lifespan": "off", "ws": "none", **options}
        self._config = uvicorn.Config(app, host=host, port=port, **options)
        install_access_log_redaction()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._thread_name = thread_name
        self._host = host
        self._start_timeout_s = start_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self.port = port
        self.url = ""

    def start(self) -> Self:
        """Start serving; return (this server) once the socket accepts connections.

        Raises:
            RuntimeError: the server stopped before it listened (port in use?) or did not
                listen within ``start_timeout_s`` (the server stays unstarted).
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            server = uvicorn.Server(self._config)
            thread = threading.Thread(target=server.run, name=self._thread_name, daemon=True)
            self._server, self._thread = server, thread
            thread.start()
            deadline = time.monotonic() + self._start_timeout_s
            where = f"{self._host}:{self.port}"
            while not server.started:
                if not thread.is_alive():
                    raise RuntimeError(
                        f"uvicorn on {where} stopped before it started (port in use?)"
                    )
                if time.monotonic() > deadline:
                    server.should_exit = True
                    raise RuntimeError(
                        f"uvicorn on {where} did not start within {self._start_timeout_s:g} s"
                    )
                time.sleep(0.01)
            self.port = int(server.servers[0].sockets[0].getsockname()[1])
            self.url = f"http://{self._host}:{self.port}"
        return self

    def stop(self) -> None:
        """Ask the server to exit and wait for its thread (idempotent)."""
        if not self._stopping():
            return
        server, thread = self._server, self._thread
        assert server is not None
        assert thread is not None
        server.should_exit = True
        if thread.is_alive():
            thread.join(timeout=self._stop_timeout_s)
