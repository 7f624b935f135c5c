"""Simulated parts for the demo, tests and benchmarks: a mock OpenAI-compatible model server
(:mod:`shadoweval.simulation.mock_llm`), the demo workload generator
(:mod:`shadoweval.simulation.workload`) and a
seeded generator of scored runs (:mod:`shadoweval.simulation.pair_seeding`).
"""
