"""The connection-pool experiment of docs/benchmarks.md (a sitecustomize put on PYTHONPATH)."""
