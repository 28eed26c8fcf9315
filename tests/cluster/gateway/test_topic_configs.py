"""Topic configs a Kafka client sets through the gateway as Kafka accepts them (librdkafka's
0081_admin and 0092_mixed_msgver set these): compression.type, with the leader storing a
producer's batches in the topic's codec, and message.format.version, accepted and ignored
as Kafka 3 does."""
from __future__ import annotations

import os
import time

import pytest

from segments.record.batch_header import BatchHeader
from segments.record.compression import codec_id
from tests.support.bounds import BOUND

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402

# the legacy AlterConfigs on purpose: librdkafka's 0092 uses it
pytestmark = [pytest.mark.multiprocess, pytest.mark.slow,
              pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")]


def test_compression_type_and_message_format_version_from_a_kafka_client(served):
    bootstrap = served.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "configured-gzip"
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3,
                                            config={"compression.type": "gzip"})],
                                  operation_timeout=BOUND)
    futures[topic].result(BOUND)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic,
                              set_config={"compression.type": "gzip",
                                          "message.format.version": "0.10.0.0"})
    admin.alter_configs([resource])[resource].result(BOUND)
    described = admin.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, topic)])
    (entries,) = [f.result(BOUND) for f in described.values()]
    assert entries["compression.type"].value == "gzip"
    assert entries["message.format.version"].value == "0.10.0.0"
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic,
                         set_config={"compression.type": "brotli"})
    with pytest.raises(confluent_kafka.KafkaException, match="brotli"):
        admin.alter_configs([bad])[bad].result(BOUND)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "compression.type": "lz4", "linger.ms": 5})
    values = [b"value %d " % i * 10 for i in range(200)]
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(BOUND) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "configured-gzip",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got, deadline = [], time.monotonic() + BOUND
        while len(got) < len(values) and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
    finally:
        consumer.close()
    assert got == values
    # acks=all: every replica in the ISR holds the batches, in the leader's bytes
    paths = [os.path.join(served.data_dir, name, f"{topic}-0", "00000000000000000000.log")
             for name in os.listdir(served.data_dir) if name.startswith("broker-")]
    codecs, stored = set(), 0
    for path in paths:
        with open(path, "rb") as file:
            data = file.read()
        stored += len(data)
        position = 0
        while position < len(data):
            header = BatchHeader(data, position)
            codecs.add(header.compression_type)
            position += header.size_in_bytes
    assert stored and codecs == {codec_id("gzip")}
