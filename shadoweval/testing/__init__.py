"""Test doubles and seeded data for the tests and benchmarks, never for the product: a file
system that fills up (:mod:`shadoweval.testing.full_disk`) and a seeded generator of scored
runs (:mod:`shadoweval.testing.pair_seeding`).

No other module of :mod:`shadoweval` imports this package (the import-linter contract
``product-not-testing`` in ``pyproject.toml``).
"""
