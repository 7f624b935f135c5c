"""Replay: send captured requests to a shadow replica and record what came back.

* :mod:`.rewrite` — pure: turn a captured exchange into the request a shadow receives
  (sampling parameters pinned, captured credentials never forwarded).
* :mod:`.client` — :class:`CandidateClient`, the httpx client that sends one replay and
  measures it with the SSE reader; failures become data (``error_kind``).
* :mod:`.scheduler` — bounded concurrency, target rate, warm-up flags.
* :mod:`.runner` — glue: capture-log source → scheduler → client → storage.
"""
