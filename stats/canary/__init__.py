"""The live canary's statistics (issue 16): two independent arms, not pairs.

* :mod:`stats.canary.policy` — :class:`CanaryPolicy` (the ramp, rollback conditions,
  promote margins), YAML loading with field-named errors, hash, dump.

Not yet written (see the branch report): ``two_arm``, ``srm``, ``verdict``.
"""
