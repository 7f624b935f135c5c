"""Cause attribution: which of the four things a model swap changes is likely at work.

A model swap changes weights, tokenizer, chat template and sampling defaults (DESIGN §1),
and each shows up as "the new model is worse". This step reports, per analysis unit, the
evidence of the three that are not the weights, read off the pairs the gate already has
(thresholds in the policy's ``causes`` block, :class:`~shadoweval.stats.policy.CausesPolicy`):

* **tokenizer or chat template** — the median prompt-token ratio candidate/baseline
  (``PairScore.prompt_token_ratio``: both servers' ``usage.prompt_tokens`` of the same
  replayed request) outside ``[1/x, x]``, ``x = prompt_token_ratio_max``: the same request
  costs other tokens, so its text was tokenized or templated differently. Measured on a
  real llama.cpp stack (issue 29 item 8c): SmolLM2 → Gemma-3 0.84 with the right template,
  1.61 with the wrong one (2.14 on short questions, where the template is most of the
  prompt);
* **chat template** — candidate answers with chat-template markers (``<|im_start|>``,
  ``[/INST]``, ``<start_of_turn>`` …: the ``template_markers`` harm detector,
  :func:`shadoweval.compare.leakage.template_leaks`) where the baseline's has none, at least
  ``min_marker_leaks`` and more than the reverse. With such leaks the template is named
  alone, else "the tokenizer or the chat template";
* **token budget** — the candidate's share of answers ending with ``finish_reason: length``
  above the baseline's by ``finish_length_shift`` or more (``max_tokens`` or the context
  length cut it);
* **sampling defaults** — on temperature-0 requests the candidate answers exactly as the
  baseline (similarity ≥ :data:`~shadoweval.stats.change.IDENTICAL_SIMILARITY` on at least
  ``greedy_identical_share`` of them) while on sampled requests it does so on at most
  ``sampled_identical_share_max``: the weights answer alike, the sampling differs.

Infrastructure pairs are left out (the model did not answer there); a measure needs
``min_pairs`` pairs in the unit. The gate (:mod:`shadoweval.stats.gate.decide`) lists the
evidence as notes (reported whatever the decision) and, when a check fails, leads the
deciding reason with :meth:`UnitCauses.likely` of the failing check's unit (the pooled
unit's when its own names none): "likely the chat template (prompt tokens ×1.61 on
identical requests, 4 marker leaks): …".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shadoweval.records import POOLED, HarmKind
from shadoweval.stats.change import IDENTICAL_SIMILARITY
from shadoweval.stats.checks.pair_arrays import PairArrays
from shadoweval.stats.policy import CausesPolicy

__all__ = [
    "SAMPLING",
    "TEMPLATE",
    "TOKENIZER_OR_TEMPLATE",
    "TOKEN_BUDGET",
    "Cause",
    "UnitCauses",
    "attribute_causes",
]

_MARKERS = list(HarmKind).index(HarmKind.TEMPLATE_MARKERS)

TEMPLATE = "the chat template"
TOKENIZER_OR_TEMPLATE = "the tokenizer or the chat template"
TOKEN_BUDGET = "the token budget (max_tokens or the context length)"
SAMPLING = "the sampling defaults"


@dataclass(frozen=True)
class Cause:
    """One likely cause and its evidence.

    Attributes:
        name: what changed, e.g. ``"the chat template"``.
        evidence: the measurements that say so, e.g. ``("prompt tokens ×1.61 on
            identical requests", "4 marker leaks")``.
    """

    name: str
    evidence: tuple[str, ...]

    def describe(self) -> str:
        """``the chat template (prompt tokens ×1.61 on identical requests, 4 marker leaks)``."""
        return f"{self.name} ({', '.join(self.evidence)})"


@dataclass(frozen=True)
class UnitCauses:
    """The likely causes found in one analysis unit, in the order they are named.

    Attributes:
        task_type: the unit (``POOLED`` or a task type).
        causes: template or tokenizer first, then token budget, then sampling.
    """

    task_type: str
    causes: tuple[Cause, ...]

    def likely(self) -> str:
        """The words that lead a failing reason: ``likely the chat template (…) and …``."""
        return "likely " + " and ".join(c.describe() for c in self.causes)

    def note(self) -> str:
        """The report line of the unit's evidence (a verdict note)."""
        unit = "pooled" if self.task_type == POOLED else f"task type {self.task_type!r}"
        return (
            f"cause attribution, {unit}: not only the weights changed: "
            + "; ".join(c.describe() for c in self.causes)
            + " (a model swap changes weights, tokenizer, chat template and sampling "
            "defaults; check the candidate's serving configuration before its weights)"
        )


def attribute_causes(
    units: Sequence[tuple[str, PairArrays]], policy: CausesPolicy
) -> dict[str, UnitCauses]:
    """The units with a likely cause other than the weights, keyed by task type.

    Args:
        units: ``(task type, arrays)`` of each analysis unit (``POOLED`` included).
        policy: the policy's ``causes`` block.

    Returns:
        Only the units where some cause is found (none when ``policy.enabled`` is false).
    """
    if not policy.enabled:
        return {}
    found: dict[str, UnitCauses] = {}
    for task_type, arrays in units:
        causes = _unit_causes(arrays, policy)
        if causes:
            found[task_type] = UnitCauses(task_type, tuple(causes))
    return found


def _unit_causes(arrays: PairArrays, policy: CausesPolicy) -> list[Cause]:
    answered = ~arrays.infra
    causes: list[Cause] = []
    template = [e for e in (_prompt_ratio(arrays, answered, policy),) if e]
    leaks = _marker_leaks(arrays, answered, policy)
    if leaks:
        causes.append(Cause(TEMPLATE, (*template, leaks)))
    elif template:
        causes.append(Cause(TOKENIZER_OR_TEMPLATE, tuple(template)))
    budget = _finish_length(arrays, answered, policy)
    if budget:
        causes.append(Cause(TOKEN_BUDGET, (budget,)))
    sampling = _sampling(arrays, answered, policy)
    if sampling:
        causes.append(Cause(SAMPLING, (sampling,)))
    return causes


def _prompt_ratio(arrays: PairArrays, answered: np.ndarray, policy: CausesPolicy) -> str | None:
    """``prompt tokens ×1.61 on identical requests`` when the median ratio is out of range."""
    ratios = arrays.prompt_ratio[answered]
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    if ratios.size < policy.min_pairs:
        return None
    median = float(np.median(ratios))
    limit = policy.prompt_token_ratio_max
    if 1.0 / limit <= median <= limit:
        return None
    return f"prompt tokens ×{median:.2f} on identical requests"


def _marker_leaks(arrays: PairArrays, answered: np.ndarray, policy: CausesPolicy) -> str | None:
    """``4 marker leaks`` when the candidate leaks template markers the baseline does not."""
    cand = arrays.cand_harm[:, _MARKERS] & answered
    base = arrays.base_harm[:, _MARKERS] & answered
    leaks = int(np.count_nonzero(cand & ~base))
    reverse = int(np.count_nonzero(base & ~cand))
    if leaks < policy.min_marker_leaks or leaks <= reverse:
        return None
    return f"{leaks} marker leak{'s' if leaks != 1 else ''}"


def _finish_length(arrays: PairArrays, answered: np.ndarray, policy: CausesPolicy) -> str | None:
    """``finish_reason length on 12 of 40 answers vs 1 of the baseline's``."""
    n = int(np.count_nonzero(answered))
    if n < policy.min_pairs:
        return None
    cand = int(np.count_nonzero(arrays.cand_finish_length & answered))
    base = int(np.count_nonzero(arrays.base_finish_length & answered))
    if (cand - base) / n < policy.finish_length_shift:
        return None
    return f"finish_reason length on {cand} of {n} answers vs {base} of the baseline's"


def _sampling(arrays: PairArrays, answered: np.ndarray, policy: CausesPolicy) -> str | None:
    """``identical to the baseline on 19 of 20 temperature-0 requests, 2 of 40 sampled``."""
    scored = answered & np.isfinite(arrays.similarity)
    identical = arrays.similarity >= IDENTICAL_SIMILARITY
    greedy = scored & (arrays.sampled == 0.0)
    sampled = scored & (arrays.sampled == 1.0)
    n_greedy, n_sampled = int(np.count_nonzero(greedy)), int(np.count_nonzero(sampled))
    if min(n_greedy, n_sampled) < policy.min_pairs:
        return None
    same_greedy = int(np.count_nonzero(identical & greedy))
    same_sampled = int(np.count_nonzero(identical & sampled))
    if (
        same_greedy / n_greedy < policy.greedy_identical_share
        or same_sampled / n_sampled > policy.sampled_identical_share_max
    ):
        return None
    return (
        f"answers identical to the baseline's on {same_greedy} of {n_greedy} temperature-0 "
        f"requests but on {same_sampled} of {n_sampled} sampled ones"
    )
