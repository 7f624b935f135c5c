"""The thresholds of cause attribution: when the verdict names the tokenizer, the chat
template, the token budget or the sampling defaults as the likely cause (issue 29 item 9).

A model swap changes four things, not one file: weights, tokenizer, chat template and
sampling defaults. :mod:`shadoweval.stats.gate.attribution` reports the evidence of the three
that are not the weights and names them first when a check fails; this block holds its
numbers (frozen with the run like every threshold; left out of the policy hash at its
defaults, so runs frozen before it keep theirs).
"""

from __future__ import annotations

from pydantic import Field, StrictBool, model_validator

from shadoweval.stats.policy.blocks import Count, Number, _Block

__all__ = ["CausesPolicy"]


class CausesPolicy(_Block):
    """When evidence of a cause other than the weights is reported and attributed.

    Attributes:
        enabled: report and attribute (default true); ``false`` names no cause.
        min_pairs: pairs a unit needs with a measure before that measure counts
            (prompt-token ratios, finish reasons, temperature-0 and sampled pairs).
            Default 10.
        prompt_token_ratio_max: the median prompt-token ratio candidate/baseline on
            identical requests outside ``[1/x, x]`` says the tokenizer or the chat template
            changed (the same request costs other tokens). Default 1.15 (SmolLM2 →
            Gemma-3 with the right template measured 0.84, with the wrong one 1.61). > 1.
        min_marker_leaks: candidate answers with chat-template markers (``<|im_start|>``,
            ``[/INST]`` …) where the baseline's has none, at least this many and more than
            the reverse, say the chat template. Default 2.
        finish_length_shift: the candidate's share of answers ending with
            ``finish_reason: length`` above the baseline's by at least this much says the
            token budget (``max_tokens`` or the context length). Default 0.1. In (0, 1).
        greedy_identical_share: at least this share of the temperature-0 pairs identical
            on both sides … Default 0.9. In (0, 1].
        sampled_identical_share_max: … while at most this share of the sampled pairs is:
            the weights answer alike and the sampling differs (the candidate server's
            sampling defaults). Default 0.5. In [0, greedy_identical_share).
    """

    enabled: StrictBool = True
    min_pairs: Count = Field(default=10, ge=1)
    prompt_token_ratio_max: Number = Field(default=1.15, gt=1)
    min_marker_leaks: Count = Field(default=2, ge=1)
    finish_length_shift: Number = Field(default=0.1, gt=0, lt=1)
    greedy_identical_share: Number = Field(default=0.9, gt=0, le=1)
    sampled_identical_share_max: Number = Field(default=0.5, ge=0, lt=1)

    @model_validator(mode="after")
    def _shares_ordered(self) -> CausesPolicy:
        if self.sampled_identical_share_max >= self.greedy_identical_share:
            raise ValueError(
                f"sampled_identical_share_max ({self.sampled_identical_share_max:g}) must be "
                f"below greedy_identical_share ({self.greedy_identical_share:g})"
            )
        return self
