"""shadoweval.application.canary.ingest_bus: the capture topic → canary observations, through a real
Kafka-protocol broker (Tansu). The canary reads in its own consumer group; offsets are
committed after the observations are stored, so a second call reads only what is new; a
record that does not decode is kept as a rejected record with its topic/partition@offset."""

from __future__ import annotations

import asyncio

from shadoweval.application.canary import CANARY_REJECT_STAGE, canary_group, ingest_source
from shadoweval.bus import BusProducer, KafkaSource, ensure_topics
from shadoweval.bus.producer import OutgoingRecord
from shadoweval.config import KafkaSettings
from shadoweval.records import Exchange
from shadoweval.storage import Repository
from tests.kafka_broker import TansuBroker
from tests.storage.factories import make_exchange

TOPIC = "shadoweval.exchanges.v1"


def _served(n: int, cluster: str) -> Exchange:
    return make_exchange(n).model_copy(update={"served_by": cluster})


async def _produce(bootstrap: str, values: list[bytes]) -> None:
    producer = BusProducer(KafkaSettings(bootstrap_servers=bootstrap))
    async with producer:
        results = await producer.send_many(
            TOPIC, [OutgoingRecord(value=v, key=f"k{i}".encode()) for i, v in enumerate(values)]
        )
    assert all(not isinstance(r, Exception) for r in results), results


def test_the_capture_topic_is_read_once_in_the_canarys_group(
    repo: Repository, canary: str, kafka_broker: TansuBroker
) -> None:
    bootstrap = kafka_broker.bootstrap
    asyncio.run(ensure_topics(bootstrap, [TOPIC], partitions=2))
    asyncio.run(
        _produce(
            bootstrap,
            [
                _served(10, "candidate_model").model_dump_json().encode(),
                _served(11, "live_model").model_dump_json().encode(),
                b'{"not": "an exchange"}',
            ],
        )
    )
    source = f"kafka://{bootstrap}/{TOPIC}"
    first = ingest_source(repo, canary, source)
    assert (first.lines, first.stored, first.rejected) == (3, 2, 1)
    assert first.by_arm == {"candidate": 1, "baseline": 1}
    (kept,) = repo.list_rejected(run_id="run-1")
    assert kept.stage == CANARY_REJECT_STAGE
    assert str(kept.location).startswith(f"{TOPIC}/")
    asyncio.run(_produce(bootstrap, [_served(12, "candidate_model").model_dump_json().encode()]))
    second = ingest_source(repo, canary, KafkaSource(bootstrap_servers=bootstrap, topic=TOPIC))
    assert (second.lines, second.stored) == (1, 1)
    assert {o.exchange_id for o in repo.canary_observations(canary)} == {
        "ex-00010",
        "ex-00011",
        "ex-00012",
    }
    assert canary_group(canary) == "shadoweval-canary.c-1"
