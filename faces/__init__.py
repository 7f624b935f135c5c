"""The faces of shadow-eval: the command line (including ``shadow-eval demo``), the HTTP API and
the dashboard.

A face parses input, calls the application layer (:mod:`application`) and renders what it
returns. No face imports another.
"""
