"""The sidecar's admin endpoints, on their own port: ``/healthz``, ``/readyz``, ``/metrics``.

They live on a separate port because the proxied port forwards every path to the
upstream (vLLM serves its own ``/metrics`` and ``/health``; a client must keep reaching
them unchanged).

* ``/healthz`` — 200 while the process serves (liveness).
* ``/readyz`` — 200 when the proxy is accepting and the upstream answered recently;
  503 with the reasons otherwise (draining after SIGTERM, upstream unreachable). A broker
  outage does *not* make the sidecar unready: it spools, and the live path is unaffected;
  the JSON body reports the sink state.
* ``/metrics`` — Prometheus text format of the sidecar's registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass(slots=True)
class Readiness:
    """Named readiness probes: each returns ``(ok, detail)``; ready = every required probe ok.

    ``informational`` probes are reported but never make the sidecar unready.
    """

    required: dict[str, Callable[[], tuple[bool, str]]] = field(default_factory=dict)
    informational: dict[str, Callable[[], tuple[bool, str]]] = field(default_factory=dict)

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


def admin_app(registry: CollectorRegistry, readiness: Readiness) -> Starlette:
    """A Starlette app serving ``/healthz``, ``/readyz`` and ``/metrics``."""

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        ready, report = readiness.check()
        return JSONResponse(
            {"status": "ready" if ready else "not_ready", "checks": report},
            status_code=200 if ready else 503,
        )

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
        ]
    )
