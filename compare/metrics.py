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

from prometheus_client import CollectorRegistry

from shadoweval.probes import MetricSet, counter, gauge

__all__ = ["FollowMetrics"]


class FollowMetrics(MetricSet):
    """The follow worker's metrics, registered in ``registry`` (a fresh one by default)."""

    scored = counter("shadoweval_compare_scored", "Pairs scored and written by this worker.")
    rejected = counter(
        "shadoweval_compare_rejected",
        "Pairs this worker kept as rejected records, by reason.",
        "reason",
    )
    polls = counter("shadoweval_compare_polls", "Polls of the database.")
    unscored = gauge(
        "shadoweval_compare_unscored_pairs",
        "Unscored pairs of the run at the start of the last poll (all workers' backlog).",
    )
    buckets_held_elsewhere = gauge(
        "shadoweval_compare_buckets_held_elsewhere",
        "Buckets with work held by other workers at the last poll.",
    )
    waiting_for_repeat = gauge(
        "shadoweval_compare_waiting_for_repeat",
        "Pairs left unscored at the last poll: their baseline-repeat outcome is not stored.",
    )

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        self.ready = False
