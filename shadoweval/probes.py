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

What ``/metrics`` exposes is declared once per process as a :class:`MetricSet`: a class whose
attributes are :func:`counter`, :func:`gauge` and :func:`histogram` declarations (name, help
text, label names), registered in one registry, in the order they are declared, when the
set is made.

Starlette is imported by :func:`probe_app` only: a process that declares metrics and serves
no endpoint (the canary session router's child) does not load it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

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
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

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


MetricT = TypeVar("MetricT", Counter, Gauge, Histogram)


class MetricDeclaration(Generic[MetricT]):
    """One metric of a :class:`MetricSet`: its kind, name, help text, label names and other
    constructor options (a histogram's ``buckets``); made by :func:`counter`, :func:`gauge`
    and :func:`histogram`.

    On a set, the attribute holds the metric registered in the set's registry (the
    declaration is what the class holds).
    """

    def __init__(
        self,
        kind: type[MetricT],
        name: str,
        documentation: str,
        labels: tuple[str, ...],
        **options: Any,
    ) -> None:
        self.kind: type[MetricT] = kind
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.options = options

    def register(self, registry: CollectorRegistry) -> MetricT:
        """The metric, registered in ``registry``.

        Raises:
            ValueError: ``registry`` holds a metric of the same name already.
        """
        metric: MetricT = self.kind(
            self.name, self.documentation, self.labels, registry=registry, **self.options
        )
        return metric

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> MetricDeclaration[MetricT]: ...

    @overload
    def __get__(self, instance: object, owner: type[Any]) -> MetricT: ...

    def __get__(
        self, instance: object | None, owner: type[Any]
    ) -> MetricDeclaration[MetricT] | MetricT:
        # only reached on the class: a set's own metric (its instance attribute) comes first
        if instance is None:
            return self
        raise AttributeError(f"{owner.__name__} was made without registering its metrics")


def counter(name: str, documentation: str, *labels: str) -> MetricDeclaration[Counter]:
    """Declare a counter ``name`` with label names ``labels`` on a :class:`MetricSet`."""
    return MetricDeclaration(Counter, name, documentation, labels)


def gauge(name: str, documentation: str, *labels: str) -> MetricDeclaration[Gauge]:
    """Declare a gauge ``name`` with label names ``labels`` on a :class:`MetricSet`."""
    return MetricDeclaration(Gauge, name, documentation, labels)


def histogram(
    name: str, documentation: str, *labels: str, buckets: tuple[float, ...]
) -> MetricDeclaration[Histogram]:
    """Declare a histogram ``name`` with upper bounds ``buckets`` (seconds, or the metric's
    unit) and label names ``labels`` on a :class:`MetricSet`."""
    return MetricDeclaration(Histogram, name, documentation, labels, buckets=buckets)


class MetricSet:
    """A process's (or a component's) metrics, declared as class attributes and registered in
    ``registry`` (a fresh one by default) in the order they are declared, a base class's
    first: the exposition lists them in that order.

    Raises (on construction):
        ValueError: ``registry`` holds a metric of one of these names already.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        for attribute, declaration in _declarations(type(self)):
            setattr(self, attribute, declaration.register(self.registry))


def _declarations(cls: type) -> Iterator[tuple[str, MetricDeclaration[Any]]]:
    """``(attribute, declaration)`` of every metric declared on ``cls`` and its bases, in
    declaration order, a base class's first (a redeclared attribute keeps its place)."""
    found: dict[str, MetricDeclaration[Any]] = {}
    for klass in reversed(cls.__mro__):
        for attribute, value in vars(klass).items():
            if isinstance(value, MetricDeclaration):
                found[attribute] = value
    yield from found.items()
