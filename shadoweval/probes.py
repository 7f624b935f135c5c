"""The operational endpoints of every long-running process: ``/healthz``, ``/readyz``, ``/metrics``.

One Starlette app (:func:`probe_app`) for the capture sidecar's admin port and the Kafka
replay worker's metrics port:

* ``/healthz`` — 200 while the process serves (liveness).
* ``/readyz`` — 200 when the readiness callback says ready, else 503.
* ``/metrics`` — the Prometheus registry in the text exposition format.

The bodies come in two styles, kept as each process has always answered:

========  ==============================  ===============================================
style     ``/healthz``                    ``/readyz``
========  ==============================  ===============================================
``json``  ``{"status": "ok"}``            ``{"status": "ready"|"not_ready", "checks": detail}``
``text``  ``ok\\n``                        ``ready\\n`` or ``not ready\\n`` (``: detail`` before
                                          the newline when ``detail`` is a non-empty text)
========  ==============================  ===============================================

:class:`Readiness` composes named probes into one such callback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

Probe = Callable[[], tuple[bool, str]]
"""One named check: ``(ok, detail)``."""

ReadinessCheck = Callable[[], tuple[bool, Any]]
"""What ``/readyz`` calls on each request: ``(ready, detail)``; ``detail`` is JSON-able
(``json`` style) or a text (``text`` style)."""

BodyStyle = Literal["json", "text"]


@dataclass(slots=True)
class Readiness:
    """Named readiness probes: each returns ``(ok, detail)``; ready = every required probe ok.

    ``informational`` probes are reported but never make the process unready. A probe that
    raises counts as not ok (``"probe failed: …"``).
    """

    required: dict[str, Probe] = field(default_factory=dict)
    informational: dict[str, Probe] = field(default_factory=dict)

    def check(self) -> tuple[bool, dict[str, dict[str, object]]]:
        """Run the probes; return (ready, {name: {"ok": bool, "detail": str, "required": bool}})."""
        report: dict[str, dict[str, object]] = {}
        ready = True
        for required, probes in ((True, self.required), (False, self.informational)):
            for name, probe in probes.items():
                try:
                    ok, detail = probe()
                except Exception as exc:  # a probe failure is a not-ready answer
                    ok, detail = False, f"probe failed: {exc!r}"
                report[name] = {"ok": ok, "detail": detail, "required": required}
                if required and not ok:
                    ready = False
        return ready, report


def probe_app(
    registry: CollectorRegistry, readiness: ReadinessCheck, *, style: BodyStyle = "json"
) -> Starlette:
    """A Starlette app serving ``/healthz``, ``/readyz`` and ``/metrics``.

    Args:
        registry: the Prometheus registry ``/metrics`` exposes.
        readiness: called on each ``/readyz`` request; returns ``(ready, detail)``.
        style: the bodies' style (see the module docstring).

    Returns:
        The app (no lifespan; mount it or run it under uvicorn).
    """
    if style == "json":

        async def healthz(_: Request) -> Response:
            return JSONResponse({"status": "ok"})

        async def readyz(_: Request) -> Response:
            ready, detail = readiness()
            return JSONResponse(
                {"status": "ready" if ready else "not_ready", "checks": detail},
                status_code=200 if ready else 503,
            )

    else:

        async def healthz(_: Request) -> Response:
            return PlainTextResponse("ok\n")

        async def readyz(_: Request) -> Response:
            ready, detail = readiness()
            word = "ready" if ready else "not ready"
            text = f"{word}: {detail}\n" if isinstance(detail, str) and detail else f"{word}\n"
            return PlainTextResponse(text, status_code=200 if ready else 503)

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
        ]
    )
