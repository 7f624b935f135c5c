"""The runs of several candidates on one shadow sample: the candidates from the command
line, and one run request per candidate (:mod:`shadoweval.application.candidates` compares
them; :func:`shadoweval.application.replaying.replay_candidates` replays them)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from shadoweval.application.runs import RunRequest
from shadoweval.errors import ConfigError

__all__ = ["CandidateTarget", "candidate_run_requests", "parse_candidate_targets"]

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")
_NAMED_URL = re.compile(r"^([A-Za-z0-9_.-]{1,40})=(.+)$")


@dataclass(frozen=True, slots=True)
class CandidateTarget:
    """One candidate: its name (unique on the sample), base URL and model name (``None``:
    its ``/v1/models``)."""

    name: str
    url: str
    model: str | None = None


def parse_candidate_targets(
    urls: Sequence[str], models: Sequence[str] | None = None
) -> list[CandidateTarget]:
    """``--candidate-url`` values (``URL`` or ``NAME=URL``) and ``--candidate-model``
    values (none, or one per URL, in the same order) → the candidates.

    A candidate without a name is named by its model when given, else ``c<i>`` (1-based).

    Raises:
        ConfigError: no URL, a model count other than 0 or the URLs', a name that is not
            1–40 of ``[A-Za-z0-9_.-]``, or a repeated name (each naming the value).
    """
    if not urls:
        raise ConfigError("--candidate-url: at least one is needed", field="candidate_url")
    models = list(models or [])
    if models and len(models) != len(urls):
        raise ConfigError(
            f"--candidate-model given {len(models)} times for {len(urls)} --candidate-url: "
            "give none or one per candidate, in the same order",
            field="candidate_model",
            value=", ".join(models),
        )
    targets = []
    for i, text in enumerate(urls):
        model = models[i] if models else None
        match = _NAMED_URL.match(text)
        name, url = (match.group(1), match.group(2)) if match else (model or f"c{i + 1}", text)
        if not _NAME.fullmatch(name):
            raise ConfigError(
                f"--candidate-url {text!r}: candidate name {name!r} must be 1-40 of "
                "letters, digits, '_', '.', '-' (write NAME=URL)",
                field="candidate_url",
                value=text,
            )
        targets.append(CandidateTarget(name, url, model))
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ConfigError(
            f"--candidate-url: candidate names must differ, got {names} (write NAME=URL)",
            field="candidate_url",
            value=", ".join(names),
        )
    return targets


def candidate_run_requests(
    base: RunRequest, targets: Sequence[CandidateTarget]
) -> list[tuple[str, RunRequest]]:
    """One run request per candidate: ``base`` with the candidate's URL and model, run id
    ``<group>-<name>`` (the group: ``base.run_id``, else a fresh 12-hex-digit id), name
    ``<base name> [<name>]`` when ``base`` names the run, and the group recorded."""
    group = base.run_id or uuid.uuid4().hex[:12]
    return [
        (
            t.name,
            replace(
                base,
                candidate_url=t.url,
                candidate_model=t.model,
                run_id=f"{group}-{t.name}",
                run_name=f"{base.run_name} [{t.name}]" if base.run_name else None,
                candidate_name=t.name,
                candidate_group=group,
            ),
        )
        for t in targets
    ]
