"""Benchmarks: scripts that print tables (see docs/benchmarks.md); a package so the layer contracts see them."""
