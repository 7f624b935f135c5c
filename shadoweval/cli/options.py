"""Options shared by several commands, declared once; options several commands take
together are option groups (:mod:`shadoweval.cli.option_groups`)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shadoweval.cli.option_groups import option_group

if TYPE_CHECKING:
    from shadoweval.application.candidate_runs import CandidateTarget
    from shadoweval.application.capture import CaptureOverrides
    from shadoweval.application.runs import RunRequest
    from shadoweval.storage import Repository

DatabaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="SQLAlchemy URL of the results database "
        "(default: SHADOWEVAL_DATABASE__URL, else sqlite:///shadow-eval.db).",
    ),
]
PolicyOpt = Annotated[
    Path | None,
    typer.Option(
        "--policy",
        help="Gate policy YAML (default: the shipped default policy). For a run that exists "
        "(gate), only a check: a policy other than the run's frozen one is an error.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the verdict as JSON on stdout.")]
ProgressOpt = Annotated[
    bool, typer.Option("--progress/--no-progress", help="Show a progress bar on stderr.")
]
EncoderOpt = Annotated[
    str,
    typer.Option(
        "--encoder",
        help="Similarity encoder: minilm (bundled all-MiniLM-L6-v2) or hashing (not "
        "semantic; smoke tests only).",
    ),
]
DeviceOpt = Annotated[str, typer.Option("--device", help="Torch device for the encoder.")]
BackendOpt = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help="MiniLM inference backend: auto (measure once per machine, keep the fastest that "
        "agrees with fp32), torch-fp32, torch-bf16, torch-fp16 (cuda), onnx-fp32, onnx-int8 "
        "(default SHADOWEVAL_COMPARE__BACKEND, auto). The hashing encoder takes auto or "
        "torch-fp32 only.",
    ),
]
StructuredOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--structured-task-type",
        help="Task type whose outputs must be JSON even when requests do not say so (repeatable).",
    ),
]


CandidateUrlOpt = Annotated[
    list[str],
    typer.Option(
        "--candidate-url",
        help="Base URL of the candidate (shadow) server. Repeat it to evaluate several "
        "candidates on the same sample, each as NAME=URL (or named by --candidate-model, "
        "else c1, c2, ...): one run per candidate, <run id>-<name>.",
    ),
]
CandidateModelOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--candidate-model",
        help="Candidate model name (default: its /v1/models); with several candidates, "
        "none or one per --candidate-url, in the same order.",
    ),
]
BaselineRepeatUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--baseline-repeat-url",
        help="Base URL of a shadow replica of the baseline model: a sampled share of "
        "exchanges is replayed there too (noise floor, latency under equal load).",
    ),
]
BaselineRepeatModelOpt = Annotated[
    str | None,
    typer.Option("--baseline-repeat-model", help="Its model name (default: the baseline's)."),
]
BaselineRepeatShareOpt = Annotated[
    float,
    typer.Option(
        "--baseline-repeat-share", min=0.0, max=1.0, help="Share of exchanges replayed there."
    ),
]
RunIdOpt = Annotated[
    str | None,
    typer.Option("--run-id", "--run", help="Run id (resumed if it exists, else created)."),
]
ExistingRunOpt = Annotated[str, typer.Option("--run", "--run-id", help="Run id.")]
RunNameOpt = Annotated[str | None, typer.Option("--name", help="Run name.")]
ConcurrencyOpt = Annotated[
    int | None, typer.Option("--concurrency", help="Requests in flight (all targets).")
]
RateOpt = Annotated[float | None, typer.Option("--rate", help="Target requests per second.")]
TimeoutOpt = Annotated[
    float | None, typer.Option("--timeout", help="Limit on one whole request, seconds.")
]
WarmupOpt = Annotated[
    int | None,
    typer.Option(
        "--warmup",
        help="Warm-up requests per target: sent and completed before the measured ones, "
        "kept out of latency.",
    ),
]
PaceOpt = Annotated[
    str | None,
    typer.Option(
        "--pace",
        help="rate: starts spaced by --rate (as fast as --concurrency allows without it); "
        "capture: at the captured inter-arrival times (each exchange's capture time), "
        "divided by --pace-speed.",
    ),
]
PreflightOpt = Annotated[
    bool | None,
    typer.Option(
        "--preflight/--no-preflight",
        help="Before replaying, send one real request (the log's first) to each target and "
        "stop with exit 3 naming the URL, status and body when it fails for reasons of the "
        "environment (wrong URL, key, server down); --no-preflight for a server that meters "
        "requests (default SHADOWEVAL_REPLAY__PREFLIGHT, on).",
    ),
]
CandidateTranslateOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--candidate-translate",
        help="FROM=TO: replay the captured FROM route to the candidate as TO, translated "
        "(only /v1/messages=/v1/chat/completions: an Anthropic Messages baseline against an "
        "OpenAI-compatible candidate; what the translation drops is listed per replay). "
        "Default SHADOWEVAL_REPLAY__CANDIDATE_TRANSLATE, none.",
    ),
]
PaceSpeedOpt = Annotated[
    float | None,
    typer.Option(
        "--pace-speed",
        help="With --pace capture: replay this many times faster than captured (2.0: twice).",
    ),
]


def database_url(option: str | None) -> str:
    """The database URL: the option, else the settings (environment), else the default.

    Raises:
        ConfigError: the environment is invalid or holds a ``SHADOWEVAL_*`` variable that
            names no setting (:func:`shadoweval.config.load_settings`).
    """
    if option:
        return option
    from shadoweval.config import load_settings

    return load_settings().database.url


@contextlib.contextmanager
def existing_run(option: str | None, run_id: str) -> Iterator[Repository]:
    """The results database (:func:`database_url` of ``option``), opened without upgrading
    it, for a command on run ``run_id`` (``--run``), which must be stored there.

    Raises:
        StorageError: the database cannot be reached, does not exist or is behind
            (:func:`shadoweval.application.database.open_repository`).
        ConfigError: ``--run {run_id!r}: run not found``; an invalid environment.
    """
    from shadoweval.application.database import open_repository
    from shadoweval.errors import ConfigError

    with open_repository(database_url(option), upgrade=False) as repo:
        if repo.get_run(run_id) is None:
            raise ConfigError(f"--run {run_id!r}: run not found", field="--run", value=run_id)
        yield repo


@option_group
@dataclass(frozen=True)
class StoredRunOptions:
    """A run that exists and the results database it is stored in (``--run``,
    ``--database-url``), of a command on a stored run (:mod:`shadoweval.cli.option_groups`)."""

    run_id: ExistingRunOpt
    database_url: DatabaseUrlOpt = None

    def opened(self) -> contextlib.AbstractContextManager[Repository]:
        """The results database, opened without upgrading it, with the run checked to be
        there (:func:`existing_run`, which says what it raises)."""
        return existing_run(self.database_url, self.run_id)


SendPairsOpt = Annotated[
    bool,
    typer.Option(
        "--send-pairs",
        help="Allow sending the run's changed pairs (request and both answers, as captured "
        "and redacted) to the judge; or set SHADOWEVAL_JUDGE__SEND_PAIRS=true.",
    ),
]


# The capture sinks' options, shared by ``capture serve`` and ``capture envoy``: the flag is
# the parameter's name (``--kafka-bootstrap``), except where the declaration names it.
SinkOpt = Annotated[
    list[str] | None,
    typer.Option("--sink", help="kafka and/or file (repeat the option for both)."),
]
KafkaBootstrapOpt = Annotated[
    str | None, typer.Option(help="Kafka bootstrap servers HOST:PORT[,HOST:PORT].")
]
TopicOpt = Annotated[str | None, typer.Option(help="Kafka topic for exchanges.")]
CaptureDirOpt = Annotated[str | None, typer.Option(help="Capture-log directory of the file sink.")]
SpoolDirOpt = Annotated[str | None, typer.Option(help="Directory of the disk spool.")]
SamplePercentOpt = Annotated[
    float | None, typer.Option(help="Share of sessions captured, 0-100 (sticky).")
]
GracePeriodOpt = Annotated[
    float | None,
    typer.Option("--grace-period", help="Seconds in-flight responses may run after SIGTERM."),
]


@option_group
@dataclass(frozen=True)
class CaptureSinkOptions:
    """The capture sinks' options of ``capture serve`` and ``capture envoy``, in their
    ``--help`` order (:mod:`shadoweval.cli.option_groups`)."""

    sink: SinkOpt = None
    kafka_bootstrap: KafkaBootstrapOpt = None
    topic: TopicOpt = None
    capture_dir: CaptureDirOpt = None
    spool_dir: SpoolDirOpt = None
    sample_percent: SamplePercentOpt = None
    grace_period_s: GracePeriodOpt = None

    def applied_to(self, overrides: CaptureOverrides) -> CaptureOverrides:
        """``overrides`` (the command's own live-port options) with these sink options,
        passed by name (``--sink`` repeated: a tuple, ``sinks``); ``None`` keeps the
        environment's."""
        sink_options = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        sink_options["sinks"] = tuple(sink_options.pop("sink") or ()) or None
        return dataclasses.replace(overrides, **sink_options)


@option_group
@dataclass(frozen=True)
class EncoderOptions:
    """How pairs are scored (``compare run``, ``evaluate``): the similarity encoder, where
    and how it runs, and the task types whose outputs must be JSON
    (:mod:`shadoweval.cli.option_groups`)."""

    encoder: EncoderOpt = "minilm"
    device: DeviceOpt = "cpu"
    backend: BackendOpt = None
    structured_task_type: StructuredOpt = None

    @property
    def structured_task_types(self) -> frozenset[str]:
        """The ``--structured-task-type`` values given (none: an empty set)."""
        return frozenset(self.structured_task_type or ())

    def run_fields(self) -> dict[str, Any]:
        """The fields of a new run's :class:`~shadoweval.application.runs.RunRequest` these
        options set (the run freezes them): ``encoder``, ``structured_task_types``."""
        return {"encoder": self.encoder, "structured_task_types": self.structured_task_types}


@option_group
@dataclass(frozen=True)
class RunTargetOptions:
    """The shadow targets of a new or resumed run (``replay run``, ``evaluate``): the
    candidate and a baseline replica (:mod:`shadoweval.cli.option_groups`)."""

    candidate_url: CandidateUrlOpt
    candidate_model: CandidateModelOpt = None
    baseline_repeat_url: BaselineRepeatUrlOpt = None
    baseline_repeat_model: BaselineRepeatModelOpt = None
    baseline_repeat_share: BaselineRepeatShareOpt = 0.1

    def run_request(self, **run: Any) -> RunRequest:
        """The :class:`~shadoweval.application.runs.RunRequest` of these targets (its fields
        of the same names; the first candidate's URL and model) and ``run`` (its other
        fields).

        Raises:
            TypeError: ``run`` names no field of a run request, or a target.
            ConfigError: the candidates are invalid (:meth:`candidates`).
        """
        from shadoweval.application.runs import RunRequest

        first = self.candidates()[0]
        fields = dataclasses.asdict(self)
        fields.update(candidate_url=first.url, candidate_model=first.model)
        return RunRequest(**fields, **run)

    def candidates(self) -> list[CandidateTarget]:
        """The candidates (:func:`shadoweval.application.candidates.parse_candidate_targets`).

        Raises:
            ConfigError: a bad name, repeated names, or a model count other than 0 or the
                URLs'.
        """
        from shadoweval.application.candidate_runs import parse_candidate_targets

        return parse_candidate_targets(self.candidate_url, self.candidate_model)


@option_group
@dataclass(frozen=True)
class ReplayLoadOptions:
    """How hard and how fast a replay sends (``replay run``, ``evaluate``): the
    ``SHADOWEVAL_REPLAY__*`` settings the command line overrides
    (:mod:`shadoweval.cli.option_groups`)."""

    concurrency: ConcurrencyOpt = None
    rate: RateOpt = None
    timeout_s: TimeoutOpt = None
    warmup: WarmupOpt = None
    pace: PaceOpt = None
    pace_speed: PaceSpeedOpt = None
    preflight: PreflightOpt = None
    candidate_translate: CandidateTranslateOpt = None

    def settings_overrides(self) -> dict[str, Any]:
        """The ``replay`` section of the settings these options override (``None``: not
        given, the environment's or default applies)."""
        return {
            "concurrency": self.concurrency,
            "rate_per_s": self.rate,
            "timeout_s": self.timeout_s,
            "warmup_requests": self.warmup,
            "pace": self.pace,
            "pace_speed": self.pace_speed,
            "preflight": self.preflight,
            "candidate_translate": self.candidate_translate or None,
        }
