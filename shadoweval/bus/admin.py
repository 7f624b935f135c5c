"""Topic creation for the exchange and dead-letter topics."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from shadoweval.bus.errors import BusError


async def ensure_topics(
    bootstrap_servers: str,
    topics: Iterable[str],
    *,
    partitions: int = 6,
    replication_factor: int = 1,
    max_message_bytes: int | None = None,
    client_id: str = "shadow-eval-admin",
) -> list[str]:
    """Create the topics that do not exist yet; return the names created.

    ``max_message_bytes`` sets the topic's ``max.message.bytes`` when given.

    Raises:
        BusError: the broker is unreachable or refused the request.
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id=client_id)
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        wanted = [t for t in dict.fromkeys(topics) if t not in existing]
        if not wanted:
            return []
        configs = (
            {"max.message.bytes": str(max_message_bytes)} if max_message_bytes is not None else {}
        )
        new = [NewTopic(t, partitions, replication_factor, topic_configs=configs) for t in wanted]
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics(new)
        return wanted
    except KafkaError as exc:
        raise BusError(f"cannot create topics on {bootstrap_servers}: {exc}") from exc
    finally:
        await admin.close()
