"""The ISR of a real 3-broker cluster while followers are stopped (SIGSTOP) and continued,
through the public API, the metadata page, the ``ringlog topics`` tool and the replicas'
segment files.

One partition (RF 3, min.insync.replicas 2) led by the controller, so that its two
followers — the brokers a test may stop, since a stopped controller does not fail over —
are stopped and continued while the leader keeps serving; replica.lag.time.max.ms is 1 s.

- A stopped follower leaves the ISR (maybeShrinkIsr: it stops fetching, and after the lag time the
  leader's shrink check drops it) and ``topics --describe --under-replicated-partitions``
  lists the partition; an acks=all produce in flight when it was stopped is answered once
  the ISR without it is committed (DelayedProduce: the HW passes it with two replicas in the ISR),
  and every record acknowledged with acks=all is then in the segment files of at least two
  replicas. Continued, it rejoins the ISR (maybeExpandIsr) — also after it was stopped long enough
  to be fenced by the controller (its heartbeats unfence it first).
- With both followers stopped, the ISR shrinks to the leader: an acks=all produce in flight
  is never acknowledged (the HW freezes below min.insync.replicas: it times out), new
  ones get NOT_ENOUGH_REPLICAS (nothing appended), acks=1 records are appended but
  consumers read only up to the frozen HW. Continued, both rejoin and the HW moves on.

The ``e2e`` fixture stops the cluster and fails the test if any process it started still
runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import re
import time

import pytest

from cluster import KafkaConsumer, KafkaProducer, TopicPartition, errors
from cluster.tools import topics
from tests.e2e.replicas import (
    create_placed_topic,
    non_controllers,
    offsets_on_disk,
    paused,
    wait_for_isr,
)
from tests.support.bounds import BOUND
from tests.support.tools import run_tool

pytestmark = pytest.mark.multiprocess

TOPIC = "isr"
LAG_MS = 1000


def producer(cluster, acks, **config):
    return KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=acks, retries=0,
                         linger_ms=0, max_block_ms=BOUND * 1000, **config)


def under_replicated(cluster, capsys, tmp_path):
    """The partitions ``ringlog topics --describe --under-replicated-partitions`` lists, as
    (partition, isr) pairs. Its admin client gives up on a broker after 2 s (it may ask a
    stopped one first), as ``--command-config`` lets a kafka-topics user say."""
    config = tmp_path / "admin.properties"
    config.write_text("request.timeout.ms=2000\n")
    capsys.readouterr()
    assert run_tool(topics, "--bootstrap-server", cluster.bootstrap_servers, "--describe",
                    "--topic", TOPIC, "--under-replicated-partitions",
                    "--command-config", config) == 0
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(
        r"Partition: (\d+)\tLeader: \d+\tReplicas: [\d,]+\tIsr: ([\d,]+)",
        capsys.readouterr().out)]


def end_offset(consumer):
    """The partition's end offset as ``consumer`` sees it (ListOffsets latest: the HW)."""
    tp = TopicPartition(TOPIC, 0)
    return consumer.end_offsets([tp], timeout_ms=BOUND * 1000)[tp]


def read_all(consumer, count):
    """The offsets ``consumer`` (assigned the partition) reads from the beginning: ``count``
    of them (within BOUND), then a poll of a second must bring nothing more."""
    consumer.seek_to_beginning(TopicPartition(TOPIC, 0))
    offsets = []
    deadline = time.monotonic() + BOUND
    while len(offsets) < count:
        assert time.monotonic() < deadline, f"read {offsets}, expected {count} records"
        got = consumer.poll(timeout_ms=500)
        offsets += [r.offset for records in got.values() for r in records]
    got = consumer.poll(timeout_ms=1000)
    return offsets + [r.offset for records in got.values() for r in records]


