"""Failing well on a real cluster with a partition offline (issue 22): the tools print what
they can and name each leaderless partition and its replicas' brokers at once; the clients
retry within their timeouts and their final error says which partitions had no leader; a
``send()`` to a partition the topic does not have raises at once, naming its partitions.

One 2-broker cluster for the module: topic ``t`` has partition 0 on broker 0 and partition 1
on broker 1 alone; broker 1 is killed once, so t-1 has no leader for every test."""
from __future__ import annotations

import pytest

from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
from cluster.errors import KafkaTimeoutError
from cluster.producer.kafka_producer import KafkaProducer
from cluster.structs import TopicPartition
from cluster.tools import get_offsets
from consumer_proc.consumer import KafkaConsumer
from spark_bridge.offset_reader import OffsetReader, open_consumer
from spark_bridge.options import parse_batch_options
from tests.support.bounds import BOUND
from tests.support.tools import run_tool, tool_cluster

cluster = tool_cluster(brokers=2)

REASON = "partition t-1 has no leader: its only replica, broker 1, is stopped"


@pytest.fixture(scope="module")
def offline(cluster):
    """Topic t with 2 records in t-0 and t-1 offline (its only replica's broker killed)."""
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("t", replica_assignments={0: [0], 1: [1]})])
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        for _ in range(2):
            producer.send("t", b"v", partition=0)
        producer.flush(timeout=BOUND)
    cluster.kill_broker(1)
    cluster.wait_for_metadata(
        lambda image: not image.topics["t"].partitions[1].online, BOUND)
    return "t"


@pytest.mark.multiprocess
def test_get_offsets_prints_the_online_partitions_and_names_the_offline_one(
        cluster, offline, capsys):
    code = run_tool(get_offsets, "--bootstrap-server", cluster.bootstrap_servers,
                    "--topic", offline)
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["t:0:2"]
    assert captured.err.splitlines() == [
        f"Skip getting offsets for topic-partition t:1 due to error: {REASON}"]
    assert code == 1  # a partial answer: scripts must be able to tell


@pytest.mark.multiprocess
def test_a_consumer_lookup_retries_then_names_the_partition_without_a_leader(
        cluster, offline):
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers) as consumer:
        partitions = [TopicPartition("t", 0), TopicPartition("t", 1)]
        with pytest.raises(KafkaTimeoutError) as caught:
            consumer.end_offsets(partitions, timeout_ms=1000)
        assert f"not answered within 1.0 s: {REASON}" in str(caught.value)
        assert consumer.end_offsets(partitions[:1], timeout_ms=BOUND * 1000) == {
            partitions[0]: 2}


@pytest.mark.multiprocess
def test_a_record_for_the_offline_partition_expires_naming_why(cluster, offline):
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=500,
                       delivery_timeout_ms=1000, linger_ms=0) as producer:
        future = producer.send("t", b"lost", partition=1)
        with pytest.raises(KafkaTimeoutError, match=f"Expiring 1 record\\(s\\) for t-1: .*; "
                                                    f"{REASON}"):
            future.get(timeout=BOUND)


@pytest.mark.multiprocess
def test_send_to_a_partition_the_topic_lacks_raises_at_once(cluster, offline):
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                       max_block_ms=BOUND * 1000) as producer:
        producer.send("t", b"v", partition=0).get(timeout=BOUND)  # metadata of t cached
        with pytest.raises(ValueError, match="^Unrecognized partition 7 for topic t: it has 2 "
                                             "partitions, 0..1$"):
            producer.send("t", b"v", partition=7)
        with pytest.raises(ValueError, match="^Unrecognized partition 7 for topic t: "):
            producer.send_batch("t", [b"v"], partition=7)


@pytest.mark.multiprocess
def test_the_spark_sources_offset_lookup_names_the_partition_without_a_leader(
        cluster, offline):
    options = parse_batch_options({"bootstrap.servers": cluster.bootstrap_servers,
                                   "subscribe": "t"})
    consumer = open_consumer(cluster.bootstrap_servers, default_api_timeout_ms=1000)
    with OffsetReader(options, consumer) as reader:
        partitions = reader.partitions()
        assert partitions == [TopicPartition("t", 0), TopicPartition("t", 1)]
        with pytest.raises(KafkaTimeoutError, match=REASON):
            reader.latest(partitions)
