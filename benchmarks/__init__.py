"""Benchmarks: scripts that print tables (docs/benchmarks.md).

A package so that the layer contracts (import-linter) see what they import.
"""
