"""The self-contained demo: a generated workload, two simulated models, the whole loop."""
