"""Capture: how exchanges get into a capture log.

* The sidecar (an ASGI proxy that tees live OpenAI-compatible traffic, redacts it and
  hands it to a sink) records real requests and responses.
* :mod:`shadoweval.capture.table_import` turns recorded tables (benchmark outputs, operators'
  exports) into the same :class:`~shadoweval.records.Exchange` records, so a table can be
  replayed and gated exactly like captured traffic.
* The Envoy front end (:mod:`shadoweval.capture.envoy_front`) captures behind Envoy over ext_proc;
  its canary split (:mod:`shadoweval.capture.canary_split`,
  :mod:`shadoweval.capture.session_router`) sends a
  share of live sessions to a candidate model and records on each exchange which version
  served it (``Exchange.served_by``).

Modules are imported explicitly; this package's ``__init__`` imports nothing heavy.
"""
