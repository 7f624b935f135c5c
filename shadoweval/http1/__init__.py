"""HTTP/1.1 over raw asyncio connections, shared by the live path and the replay path.

* :mod:`shadoweval.http1.pool` — the connection pool (``httptools``/llhttp response parser
  per connection, LIFO idle stack, stale keep-alive checks before use);
* :mod:`shadoweval.http1.decoding` — incremental content decoding (gzip, deflate, br, zstd);
* :mod:`shadoweval.http1.exchange` — one request/response exchange on a pooled connection
  (request writer, response head, body pieces delivered as they arrive).

Used by :mod:`shadoweval.capture.proxy` (the live path) and :mod:`shadoweval.replay.client`
(candidate replays).
"""
