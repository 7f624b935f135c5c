"""Capture: how exchanges get into a capture log.

* The sidecar (an ASGI proxy that tees live OpenAI-compatible traffic, redacts it and
  hands it to a sink) records real requests and responses.
* :mod:`capture.table_import` turns recorded tables (benchmark outputs, operators'
  exports) into the same :class:`~shadoweval.records.Exchange` records, so a table can be
  replayed and gated exactly like captured traffic.

Modules are imported explicitly; this package's ``__init__`` imports nothing heavy.
"""
