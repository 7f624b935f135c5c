"""The :class:`Settings` of one process, read from the environment and checked."""

from __future__ import annotations

from pydantic import BaseModel
from pydantic_settings import BaseSettings, SettingsConfigDict

from shadoweval.config.capture import CaptureSettings
from shadoweval.config.envoy import EnvoySettings
from shadoweval.config.kafka import KafkaSettings
from shadoweval.config.replay import ReplaySettings, WorkerSettings
from shadoweval.config.scoring import CompareSettings, JudgeSettings


class DatabaseSettings(BaseModel):
    """Where results are stored. SQLite by default; ``postgresql+psycopg://`` in production."""

    url: str = "sqlite:///shadow-eval.db"
    echo: bool = False


class Settings(BaseSettings):
    """All settings of one shadow-eval process."""

    model_config = SettingsConfigDict(
        env_prefix="SHADOWEVAL_", env_nested_delimiter="__", extra="forbid"
    )

    database: DatabaseSettings = DatabaseSettings()
    replay: ReplaySettings = ReplaySettings()
    compare: CompareSettings = CompareSettings()
    kafka: KafkaSettings = KafkaSettings()
    capture: CaptureSettings = CaptureSettings()
    envoy: EnvoySettings = EnvoySettings()
    worker: WorkerSettings = WorkerSettings()
    judge: JudgeSettings = JudgeSettings()


def load_settings(overrides: dict[str, dict[str, object]] | None = None) -> Settings:
    """Settings from the environment with per-section overrides applied and validated.

    ``overrides`` maps a section (``"capture"``, ``"kafka"``) to field values; ``None``
    values are ignored (an option not given on the command line).

    Raises:
        ConfigError: an environment variable or override is invalid; the message names the
            dotted field and the value.
    """
    from pydantic import ValidationError

    from shadoweval.errors import ConfigError

    def _fail(exc: ValidationError, prefix: str = "") -> ConfigError:
        first = exc.errors()[0]
        loc = [str(p) for p in first["loc"]]
        value = first.get("input")
        if isinstance(value, dict):
            # A model-level check (two fields that conflict): its input is the whole
            # section, which would print every setting; the message names the fields.
            name = prefix + (".".join(loc) or "settings")
            message = str(first["msg"]).removeprefix("Value error, ")
            return ConfigError(f"{name}: {message}", field=name)
        name = prefix + ".".join(loc)
        return ConfigError(f"{name} = {value!r}: {first['msg']}", field=name, value=value)

    from pydantic_settings import SettingsError

    check_environment()
    try:
        settings = Settings()
    except ValidationError as exc:
        raise _fail(exc) from None
    except SettingsError as exc:
        raise ConfigError(
            f"{exc}: list and mapping settings are JSON, e.g. "
            'SHADOWEVAL_CAPTURE__SINKS=\'["kafka", "file"]\'',
            field="environment",
        ) from None
    if not overrides:
        return settings
    data = settings.model_dump()
    for section, values in overrides.items():
        for key, value in values.items():
            if value is not None:
                data[section][key] = value
    # SecretStr values dump masked; put the originals back before validating.
    data["capture"]["session_salt"] = settings.capture.session_salt
    data["replay"]["api_key"] = settings.replay.api_key
    data["judge"]["api_key"] = settings.judge.api_key
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise _fail(exc) from None


_OTHER_PREFIXES = ("SHADOWEVAL_API__", "SHADOWEVAL_TEST_")
"""Variables read by other settings objects (the API) or by the test suite."""


def check_environment(environ: dict[str, str] | None = None) -> None:
    """Refuse ``SHADOWEVAL_*`` variables that name no setting (a typo would be ignored).

    Raises:
        ConfigError: names the first unknown variable and the nearest known field.
    """
    import difflib
    import os

    from shadoweval.errors import ConfigError

    env = os.environ if environ is None else environ
    for key in sorted(env):
        if not key.startswith("SHADOWEVAL_") or key.startswith(_OTHER_PREFIXES):
            continue
        path = key[len("SHADOWEVAL_") :].lower().split("__")
        model: type[BaseModel] | None = Settings
        for depth, part in enumerate(path):
            if model is None:
                break
            fields = model.model_fields
            if part not in fields:
                near = difflib.get_close_matches(part, list(fields), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                where = ".".join(path[:depth]) or "settings"
                raise ConfigError(
                    f"environment variable {key} names no setting: {where} has no field "
                    f"{part!r}{hint}",
                    field=key,
                    value=env[key],
                )
            annotation = fields[part].annotation
            model = (
                annotation
                if isinstance(annotation, type) and issubclass(annotation, BaseModel)
                else None
            )
