"""The live canary's statistics (issue 16): two independent arms, not pairs.

* :mod:`shadoweval.stats.canary.policy` — :class:`CanaryPolicy` (the ramp, rollback conditions,
  promote margins), YAML loading with field-named errors, hash, dump.

* :mod:`shadoweval.stats.canary.srm` — :func:`sample_ratio_mismatch`, the always-valid SRM check on
  session counts (Lindon & Malek 2022 mixture Bayes factor; χ² beside it).
* :mod:`shadoweval.stats.canary.two_arm` — :func:`proportion_noninferiority` /
:func:`proportion_excess`
  (Farrington–Manning score tests, Miettinen–Nurminen intervals) and
  :func:`conditional_binomial_evalue` (always-valid rollback on rare events).
* :mod:`shadoweval.stats.canary.exact` — :func:`exact_unconditional_test`, the exact unconditional
  test with a non-zero margin (Chan 1998; Barnard's test at margin 0) used instead of the
  score test's normal approximation when an expected count is below 5.
* :mod:`shadoweval.stats.canary.quantiles` — :func:`quantile_ratio_interval` (candidate/baseline
  latency quantile ratio, upper bound from distribution-free order statistics with
  Bonferroni, Hahn & Meeker 1991) and :func:`quantile_above_limit` (absolute limit).
* :mod:`shadoweval.stats.canary.looks` — checkpoints on the candidate arm's request count, the data
  truncated at each, and union-bound levels ``α·6/(π²k²)`` so repeated polls stay valid.
* :mod:`shadoweval.stats.canary.verdict` — :func:`step_verdict`: PROMOTE / HOLD / ROLLBACK for one
  poll of one step, with every check's numbers (:class:`~shadoweval.records.StepVerdict`),
  decided by the verdict engine (:mod:`shadoweval.stats.engine`). Its inputs are checked in
  :mod:`~shadoweval.stats.canary.frames`; its check families (``validity_checks``,
  ``proportion_checks``, ``latency_checks``) read one
  :class:`~shadoweval.stats.canary.step.StepContext`
  and are registered in :mod:`~shadoweval.stats.canary.families`.

docs/canary-statistics.md describes each check, its source, the levels, the look rule,
the decision table and the known limits.
"""
