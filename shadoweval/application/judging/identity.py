"""The judge's settings and identity: the send-pairs check, the client, the judge freeze."""

from __future__ import annotations

from typing import Any

import httpx

from shadoweval.application.redaction import body_redaction
from shadoweval.config import JudgeSettings
from shadoweval.errors import ConfigError
from shadoweval.judge import (
    JudgeClient,
    public_endpoint,
)
from shadoweval.judge.prompt import prompt_format
from shadoweval.records import (
    JudgeIdentity,
)
from shadoweval.storage import Repository, RunInfo

SEND_PAIRS_VARIABLE = "SHADOWEVAL_JUDGE__SEND_PAIRS"


def check_judge_settings(settings: JudgeSettings, *, send_pairs: bool = False) -> None:
    """Refuse a judge run the settings do not allow.

    Sending captured pairs to a judge is an explicit decision, never a default: it needs
    ``settings.send_pairs`` (``SHADOWEVAL_JUDGE__SEND_PAIRS=true``) or ``send_pairs``
    (``--send-pairs``). The judge's URL and model must be set.

    Raises:
        ConfigError: sending is not switched on (the message names
            ``SHADOWEVAL_JUDGE__SEND_PAIRS`` and ``--send-pairs``), or the URL or model
            is missing (names ``SHADOWEVAL_JUDGE__URL`` / ``SHADOWEVAL_JUDGE__MODEL``).
    """
    if not (settings.send_pairs or send_pairs):
        where = f" to {public_endpoint(settings.url)}" if settings.url else ""
        raise ConfigError(
            f"sending pairs to a judge is off: judge run sends the run's changed pairs (the "
            f"request and both answers, as the capture stored them, redacted){where}; set "
            f"{SEND_PAIRS_VARIABLE}=true or pass --send-pairs to allow it",
            field=SEND_PAIRS_VARIABLE,
            value=settings.send_pairs,
        )
    if not settings.url:
        raise ConfigError(
            "no judge endpoint: set SHADOWEVAL_JUDGE__URL (e.g. http://127.0.0.1:8000/v1)",
            field="SHADOWEVAL_JUDGE__URL",
        )
    if not settings.model.strip():
        raise ConfigError(
            "no judge model: set SHADOWEVAL_JUDGE__MODEL", field="SHADOWEVAL_JUDGE__MODEL"
        )


def judge_client(
    settings: JudgeSettings, transport: httpx.AsyncBaseTransport | None = None
) -> JudgeClient:
    """The judge client the settings describe, redacting with the configured body rules.

    Raises:
        ConfigError: a bad URL or an empty model.
    """
    redactor = body_redaction()
    return JudgeClient(
        settings.url or "",
        model=settings.model,
        api_key=None if settings.api_key is None else settings.api_key.get_secret_value(),
        concurrency=settings.concurrency,
        timeout_s=settings.timeout_s,
        connect_timeout_s=settings.connect_timeout_s,
        retries=settings.retries,
        backoff_s=settings.backoff_s,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        seed=settings.seed,
        redact=redactor.redact,
        response_format=settings.response_format,
        transport=transport,
    )


def judge_identity(settings: JudgeSettings) -> JudgeIdentity:
    """The identity the settings' judge would have (public endpoint, model, prompt hash —
    that of its response format — and sampling).

    Raises:
        ConfigError: a bad URL or an empty model.
    """
    return JudgeClient(
        settings.url or "",
        model=settings.model,
        response_format=settings.response_format,
        **_sampling(settings),
    ).identity


def response_format_of(identity: JudgeIdentity) -> str | None:
    """The response format (``text``, ``json_schema``, ``json_object``) a frozen judge's
    prompt hash stands for, ``None`` for a hash no shipped prompt has (the faces read it
    here: they do not import the judge stage)."""
    return prompt_format(identity.prompt_sha256)


def _sampling(settings: JudgeSettings) -> dict[str, Any]:
    return {
        "temperature": settings.temperature,
        "max_tokens": settings.max_tokens,
        "seed": settings.seed,
    }


def _prompt_text(sha256: str) -> str:
    """``'27b29b07201d' (text answers)``: a prompt hash and, when known, its format."""
    fmt = prompt_format(sha256)
    return f"{sha256[:12]}" + ("" if fmt is None else f" ({fmt} answers)")


def describe_identity_change(frozen: JudgeIdentity, presented: JudgeIdentity) -> str:
    """The fields in which ``presented`` differs from ``frozen``: ``model 'a' → 'b'; …``.

    A changed prompt hash names each side's response format where it is known
    (``prompt_sha256 '27b29b07201d…' (text answers) → 'cf0ccdf71211…' (json_schema
    answers)``).
    """
    old, new = frozen.model_dump(mode="json"), presented.model_dump(mode="json")
    changes: list[str] = []
    for name in old:
        if old[name] == new[name]:
            continue
        if name == "prompt_sha256":
            changes.append(
                f"prompt_sha256 {_prompt_text(str(old[name]))} → {_prompt_text(str(new[name]))}"
            )
        else:
            changes.append(f"{name} {old[name]!r} → {new[name]!r}")
    return "; ".join(changes) or "no field differs"


def describe_judge(identity: JudgeIdentity) -> str:
    """A judge in words: model, endpoint, prompt hash (and format), sampling."""
    seed = "" if identity.seed is None else f", seed {identity.seed}"
    return (
        f"{identity.model!r} at {identity.endpoint} (prompt "
        f"{_prompt_text(identity.prompt_sha256)}, temperature {identity.temperature:g}, "
        f"max_tokens {identity.max_tokens}{seed})"
    )


def freeze_judge(repo: Repository, run: RunInfo, identity: JudgeIdentity, command: str) -> bool:
    """Freeze or check the run's judge; returns whether this call froze it.

    Raises:
        ConfigError: the run is judged by another judge (both named, with what differs).
    """
    freeze = repo.freeze_judge(run.run_id, identity, command=command)
    if not freeze.accepted:
        change = describe_identity_change(freeze.frozen, identity)
        raise ConfigError(
            f"run {run.run_id} is judged by {describe_judge(freeze.frozen)}; the configured judge "
            f"{describe_judge(identity)} differs ({change}). "
            "A run keeps one judge: configure the frozen one, or judge in a new run",
            field="judge",
            value=identity.model_dump(mode="json"),
        )
    return freeze.action.value == "judge_frozen"
