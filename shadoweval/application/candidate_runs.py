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
from shadoweval.redaction import strip_url_credentials

__all__ = [
    "CandidateTarget",
    "candidate_run_requests",
    "evaluated_so_far",
    "parse_candidate_targets",
    "same_url_warnings",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}")
_SCHEMES = ("http://", "https://")


@dataclass(frozen=True, slots=True)
class CandidateTarget:
    """One candidate: its name (unique on the sample), base URL and model name (``None``:
    its ``/v1/models``); ``given``: the ``--candidate-url`` value it came from (``""``:
    not from the command line)."""

    name: str
    url: str
    model: str | None = None
    given: str = ""

    @property
    def label(self) -> str:
        """``candidate 'NAME' (--candidate-url VALUE)``, credentials stripped from the URL:
        how messages name this candidate."""
        url = strip_url_credentials(self.url)
        given = f"{self.name}={url}" if self.given and self.given != self.url else url
        return f"candidate {self.name!r} (--candidate-url {given})"


def _split_named(text: str) -> tuple[str | None, str]:
    """``NAME=URL`` → (NAME, URL) when an ``=`` comes before any ``://``; else
    (``None``, the whole value)."""
    equals, scheme = text.find("="), text.find("://")
    if equals < 0 or (0 <= scheme < equals):
        return None, text
    return text[:equals], text[equals + 1 :]


def _bad_value(text: str, why: str) -> ConfigError:
    """The error of a bad ``--candidate-url`` value (credentials in it not shown)."""
    shown = re.sub(r"//[^/@]*@", "//", text)
    return ConfigError(
        f"--candidate-url {shown!r}: {why} (write URL or NAME=URL, e.g. "
        "--candidate-url v2=http://127.0.0.1:8001)",
        field="candidate_url",
        value=text,
    )


def _default_name(model: str | None, index: int) -> str:
    """The name of the ``index``-th (0-based) candidate given without one: its model name
    with every run of other characters than ``[A-Za-z0-9._-]`` made ``-`` (``Qwen/Qwen2.5``
    → ``Qwen-Qwen2.5``, at most 40 characters), else ``c<index + 1>``."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", model or "").strip("-._")[:40]
    return name if _NAME.fullmatch(name) else f"c{index + 1}"


def _parse_one(text: str, default_name: str, model: str | None) -> CandidateTarget:
    """One ``--candidate-url`` value → its candidate (see :func:`parse_candidate_targets`)."""
    given_name, url = _split_named(text)
    name = default_name if given_name is None else given_name
    if not _NAME.fullmatch(name):
        raise _bad_value(
            text,
            f"candidate name {name!r} must start with a letter or digit and be 1-40 of "
            "letters, digits, '_', '.', '-'",
        )
    if not url.startswith(_SCHEMES):
        raise _bad_value(text, f"the URL {url!r} must start with http:// or https://")
    return CandidateTarget(name, url, model, text)


def parse_candidate_targets(
    urls: Sequence[str], models: Sequence[str] | None = None
) -> list[CandidateTarget]:
    """``--candidate-url`` values (``URL`` or ``NAME=URL``) and ``--candidate-model``
    values (none, or one per URL, in the same order) → the candidates.

    A value with an ``=`` before its ``://`` (or with ``=`` and no ``://``) is
    ``NAME=URL``; NAME matches ``[A-Za-z0-9][A-Za-z0-9._-]*`` (at most 40 characters) and
    URL starts with ``http://`` or ``https://``, as does a plain URL. A candidate without
    a name is named by its model when given (other characters made ``-``), else ``c<i>``
    (1-based).

    Raises:
        ConfigError: no URL, a model count other than 0 or the URLs', a bad name, a URL
            that is not ``http(s)://…``, or a repeated name (each naming
            ``--candidate-url`` and the value).
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
    targets = [
        _parse_one(
            text, _default_name(models[i] if models else None, i), models[i] if models else None
        )
        for i, text in enumerate(urls)
    ]
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ConfigError(
            f"--candidate-url: candidate names must differ, got {names} (write NAME=URL)",
            field="candidate_url",
            value=", ".join(names),
        )
    return targets


def same_url_warnings(targets: Sequence[CandidateTarget]) -> list[str]:
    """One warning per pair of candidates with the same base URL (trailing ``/``
    ignored) and no two different ``--candidate-model`` values: they would answer the same
    model, and their comparison would measure the server's noise."""
    warnings = []
    for i, first in enumerate(targets):
        for second in targets[i + 1 :]:
            if first.url.rstrip("/") != second.url.rstrip("/"):
                continue
            if first.model and second.model and first.model != second.model:
                continue
            warnings.append(
                f"candidates {first.name!r} and {second.name!r} have the same URL "
                f"{strip_url_credentials(first.url)}: they answer the same model unless "
                "--candidate-model differs"
            )
    return warnings


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


def evaluated_so_far(
    current: CandidateTarget,
    run_id: str,
    done: Sequence[tuple[str, str]],
    *,
    what: str = "evaluated, their runs and verdicts stored",
) -> str:
    """What an error that stopped candidate ``current`` (run ``run_id``) adds to its
    message when the candidates ``done`` (name, run id) were ``what`` (evaluated, or
    replayed) before it: which, with their run ids; ``""`` when none was."""
    if not done:
        return ""
    runs = ", ".join(f"{name!r} (run {done_run})" for name, done_run in done)
    return f" [this stopped {current.label}, run {run_id}; already {what}: {runs}]"
