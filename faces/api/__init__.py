"""The HTTP API: verdicts, runs and policy audit logs for CI (``shadow-eval api serve``).

Modules: ``app`` (the Starlette application and its endpoints), ``auth`` (bearer-token
middleware, constant-time comparison), ``schemas`` (pydantic response bodies), ``openapi``
(the OpenAPI 3.1 document built from them), ``settings`` (``SHADOWEVAL_API__*``).

The API never evaluates a gate itself: the CLI hands it the function ``shadow-eval gate``
uses (:func:`faces.cli.api_cmd.build_app`), so both always agree. See docs/ci.md.
"""

from __future__ import annotations

from faces.api.app import ComputeVerdict, create_app
from faces.api.settings import ApiSettings

__all__ = ["ApiSettings", "ComputeVerdict", "create_app"]
