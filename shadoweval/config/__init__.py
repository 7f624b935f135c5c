"""Configuration: one :class:`Settings` object, built only by the CLI.

pydantic-settings reads environment variables with prefix ``SHADOWEVAL_`` and ``__`` as
the nesting delimiter (``SHADOWEVAL_REPLAY__CONCURRENCY=32``). Components never read the
environment themselves: each takes its part of the settings by constructor, and tests pass
constructor arguments.

The settings are split by the part of the product they configure (``capture``, ``envoy``,
``replay``, ``kafka``, ``scoring``, ``cache_hit_rules``, ``settings``); every name is
importable from ``shadoweval.config`` as before.
"""

from __future__ import annotations

from shadoweval.config.cache_hit_rules import DEFAULT_CACHE_HIT_RULES, CacheHitRule
from shadoweval.config.capture import (
    DEFAULT_SECRET_FIELDS,
    BodyRedactionSettings,
    CaptureSettings,
    LiveModelSettings,
    TaskTypeRule,
)
from shadoweval.config.envoy import EnvoyCanarySettings, EnvoySettings
from shadoweval.config.kafka import KafkaSettings, SpoolSettings
from shadoweval.config.replay import ReplaySettings, WorkerSettings
from shadoweval.config.scoring import CompareSettings, JudgeSettings
from shadoweval.config.settings import (
    DatabaseSettings,
    Settings,
    check_environment,
    load_settings,
)

__all__ = [
    "DEFAULT_CACHE_HIT_RULES",
    "DEFAULT_SECRET_FIELDS",
    "BodyRedactionSettings",
    "CacheHitRule",
    "CaptureSettings",
    "CompareSettings",
    "DatabaseSettings",
    "EnvoyCanarySettings",
    "EnvoySettings",
    "JudgeSettings",
    "KafkaSettings",
    "LiveModelSettings",
    "ReplaySettings",
    "Settings",
    "SpoolSettings",
    "TaskTypeRule",
    "WorkerSettings",
    "check_environment",
    "load_settings",
]
