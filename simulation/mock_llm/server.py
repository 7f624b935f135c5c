"""Run mock-llm under a real uvicorn server in a background thread.

For the demo and for tests that need a real socket (the replay client, the official
``openai`` client): :class:`~shadoweval.serving.BackgroundServer`, which binds an
ephemeral port on loopback unless one is given::

    with BackgroundServer(create_app(rows)) as server:
        httpx.get(server.url + "/v1/models")
"""

from __future__ import annotations

from shadoweval.serving import BackgroundServer

__all__ = ["BackgroundServer"]