def test_a_stopped_follower_leaves_the_isr_and_rejoins_after_sigcont(e2e, capsys, tmp_path):
    cluster = e2e.cluster(brokers=3, replica_lag_time_max_ms=LAG_MS)
    leader = cluster.metadata().controller_id
    first, second = non_controllers(cluster)
    create_placed_topic(cluster, TOPIC, [leader, first, second], min_insync_replicas=2)
    with producer(cluster, "all") as p:
        assert [p.send(TOPIC, b"%d" % i).get(BOUND).offset for i in range(10)] == \
            list(range(10))
        assert under_replicated(cluster, capsys, tmp_path) == []

        with paused(cluster, first):
            waiting = p.send(TOPIC, b"in flight while a follower is stopped")
            wait_for_isr(cluster, TOPIC, {leader, second})
            assert waiting.get(BOUND).offset == 10
            assert under_replicated(cluster, capsys, tmp_path) == [(0, f"{leader},{second}")]
            acknowledged = [p.send(TOPIC, b"%d" % i).get(BOUND).offset for i in range(100)]
            on_leader = offsets_on_disk(cluster, leader, TOPIC)
            on_second = offsets_on_disk(cluster, second, TOPIC)
            assert set(acknowledged) <= on_leader & on_second
            assert max(offsets_on_disk(cluster, first, TOPIC)) < 10  # it fetched nothing

        wait_for_isr(cluster, TOPIC, {leader, first, second})
        assert under_replicated(cluster, capsys, tmp_path) == []
        assert p.send(TOPIC, b"after").get(BOUND).offset == 111


def test_with_both_followers_stopped_acks_all_is_refused_and_the_hw_freezes(e2e):
    cluster = e2e.cluster(brokers=3, replica_lag_time_max_ms=LAG_MS)
    leader = cluster.metadata().controller_id
    first, second = non_controllers(cluster)
    create_placed_topic(cluster, TOPIC, [leader, first, second], min_insync_replicas=2)
    # clients made before the brokers stop (a new one may first ask a stopped broker for
    # metadata and wait request_timeout_ms for it)
    with producer(cluster, "all", request_timeout_ms=4000) as p_all, \
            producer(cluster, "all") as other, producer(cluster, 1) as p_one, \
            KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                          auto_offset_reset="earliest") as consumer:
        for i in range(10):
            p_all.send(TOPIC, b"%d" % i).get(BOUND)
        assert other.partitions_for(TOPIC) == p_one.partitions_for(TOPIC) == {0}
        consumer.assign([TopicPartition(TOPIC, 0)])
        assert read_all(consumer, 10) == list(range(10))
        with paused(cluster, first, second):
            in_flight = p_all.send(TOPIC, b"in flight when the ISR shrinks")
            wait_for_isr(cluster, TOPIC, {leader})
            with pytest.raises(errors.NotEnoughReplicasError):
                # another connection: p_all's requests wait behind its parked one
                other.send(TOPIC, b"refused").get(BOUND)
            # appended by the leader alone: acknowledged with acks=1, never readable
            assert p_one.send(TOPIC, b"acks=1").get(BOUND).offset == 11
            with pytest.raises((errors.RequestTimedOutError, errors.KafkaTimeoutError)):
                in_flight.get(BOUND)
            assert end_offset(consumer) == 10
            assert read_all(consumer, 10) == list(range(10))

        wait_for_isr(cluster, TOPIC, {leader, first, second})
        assert other.send(TOPIC, b"after").get(BOUND).offset == 12
        assert end_offset(consumer) == 13
        assert read_all(consumer, 13) == list(range(13))


def test_a_follower_stopped_past_its_session_timeout_is_fenced_and_rejoins_after_sigcont(e2e):
    """Stopped longer than broker.session.timeout.ms, the follower is also fenced (not
    alive on the metadata page); continued, its heartbeats unfence it and it rejoins the
    ISR (maybeExpandIsr: only a live broker may)."""
    cluster = e2e.cluster(brokers=3, replica_lag_time_max_ms=LAG_MS,
                          broker_session_timeout_ms=1000, broker_heartbeat_interval_ms=100)
    leader = cluster.metadata().controller_id
    first, second = non_controllers(cluster)
    create_placed_topic(cluster, TOPIC, [leader, first, second], min_insync_replicas=2)
    with producer(cluster, "all") as p:
        assert p.send(TOPIC, b"before").get(BOUND).offset == 0
        with paused(cluster, first):
            wait_for_isr(cluster, TOPIC, {leader, second})
            cluster.wait_for_metadata(lambda i: first not in i.live_brokers(), timeout=BOUND)
            assert p.send(TOPIC, b"while fenced").get(BOUND).offset == 1
        cluster.wait_for_metadata(lambda i: first in i.live_brokers(), timeout=BOUND)
        wait_for_isr(cluster, TOPIC, {leader, first, second})
        assert p.send(TOPIC, b"after").get(BOUND).offset == 2
    assert offsets_on_disk(cluster, first, TOPIC) >= {0, 1, 2}
