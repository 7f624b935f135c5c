"""Labels and judgements of pairs: HumanLabel, PairJudgement and their parts."""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import (
    AwareDatetime,
    Field,
    field_validator,
)

from shadoweval.records.base import (
    _PairRecord,
    _Record,
    utc_now,
)


class LabelValue(enum.StrEnum):
    """An analyst's judgement of one pair: how the candidate's answer compares."""

    CANDIDATE_BETTER = "candidate_better"
    CANDIDATE_WORSE = "candidate_worse"
    SAME = "same"
    BOTH_BAD = "both_bad"


MAX_SAMPLE_ID_CHARS = 200
"""Longest :attr:`HumanLabel.sample` id."""


class HumanLabel(_Record):
    """One analyst's label of one pair (exchange) in one run.

    A pair has at most one label per ``labeller``; labelling again replaces it.
    ``source`` says whether it was given in the dashboard or imported from a labelled
    export; ``labelled_at`` is UTC.

    ``sample`` tells a label of a *random* sample apart from one chosen by hand, for
    prediction-powered inference of net harm (PPI++, Angelopoulos, Duchi & Zrnic 2023:
    the judge predicts on every changed pair, the labels of a uniform random sample of
    those pairs correct it). ``None``: the pair was chosen by hand (a dashboard label, a
    lowest-similarity or otherwise filtered export, a row an analyst added) — it still
    counts as a label, but not as the PPI sample. Otherwise the id of the random sample
    the pair was drawn in (:data:`MAX_SAMPLE_ID_CHARS` characters at most, not blank):
    ``shadow-eval export --ppi-sample`` names its draws ``ppi-seed-<seed>-n-<N>`` (N pairs
    per task type) or ``ppi-seed-<seed>-fraction-<F>`` (a fraction F of each task type's
    changed pairs), and ``shadow-eval labels import`` sets it on the labels of the pairs
    that draw's manifest lists.
    """

    run_id: str
    exchange_id: str
    task_type: str
    label: LabelValue
    note: str = ""
    labeller: str = Field(min_length=1)
    labelled_at: AwareDatetime = Field(default_factory=utc_now)
    source: Literal["dashboard", "import"]
    sample: str | None = Field(default=None, min_length=1, max_length=MAX_SAMPLE_ID_CHARS)

    @field_validator("sample")
    @classmethod
    def _sample_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError(f"sample {value!r} is blank: a random sample id or None")
        return value


class QualityOutcome(enum.StrEnum):
    """Which answer of a pair is better, as a judge, an analyst or a reference checker says."""

    CANDIDATE_BETTER = "candidate_better"
    CANDIDATE_WORSE = "candidate_worse"
    TIE = "tie"


class JudgementSource(enum.StrEnum):
    """Where a pair's quality judgement came from.

    When several exist for one pair the gate uses, in order: ``human`` (an analyst's label
    overrides everything), ``reference`` (a ground-truth checker's per-side pass/fail),
    ``judge`` (an LLM judge) — :func:`shadoweval.stats.judgements.resolve_judgements`.
    """

    JUDGE = "judge"
    HUMAN = "human"
    REFERENCE = "reference"


class JudgeIdentity(_Record):
    """Who judged: frozen with the run's policy (a different judge is refused).

    ``endpoint`` is the judge's base URL with credentials and query removed;
    ``prompt_sha256`` the SHA-256 of the pairwise prompt template; the sampling
    parameters sent with every judge request.
    """

    endpoint: str
    model: str
    prompt_sha256: str
    temperature: float = 0.0
    max_tokens: int = 512
    seed: int | None = None


class JudgeVote(_Record):
    """One judge call on one pair in one presentation order.

    ``order`` says which answer was shown first (as "Answer A"); ``preferred`` is the
    judge's choice mapped back to the sides (``None`` when the call failed or its answer
    did not parse: ``error`` says why). Token counts are the judge's own usage, kept apart
    from the run's accounting.
    """

    order: Literal["baseline_first", "candidate_first"]
    preferred: Literal["candidate", "baseline", "tie"] | None = None
    rationale: str = ""
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class PairJudgement(_PairRecord):
    """A quality judgement of one pair in one run, from one source.

    ``outcome`` is ``None`` when the judgement failed (kept as data: ``error`` says why;
    the estimator treats the pair as not judged). A judge's judgement carries both
    ``votes`` (each order once; orders that disagree make a tie: position bias) and its
    ``judge`` identity; a reference judgement carries ``baseline_pass`` /
    ``candidate_pass`` and the ``checker`` that produced them; a human one the
    ``labeller``. ``stratum`` is the divergence stratum the pair was sampled from (judge
    budget), ``None`` when not sampled.
    """

    source: JudgementSource
    outcome: QualityOutcome | None = None
    rationale: str = ""
    votes: tuple[JudgeVote, ...] = ()
    judge: JudgeIdentity | None = None
    baseline_pass: bool | None = None
    candidate_pass: bool | None = None
    checker: str | None = None
    labeller: str | None = None
    stratum: int | None = None
    error: str | None = None
    judged_at: AwareDatetime = Field(default_factory=utc_now)
