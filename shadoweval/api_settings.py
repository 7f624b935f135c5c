"""Settings of the HTTP API, read from ``SHADOWEVAL_API__*`` environment variables.

Kept apart from :class:`shadoweval.config.Settings` (which the CLI builds for every
command): only ``shadow-eval api serve`` and the API's application factory
(``shadoweval.api.app:app_from_environment``) read these. Command-line options override them.

* ``SHADOWEVAL_API__TOKEN``: the bearer token clients must send (a secret: never logged,
  never printed);
* ``SHADOWEVAL_API__TOKEN_FILE``: a file holding the token (a mounted secret), read when
  no token is given directly;
* ``SHADOWEVAL_API__HOST`` / ``SHADOWEVAL_API__PORT``: where to listen (loopback by
  default);
* ``SHADOWEVAL_API__AUTH_LOG_INTERVAL_S``: at most one WARNING line per this many seconds
  and reason about refused tokens (default 60; every refusal is counted in
  ``shadoweval_api_auth_failures_total{reason}`` whether logged or not).

Serving without a token has no variable on purpose: only the explicit
``--insecure-no-auth`` option of ``shadow-eval api serve`` does it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from shadoweval.errors import ConfigError
from shadoweval.ports import API_PORT

MIN_TOKEN_CHARS = 16
"""Shorter tokens are refused: a bearer token is a password that is never rate-limited."""


class ApiSettings(BaseSettings):
    """Where the API listens and the token it requires."""

    model_config = SettingsConfigDict(env_prefix="SHADOWEVAL_API__", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=API_PORT, ge=0, le=65535)
    token: SecretStr | None = None
    token_file: Path | None = None
    auth_log_interval_s: float = Field(default=60.0, gt=0)


def read_token_file(path: Path) -> SecretStr:
    """The token in ``path``: its text without surrounding whitespace.

    Raises:
        ConfigError: the file cannot be read, or holds no token.
    """
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"--token-file {path}: cannot read it ({exc.__class__.__name__}: {exc})",
            field="token_file",
            value=str(path),
        ) from None
    if not text:
        raise ConfigError(f"--token-file {path} is empty", field="token_file", value=str(path))
    return SecretStr(text)


def resolve_token(settings: ApiSettings, token_file: Path | None) -> tuple[SecretStr | None, str]:
    """The token to require and where it came from (for the start-up line, never the value).

    Order: ``token_file`` (the command-line option), ``SHADOWEVAL_API__TOKEN``,
    ``SHADOWEVAL_API__TOKEN_FILE``. Returns ``(None, "none")`` when none is configured.

    Raises:
        ConfigError: a token file cannot be read or is empty, or the token is shorter than
            :data:`MIN_TOKEN_CHARS` (the message never contains the token).
    """
    if token_file is not None:
        token, source = read_token_file(token_file), f"--token-file {token_file}"
    elif settings.token is not None:
        token, source = settings.token, "SHADOWEVAL_API__TOKEN"
    elif settings.token_file is not None:
        token = read_token_file(settings.token_file)
        source = f"SHADOWEVAL_API__TOKEN_FILE ({settings.token_file})"
    else:
        return None, "none"
    length = len(token.get_secret_value())
    if length < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"the API token from {source} has {length} characters; use at least "
            f"{MIN_TOKEN_CHARS} (e.g. `openssl rand -hex 32`)",
            field="token",
        )
    return token, source


def required_token(
    settings: ApiSettings, token_file: Path | None, *, insecure_no_auth: bool = False
) -> tuple[SecretStr | None, str]:
    """The token the API must require, refusing the two unsafe combinations.

    As :func:`resolve_token`; ``(None, "none")`` only with ``insecure_no_auth`` (the
    ``--insecure-no-auth`` option: there is no environment variable for it).

    Raises:
        ConfigError: no token and no ``insecure_no_auth``; a token and ``insecure_no_auth``;
            or as :func:`resolve_token`.
    """
    token, source = resolve_token(settings, token_file)
    if token is None and not insecure_no_auth:
        raise ConfigError(
            "refusing to start without an API token: set SHADOWEVAL_API__TOKEN or pass "
            "--token-file (or, on a trusted loopback only, --insecure-no-auth)",
            field="token",
        )
    if token is not None and insecure_no_auth:
        raise ConfigError(
            f"--insecure-no-auth given, but a token is configured ({source}); use one or the other",
            field="insecure_no_auth",
        )
    return token, source
