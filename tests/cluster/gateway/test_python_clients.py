"""kafka-python 3 and aiokafka, unchanged, through the gateway: ``KafkaProducer()`` with its
defaults (idempotent: InitProducerId), a group consumer, ``KafkaAdminClient`` creating,
listing and describing topics and groups; aiokafka's ``send_and_wait`` and a group
consumer."""
from __future__ import annotations

import asyncio

import pytest

from tests.support.bounds import BOUND

kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def test_kafka_python_producer_defaults_group_consumer_and_admin(served):
    from kafka.admin import NewTopic
    admin = kafka.KafkaAdminClient(bootstrap_servers=served.bootstrap)
    try:
        admin.create_topics([NewTopic("kp-topic", 3, 3)], timeout_ms=int(BOUND * 1000))
        assert "kp-topic" in admin.list_topics()
        (described,) = admin.describe_topics(["kp-topic"])
        assert described["error_code"] == 0
        partitions = sorted(described["partitions"], key=lambda p: p["partition_index"])
        assert [p["partition_index"] for p in partitions] == [0, 1, 2]
        assert all(sorted(p["replica_nodes"]) == [0, 1, 2] for p in partitions)

        producer = kafka.KafkaProducer(bootstrap_servers=served.bootstrap)
        try:
            assert producer.config["enable_idempotence"]
            futures = [producer.send("kp-topic", key=b"k%d" % i, value=b"v%d" % i)
                       for i in range(1000)]
            producer.flush(BOUND)
            metadata = [f.get(BOUND) for f in futures]
        finally:
            producer.close(BOUND)
        assert len({(m.partition, m.offset) for m in metadata}) == 1000

        consumer = kafka.KafkaConsumer("kp-topic", bootstrap_servers=served.bootstrap,
                                       group_id="kp-group", auto_offset_reset="earliest",
                                       enable_auto_commit=False,
                                       consumer_timeout_ms=int(BOUND * 1000))
        try:
            seen = set()
            for record in consumer:
                seen.add(record.key)
                if len(seen) == 1000:
                    break
            consumer.commit()
        finally:
            consumer.close()
        assert seen == {b"k%d" % i for i in range(1000)}

        groups = admin.list_groups()
        assert {"group_id": "kp-group", "protocol_type": "consumer"} in groups
        group = admin.describe_groups(["kp-group"])["kp-group"]
        assert group["error"] is None and group["group_state"] == "Empty"
        offsets = admin.list_group_offsets("kp-group")["kp-group"]
        assert sum(o.offset for o in offsets.values()) == 1000
    finally:
        admin.close()


def test_aiokafka_send_and_wait_and_group_consumer(served):
    async def run():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=served.bootstrap)
        await producer.start()
        try:
            sent = [await producer.send_and_wait("aio-topic", b"m%d" % i) for i in range(200)]
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer("aio-topic", bootstrap_servers=served.bootstrap,
                                             group_id="aio-group",
                                             auto_offset_reset="earliest")
        await consumer.start()
        seen = []
        try:
            async with asyncio.timeout(BOUND):
                async for message in consumer:
                    seen.append(message.value)
                    if len(seen) == len(sent):
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
        return sent, seen
    sent, seen = asyncio.run(run())
    assert len({(m.partition, m.offset) for m in sent}) == 200
    assert sorted(seen) == sorted(b"m%d" % i for i in range(200))
