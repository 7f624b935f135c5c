"""``kafka://`` source URLs: ``kafka://host:port[,host:port...]/topic``."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from shadoweval.errors import ConfigError


@dataclass(frozen=True, slots=True)
class KafkaSource:
    """A topic on a Kafka cluster. ``bootstrap_servers`` is ``host:port[,host:port]``."""

    bootstrap_servers: str
    topic: str

    def __str__(self) -> str:
        return f"kafka://{self.bootstrap_servers}/{self.topic}"


def is_kafka_url(value: str) -> bool:
    """True when ``value`` starts with ``kafka://``."""
    return value.lower().startswith("kafka://")


def parse_kafka_url(value: str) -> KafkaSource:
    """Parse ``kafka://host:port[,host:port]/topic``.

    Raises:
        ConfigError: wrong scheme, no host, a host without a numeric port, or no topic
            (``field="source"``, the value given).
    """
    parts = urlsplit(value)
    if parts.scheme.lower() != "kafka":
        raise ConfigError(
            f"source={value!r}: expected kafka://HOST:PORT/TOPIC", field="source", value=value
        )
    hosts = [h.strip() for h in parts.netloc.split(",") if h.strip()]
    if not hosts:
        raise ConfigError(f"source={value!r}: no broker host", field="source", value=value)
    for host in hosts:
        name, sep, port = host.rpartition(":")
        if not sep or not name or not port.isdigit():
            raise ConfigError(
                f"source={value!r}: broker {host!r} needs HOST:PORT", field="source", value=value
            )
    topic = unquote(parts.path.lstrip("/"))
    if not topic or "/" in topic:
        raise ConfigError(
            f"source={value!r}: expected exactly one topic after the host",
            field="source",
            value=value,
        )
    return KafkaSource(bootstrap_servers=",".join(hosts), topic=topic)
