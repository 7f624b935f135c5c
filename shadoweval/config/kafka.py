"""Settings of the Kafka edge and of the on-disk spool used while the broker is away."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class KafkaSettings(BaseModel):
    """How shadow-eval talks to Kafka (DESIGN §2: the scale-out path).

    ``bootstrap_servers``: ``host:port[,host:port...]``. ``idempotence``: ``required`` fails
    when the broker refuses an idempotent producer id; ``preferred`` (default) falls back
    to a plain ``acks=all`` producer and counts it (results are deduplicated on
    ``exchange_id`` either way); ``off`` never asks. ``max_message_bytes`` must not exceed
    the broker's ``message.max.bytes`` (Kafka's default is 1,048,588).
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "shadoweval.exchanges.v1"
    dead_letter_topic: str = "shadoweval.exchanges.v1.dlq"
    client_id: str = "shadow-eval"
    acks: Literal["all"] = "all"
    idempotence: Literal["required", "preferred", "off"] = "preferred"
    compression: Literal["gzip", "lz4", "zstd", "snappy", "none"] = "lz4"
    max_message_bytes: int = Field(default=1_000_000, ge=1024)
    linger_ms: int = Field(default=5, ge=0)
    request_timeout_ms: int = Field(default=5_000, ge=100)
    send_timeout_s: float = Field(default=5.0, gt=0)
    partitions: int = Field(default=6, ge=1)
    replication_factor: int = Field(default=1, ge=1)


class SpoolSettings(BaseModel):
    """The bounded on-disk spool used while the broker is unreachable or slow.

    ``max_bytes`` bounds the spool's files together; a record that does not fit is dropped
    and counted (reason ``spool_full``). ``retry_interval_s`` is how often a spooled sink
    probes the broker again.
    """

    directory: str = ".shadoweval/spool"
    max_bytes: int = Field(default=1024 * 1024 * 1024, ge=1024)
    segment_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    retry_interval_s: float = Field(default=1.0, gt=0)
