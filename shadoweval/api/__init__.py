"""The HTTP API: verdicts, runs, policy audit logs and canaries (``shadow-eval api serve``).

Modules: ``app`` (the Starlette application, its endpoints and the factory uvicorn
starts), ``auth`` (bearer-token middleware, constant-time comparison), ``schemas``
(pydantic response bodies), ``openapi`` (the OpenAPI 3.1 document built from them); the
settings (``SHADOWEVAL_API__*``) are :mod:`shadoweval.api_settings`.

The API never evaluates a gate itself: :func:`shadoweval.api.app.build_app` wires the function
``shadow-eval gate`` uses (:func:`shadoweval.application.gating.gate_run`), so both always agree.
``shadow-eval api serve`` starts it through the factory
:func:`shadoweval.api.app.app_from_environment`. See docs/ci.md.
"""

from __future__ import annotations

from shadoweval.api.app import (
    ComputeVerdict,
    app_from_environment,
    build_app,
    create_app,
    insecure_app_from_environment,
)

__all__ = [
    "ComputeVerdict",
    "app_from_environment",
    "build_app",
    "create_app",
    "insecure_app_from_environment",
]
