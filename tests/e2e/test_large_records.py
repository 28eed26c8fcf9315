"""Records and responses longer than a ring's largest frame: a 3 MiB record on a topic whose
max.message.bytes allows it is replicated (a follower's fetch carries it, whatever its
ring's size), acknowledged at acks=all and read back by a consumer, whose rings are smaller
than the batch too; an all-topics Metadata response longer than a client's ring frame is
received. The ``e2e`` fixture stops everything and checks nothing is left."""
from __future__ import annotations

import os

import pytest

from cluster import KafkaAdminClient, KafkaConsumer, KafkaProducer, NewTopic
from cluster.client.kafka_client import KafkaClient
from cluster.config.broker import BrokerConfig
from cluster.config.client import AdminClientConfig
from shm_ring import ring_descriptor as rd
from tests.e2e.replicas import create_placed_topic, state_of
from tests.support.bounds import BOUND

pytestmark = pytest.mark.multiprocess

TOPIC = "large"
VALUE = 3 << 20
TOPIC_LIMIT = 4 << 20


def test_a_3_mib_record_is_replicated_acknowledged_at_acks_all_and_read_back(e2e):
    cluster = e2e.cluster(brokers=3)
    # Every replica must hold it before acks=all completes: min.insync.replicas 3.
    create_placed_topic(cluster, TOPIC, [0, 1, 2], min_insync_replicas=3,
                        max_message_bytes=TOPIC_LIMIT)
    ring = BrokerConfig({}, data_dir=None)["ringlog.ring.bytes"]
    assert rd.max_frame_length(ring) < VALUE  # a follower's fetch carries it as fragments
    value = os.urandom(VALUE)
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                       max_request_size=TOPIC_LIMIT, request_timeout_ms=120_000,
                       delivery_timeout_ms=240_000, max_block_ms=BOUND * 1000) as producer:
        metadata = producer.send(TOPIC, value, key=b"big").get(BOUND)
        small = producer.send(TOPIC, b"after", key=b"small").get(BOUND)
    assert (metadata.offset, small.offset) == (0, 1)
    assert set(state_of(cluster, TOPIC).isr) == {0, 1, 2}  # no follower fell behind
    with KafkaConsumer(TOPIC, bootstrap_servers=cluster.bootstrap_servers,
                       auto_offset_reset="earliest", consumer_timeout_ms=BOUND * 1000) as consumer:
        records = []
        for record in consumer:
            records.append(record)
            if len(records) == 2:
                break
    assert [(r.offset, r.key) for r in records] == [(0, b"big"), (1, b"small")]
    assert records[0].value == value


def test_an_all_topics_metadata_response_longer_than_the_ring_frame_is_received(e2e):
    cluster = e2e.cluster(brokers=1)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("wide", 64, 1)])
    cluster.wait_for_metadata(lambda i: "wide" in i.topics, timeout=BOUND)
    client = KafkaClient(AdminClientConfig(bootstrap_servers=cluster.bootstrap_servers),
                         ring_capacity=1024)  # frames of 496 bytes
    try:
        client.wait_for_metadata(BOUND, all_topics=True)
        assert len(client.cluster.partitions_for_topic("wide")) == 64
    finally:
        client.close()
