"""The verdict banner: decision, look, reasons, coverage and policy hash of a run.

The dashboard never gates: it shows the latest verdict stored by ``shadow-eval gate``
(or ``evaluate``, or the API); without one it says so and how to get one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shadoweval.dashboard.formatting import count_noun, md_escape, short_hash
from shadoweval.records import Decision, Verdict

__all__ = ["BANNER_REASONS", "NO_VERDICT", "Banner", "reasons_markdown", "verdict_banner"]

NO_VERDICT = "no verdict stored yet — run shadow-eval gate"
"""The banner's headline when the run has no stored verdict."""

BANNER_REASONS = 5
"""Reasons shown in the banner itself (the deciding ones come first); the rest below it."""

BannerKind = Literal["success", "warning", "error", "info"]

_KIND: dict[Decision, BannerKind] = {
    Decision.PROMOTE: "success",
    Decision.HOLD: "warning",
    Decision.ROLLBACK: "error",
}


@dataclass(frozen=True)
class Banner:
    """What the banner shows; ``kind`` picks ``st.success``/``warning``/``error``/``info``.

    ``headline`` is plain text (``"HOLD — look 2 · coverage 98.0% (980 of 1,000
    captured) · policy 3f2a…"``); ``reasons`` are the verdict's reasons in order (the
    deciding ones first); :meth:`markdown` is the banner body, Markdown-escaped.
    """

    kind: BannerKind
    headline: str
    reasons: tuple[str, ...] = ()

    def markdown(self, limit: int = BANNER_REASONS) -> str:
        """The banner body: the headline in bold, then the first ``limit`` reasons as
        bullets and, when there are more, how many more."""
        lines = [f"**{md_escape(self.headline)}**"]
        if self.reasons:
            lines.append(reasons_markdown(self.reasons[:limit]))
        if len(self.reasons) > limit:
            more = count_noun(len(self.reasons) - limit, "more reason")
            lines.append(f"\n… and {more} (all listed below)")
        return "\n".join(lines)


def reasons_markdown(reasons: tuple[str, ...]) -> str:
    """Reasons as a Markdown bullet list, each escaped."""
    return "\n".join(f"- {md_escape(reason)}" for reason in reasons)


def verdict_banner(verdict: Verdict | None) -> Banner:
    """The banner of the run's stored latest verdict (``None``: :data:`NO_VERDICT`).

    Coverage is ``paired / captured`` (:class:`~shadoweval.records.Coverage`); the policy
    hash is shortened to 12 characters (the History page shows it whole).
    """
    if verdict is None:
        return Banner("info", NO_VERDICT)
    coverage = verdict.coverage
    headline = (
        f"{verdict.decision.value.upper()} — look {verdict.look} · coverage "
        f"{coverage.share:.1%} ({coverage.paired:,} paired of {coverage.captured:,} captured)"
        f" · policy {short_hash(verdict.policy_hash)}"
    )
    return Banner(_KIND[verdict.decision], headline, tuple(verdict.reasons))
