"""An idempotent batch in flight to a leader that hangs (SIGSTOP) is sent to the new leader
as soon as the controller elects one, instead of waiting out ``request_timeout_ms`` (here
60 s, twice the test's bound) or the SIGCONT; every record is then read back exactly once,
also after the old leader resumes and answers its stale request.

A real 3-broker cluster, RF 3, min.insync.replicas 2; the stopped leader is not the
controller (a stopped controller does not fail over). The ``e2e`` fixture stops the
cluster and fails the test if any process it started still runs or any shared-memory
object of its cluster is left; ``paused`` sends SIGCONT on the way out, even on failure."""
from __future__ import annotations

import pytest

from cluster import KafkaConsumer, KafkaProducer, TopicPartition
from tests.e2e.replicas import create_placed_topic, non_controllers, paused, state_of
from tests.support.bounds import BOUND

pytestmark = pytest.mark.multiprocess

TOPIC = "hung"
REQUEST_TIMEOUT_MS = 60_000


def test_a_batch_in_flight_to_a_stopped_leader_is_acknowledged_by_the_new_one(e2e):
    cluster = e2e.cluster(brokers=3)
    leader, other = non_controllers(cluster)
    create_placed_topic(cluster, TOPIC, [leader, other, cluster.metadata().controller_id],
                        min_insync_replicas=2)
    values = []
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                       enable_idempotence=True, request_timeout_ms=REQUEST_TIMEOUT_MS,
                       delivery_timeout_ms=4 * REQUEST_TIMEOUT_MS,
                       max_block_ms=BOUND * 1000) as producer:
        def send(count):
            first = len(values)
            values.extend(b"record %d" % n for n in range(first, first + count))
            return [producer.send(TOPIC, value) for value in values[first:]]

        assert [f.get(BOUND).offset for f in send(10)] == list(range(10))
        with paused(cluster, leader):
            waiting = send(10)
            # Within the bound, well before the request timeout: on the new leader.
            assert [f.get(BOUND).offset for f in waiting] == list(range(10, 20))
            assert state_of(cluster, TOPIC).leader != leader
        assert [f.get(BOUND).offset for f in send(10)] == list(range(20, 30))
        producer.flush(BOUND)  # the old leader resumed: its late answer changes nothing
    with KafkaConsumer(TOPIC, bootstrap_servers=cluster.bootstrap_servers,
                       auto_offset_reset="earliest",
                       consumer_timeout_ms=BOUND * 1000) as consumer:
        read = []
        for record in consumer:
            read.append(record.value)
            if len(read) == len(values):
                break
        end = consumer.end_offsets([TopicPartition(TOPIC, 0)])[TopicPartition(TOPIC, 0)]
    assert (read, end) == (values, len(values))  # each once, in order: no duplicate
