"""Ground truth overrules the heuristic detectors on the pairs it covers (issue 29).

The harm detectors (``harm_<kind>``, :mod:`shadoweval.stats.checks.harms`) and the
tool-behaviour check (``tool_text_answer``, :mod:`shadoweval.stats.checks.tools`) flag a
side by a heuristic: a loop, a refusal, a text answer where tools were offered. Whether
the flagged answer is wrong is what ground truth says — reference correctness and
analysts' labels (``quality_source`` in :data:`GROUND_TRUTH_SOURCES`; the LLM judge is
not ground truth). The rule, one-sided:

* On a pair whose ground truth says the candidate is **not worse** (``quality`` 0, a tie,
  or −1, better), a flag on the **candidate alone** is not harm: the pair counts as
  concordant (both sides unflagged) in the check's 2×2 table, so it adds neither to b
  nor to the rates. BFCL's ``relevance`` category is the case in point: no offered
  function fits, a text answer is right, and the reference says so per item.
* Everything else is left as the detector saw it: a candidate-only flag where ground truth
  says the candidate is worse, and every baseline-only flag. Ground truth can clear the
  candidate of a heuristic flag, never convict it through one — its own verdict on those
  pairs is already counted by ``net_harm``, and a baseline-only flag can only lower the
  harm evidence of a one-sided check.

The tool-behaviour check goes one step further (:mod:`shadoweval.stats.checks.tools`):
a text answer is neither right nor wrong by itself (its direction comes from ``net_harm``),
so on a pair whose ground truth says the candidate is **worse**, its candidate-only flag is
*confirmed* and counted once, by ``net_harm``, not a second time as tool behaviour
(:func:`truth_worse`, ``Overruled(worse=True)``). The harm detectors keep such flags: a loop
or a leaked template marker is a harm in itself.

Without ground truth nothing changes. The check's reason says how many flags were
overruled (or confirmed) and by which source (:meth:`Overruled.describe`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shadoweval.records import JudgementSource
from shadoweval.stats.checks.pair_arrays import BoolArray, FloatArray, PairArrays

__all__ = [
    "GROUND_TRUTH_SOURCES",
    "Overruled",
    "overrule_candidate_flags",
    "truth_not_worse",
    "truth_worse",
]

GROUND_TRUTH_SOURCES: tuple[str, ...] = (
    JudgementSource.HUMAN.value,
    JudgementSource.REFERENCE.value,
)
"""The ``quality_source`` values that are ground truth: read on every pair they cover."""

_SOURCE_WORDS = {
    JudgementSource.REFERENCE.value: "reference correctness",
    JudgementSource.HUMAN.value: "analysts' labels",
}


@dataclass(frozen=True)
class Overruled:
    """Candidate-only flags that ground truth overruled, per source.

    Attributes:
        reference: on pairs whose reference correctness settles them.
        human: on pairs an analyst's label settles.
        worse: ``False`` (default): ground truth says the candidate is not worse on those
            pairs, the flags are cleared; ``True``: it says worse, the flags are confirmed
            and counted by ``net_harm`` instead (the tool-behaviour check only).
    """

    reference: int = 0
    human: int = 0
    worse: bool = False

    @property
    def total(self) -> int:
        """All overruled flags."""
        return self.reference + self.human

    def describe(self) -> str:
        """``"61 candidate flags overruled by reference correctness"``; with both sources
        ``"… by ground truth (51 reference correctness, 10 analysts' labels)"``; confirmed
        flags ``"9 candidate flags confirmed by reference correctness (… counted once, by
        net_harm)"``; ``""`` when none was overruled."""
        if not self.total:
            return ""
        by = {
            _SOURCE_WORDS[JudgementSource.REFERENCE.value]: self.reference,
            _SOURCE_WORDS[JudgementSource.HUMAN.value]: self.human,
        }
        named = [f"{n} {words}" for words, n in by.items() if n]
        if len(named) == 1:
            [words] = [words for words, n in by.items() if n]
            source = words
        else:
            source = f"ground truth ({', '.join(named)})"
        if self.worse:
            return (
                f"{self.total} candidate flags confirmed by {source} (ground truth says the "
                "candidate is worse on those pairs: counted once, by net_harm)"
            )
        return (
            f"{self.total} candidate flags overruled by {source} (ground truth says the "
            "candidate is not worse on those pairs)"
        )


def _has_truth(arrays: PairArrays) -> BoolArray:
    """Rows whose quality comes from ground truth (:data:`GROUND_TRUTH_SOURCES`)."""
    truth: BoolArray = np.isin(arrays.quality_source.astype(str), GROUND_TRUTH_SOURCES)
    return truth


def truth_not_worse(arrays: PairArrays) -> BoolArray:
    """Rows whose ground truth (:data:`GROUND_TRUTH_SOURCES`) says the candidate is not
    worse (``quality`` 0 or −1), shape ``(n,)``."""
    with np.errstate(invalid="ignore"):
        cleared: BoolArray = _has_truth(arrays) & (arrays.quality <= 0.0)
    return cleared


def truth_worse(arrays: PairArrays) -> BoolArray:
    """Rows whose ground truth (:data:`GROUND_TRUTH_SOURCES`) says the candidate is worse
    (``quality`` 1), shape ``(n,)``."""
    with np.errstate(invalid="ignore"):
        worse: BoolArray = _has_truth(arrays) & (arrays.quality > 0.0)
    return worse


def overrule_candidate_flags(
    base: FloatArray,
    cand: FloatArray,
    cleared: BoolArray,
    sources: npt.NDArray[np.object_],
    *,
    worse: bool = False,
) -> tuple[FloatArray, Overruled]:
    """The candidate's flags with those ground truth overrules set to 0.0.

    Args:
        base, cand: per-pair flags of one detector, 1.0 / 0.0 / NaN, shape ``(n,)``.
        cleared: the rows ground truth settles — :func:`truth_not_worse`, or
            :func:`truth_worse` with ``worse=True`` — of the same rows.
        sources: ``quality_source`` of the same rows.
        worse: the rows are :func:`truth_worse` ones (the flags are confirmed, not cleared).

    Returns:
        ``cand`` with the candidate-only flags (``cand`` 1.0, ``base`` 0.0) on cleared rows
        set to 0.0 (a copy when any is), and the count per source.
    """
    overruled = cleared & (cand == 1.0) & (base == 0.0)
    if not np.any(overruled):
        return cand, Overruled(worse=worse)
    kept = cand.copy()
    kept[overruled] = 0.0
    chosen = sources[overruled].astype(str)
    return kept, Overruled(
        reference=int(np.count_nonzero(chosen == JudgementSource.REFERENCE.value)),
        human=int(np.count_nonzero(chosen == JudgementSource.HUMAN.value)),
        worse=worse,
    )
