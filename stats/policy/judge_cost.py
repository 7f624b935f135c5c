"""The judge's cost cap: a token budget, a money budget and the judge's prices (issue 31
item 3, "the cost of a decision").

``judge run`` (and ``evaluate --judge``) prints its plan — pairs, calls, estimated tokens —
before it sends anything, and stops cleanly when the next pair's two calls would exceed the
budget (:mod:`shadoweval.judge.budget`). This block holds the numbers, frozen with the run
like every threshold; it is left out of the policy hash at its defaults (nothing set), so
runs frozen before it keep theirs. The command-line options ``--budget-tokens`` and
``--budget-usd`` override the two budgets for one judge run.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, model_validator

from shadoweval.stats.policy.blocks import OptionalCount, _Block, _strict_number

__all__ = ["JudgeCostPolicy"]


def _optional_number(value: object) -> object:
    """A YAML number, or ``null`` for "not set"."""
    return None if value is None else _strict_number(value)


OptionalNumber = Annotated[float | None, BeforeValidator(_optional_number)]
"""A float read from YAML, or ``null`` for "not set"."""


class JudgeCostPolicy(_Block):
    """What one judge run may spend (not per task type).

    Attributes:
        budget_tokens: the judge's tokens (prompt + completion, as its server reports them
            in ``usage``) one judge run may use; ``null`` (default): no token cap. ≥ 1.
        budget_usd: the money one judge run may spend, in US dollars, priced with the two
            prices below (both must be set); ``null`` (default): no money cap. > 0.
        price_per_million_input_tokens: the judge's price per million prompt tokens, USD;
            ``null`` (default): unknown (the plan shows no money). ≥ 0.
        price_per_million_output_tokens: its price per million completion tokens, USD. ≥ 0.

    Raises (on validation):
        ValueError: ``budget_usd`` set while a price is not (names the missing price).
    """

    budget_tokens: OptionalCount = Field(default=None, ge=1)
    budget_usd: OptionalNumber = Field(default=None, gt=0)
    price_per_million_input_tokens: OptionalNumber = Field(default=None, ge=0)
    price_per_million_output_tokens: OptionalNumber = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _priced(self) -> JudgeCostPolicy:
        if self.budget_usd is not None:
            for name in ("price_per_million_input_tokens", "price_per_million_output_tokens"):
                if getattr(self, name) is None:
                    raise ValueError(
                        f"budget_usd {self.budget_usd:g} needs {name} (the judge's price in "
                        "USD per million tokens) to turn tokens into money"
                    )
        return self
