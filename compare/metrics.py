"""Prometheus metrics of a follow compare worker (``compare run --follow --metrics-port``).

Metrics (one registry per worker):

* ``shadoweval_compare_scored_total`` — pairs this worker scored and wrote;
* ``shadoweval_compare_rejected_total{reason}`` — pairs it kept as rejected records;
* ``shadoweval_compare_polls_total`` — polls of the database;
* ``shadoweval_compare_unscored_pairs`` — the run's unscored pairs listed at the start of
  this worker's last poll (every worker's backlog, not only its own);
* ``shadoweval_compare_buckets_held_elsewhere`` — buckets with work that other workers held
  at the last poll;
* ``shadoweval_compare_waiting_for_repeat`` — pairs left unscored at the last poll because
  their baseline-repeat outcome is not stored yet.

``ready`` is what ``/readyz`` answers (the application layer serves the registry with
:func:`shadoweval.probes.probe_app`): true from the worker's first successful listing of
the run's unscored pairs (the database answers, the encoder is loaded) until it stops.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["FollowMetrics"]


class FollowMetrics:
    """The follow worker's metrics, registered in ``registry`` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.ready = False
        self.scored = Counter(
            "shadoweval_compare_scored", "Pairs scored and written by this worker.", registry=r
        )
        self.rejected = Counter(
            "shadoweval_compare_rejected",
            "Pairs this worker kept as rejected records, by reason.",
            ["reason"],
            registry=r,
        )
        self.polls = Counter("shadoweval_compare_polls", "Polls of the database.", registry=r)
        self.unscored = Gauge(
            "shadoweval_compare_unscored_pairs",
            "Unscored pairs of the run at the start of the last poll (all workers' backlog).",
            registry=r,
        )
        self.buckets_held_elsewhere = Gauge(
            "shadoweval_compare_buckets_held_elsewhere",
            "Buckets with work held by other workers at the last poll.",
            registry=r,
        )
        self.waiting_for_repeat = Gauge(
            "shadoweval_compare_waiting_for_repeat",
            "Pairs left unscored at the last poll: their baseline-repeat outcome is not stored.",
            registry=r,
        )
