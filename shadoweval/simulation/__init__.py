"""Simulated parts for the demo, tests and benchmarks: a mock OpenAI-compatible model server
(:mod:`shadoweval.simulation.mock_llm`), a mock LLM judge
(:mod:`shadoweval.simulation.mock_judge`) and the demo workload generator
(:mod:`shadoweval.simulation.workload`).
"""
