"""The faces of shadow-eval: the command line, the HTTP API, the dashboard and the demo.

A face parses input, calls the application layer (:mod:`application`) and renders what it
returns. No face imports another.
"""
