"""The live canary's statistics (issue 16): two independent arms, not pairs.

* :mod:`stats.canary.policy` — :class:`CanaryPolicy` (the ramp, rollback conditions,
  promote margins), YAML loading with field-named errors, hash, dump.

* :mod:`stats.canary.srm` — :func:`sample_ratio_mismatch`, the always-valid SRM check on
  session counts (Lindon & Malek 2022 mixture Bayes factor; χ² beside it).
* :mod:`stats.canary.two_arm` — :func:`proportion_noninferiority` / :func:`proportion_excess`
  (Farrington–Manning score tests, Miettinen–Nurminen intervals) and
  :func:`conditional_binomial_evalue` (always-valid rollback on rare events).

Not yet written (see the branch report): ``verdict``.
"""
