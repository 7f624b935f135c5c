"""Independent reference implementations that the stats tests check shipped code against.

None of this is product code: the gate never calls it, benchmarks never import it.

* :mod:`tests.stats.reference.paired_bootstrap` — the exact paired Poisson bootstrap of a
  quantile ratio (replicates with shared per-pair weights), against which the gate's
  resampling-free interval (:func:`shadoweval.stats.quantiles.paired_quantile_ratios_rf`) is
  checked.
* :mod:`tests.stats.reference.group_sequential` — exact group-sequential crossing
  probabilities and boundaries (recursive numerical integration), against which the
  union-bound look levels of :func:`shadoweval.stats.sequential.lan_demets_spent` /
  :func:`shadoweval.stats.sequential.look_alpha` are checked; validated itself on published
  constants (gate-statistics.md T15, gsDesign).
* :mod:`tests.stats.reference.means` — the fixed-n one-sided t test of a mean, with which
  the noise-floor linearisation (:func:`shadoweval.stats.noise_floor.noise_floor_values`) is
  checked.
"""
