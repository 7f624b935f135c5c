"""Kafka at the edge: the only module that imports aiokafka (DESIGN §3).

* :mod:`.url` — ``kafka://host:port[,host:port]/topic`` source URLs.
* :mod:`.producer` — an ``acks=all`` producer, idempotent where the broker allows it.
* :mod:`.consumer` — a manually committed consumer for replay workers.
* :mod:`.admin` — topic creation.

aiokafka's errors are wrapped in :class:`BusError` so callers never import aiokafka.
"""

from shadoweval.bus.admin import ensure_topics
from shadoweval.bus.consumer import BusConsumer, BusRecord
from shadoweval.bus.errors import BusError, BusTimeoutError
from shadoweval.bus.producer import BusProducer
from shadoweval.bus.url import KafkaSource, parse_kafka_url

__all__ = [
    "BusConsumer",
    "BusError",
    "BusProducer",
    "BusRecord",
    "BusTimeoutError",
    "KafkaSource",
    "ensure_topics",
    "parse_kafka_url",
]
