"""Configuration: one :class:`Settings` object, built only by the CLI.

pydantic-settings reads environment variables with prefix ``SHADOWEVAL_`` and ``__`` as
the nesting delimiter (``SHADOWEVAL_REPLAY__CONCURRENCY=32``). Components never read the
environment themselves: each takes its part of the settings by constructor, and tests pass
constructor arguments.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class DatabaseSettings(BaseModel):
    """Where results are stored. SQLite by default; ``postgresql+psycopg://`` in production."""

    url: str = "sqlite:///shadow-eval.db"
    echo: bool = False


class ReplaySettings(BaseModel):
    """How replays are sent to a shadow target.

    ``rate_per_s``: target request rate (``None`` = as fast as concurrency allows);
    ``timeout_s``: per-request limit on the whole response; ``connect_retries``: retries
    for connection errors only, with exponential backoff from ``backoff_s``;
    ``warmup_requests``: the first N replays are flagged warm-up and excluded from
    latency statistics; ``api_key``: the shadow's own credential (the captured client's is
    never forwarded); ``keep_raw_body``: store every replayed response's raw body (an SSE
    stream is several times the size of its text), not only failed ones.
    """

    concurrency: int = Field(default=16, ge=1, le=4096)
    rate_per_s: float | None = Field(default=None, gt=0)
    timeout_s: float = Field(default=120.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    connect_retries: int = Field(default=3, ge=0, le=20)
    backoff_s: float = Field(default=0.5, ge=0)
    warmup_requests: int = Field(default=5, ge=0)
    api_key: SecretStr | None = None
    keep_raw_body: bool = False


class CompareSettings(BaseModel):
    """How pairs are scored. ``encoder`` is ``minilm`` (the bundled all-MiniLM-L6-v2)."""

    encoder: str = "minilm"
    device: str = "cpu"
    batch_size: int = Field(default=64, ge=1)
    structured_task_types: tuple[str, ...] = ()


class Settings(BaseSettings):
    """All settings of one shadow-eval process."""

    model_config = SettingsConfigDict(
        env_prefix="SHADOWEVAL_", env_nested_delimiter="__", extra="forbid"
    )

    database: DatabaseSettings = DatabaseSettings()
    replay: ReplaySettings = ReplaySettings()
    compare: CompareSettings = CompareSettings()
