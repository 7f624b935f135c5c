"""Simulated parts for the demo, tests and benchmarks: a mock OpenAI-compatible model server
(:mod:`simulation.mock_llm`), the demo workload generator (:mod:`simulation.workload`) and a
seeded generator of scored runs (:mod:`simulation.pair_seeding`).
"""
