"""Replicas that diverged, elections without an in-sync replica, and the high watermark
across a restart, in a real 3-broker cluster (brokers SIGSTOPped, SIGKILLed and started
again), checked through the public API, the metadata page and the replicas' files.

- Divergence: offsets 0-99 are on every replica; with the followers stopped, the
  leader takes 50 acks=1 records and is killed; a follower leads in the next epoch and
  takes 50 records; the old leader, started again, truncates its 50 (KIP-279) and ends with
  the new leader's batches byte for byte, its leader-epoch-checkpoint ``[(0, 0), (1,
  100)]`` (LeaderEpochFileCache); no consumer ever read one of its dropped records (they were above
  the HW).
- Unclean election: a replica that fell out of the ISR while its leader took records;
  the leader killed: with unclean.leader.election.enable off the partition stays offline
  and, once its leader returns, has lost nothing; with it on the out-of-sync replica leads
  and the old leader, started again, truncates to it.
- The high watermark survives a restart (replication-offset-checkpoint): a leader
  whose followers are stopped (HW frozen below min.insync.replicas while its log grows),
  killed and started again, serves consumers exactly up to its old HW — not its log end,
  not nothing.

A stopped controller does not fail over, so only non-controller brokers are stopped. The
``e2e`` fixture stops the cluster and fails the test if any process it started still runs
or any shared-memory object of its cluster is left."""
from __future__ import annotations

import os
import time

import pytest

from cluster import KafkaConsumer, KafkaProducer, TopicPartition
from cluster.metadata.model import NO_LEADER
from tests.e2e.helpers import FAST
from tests.e2e.replicas import (
    batches,
    checkpoint_entries,
    create_placed_topic,
    log_bytes,
    non_controllers,
    partition_dir,
    paused,
    state_of,
    wait_for_isr,
)
from tests.support.bounds import BOUND
from tests.support.waits import wait_for

pytestmark = pytest.mark.multiprocess

def producer(cluster, acks, **config):
    return KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=acks, linger_ms=0,
                         max_block_ms=BOUND * 1000, **FAST, **config)


def consumer_of(cluster, topic, **config):
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                             auto_offset_reset="earliest", **FAST, **config)
    consumer.assign([TopicPartition(topic, 0)])
    return consumer


def read_from_start(consumer, topic, count):
    """(offset, value) of the records ``consumer`` reads from the beginning until it has
    ``count`` of them (within BOUND)."""
    consumer.seek_to_beginning(TopicPartition(topic, 0))
    read = []
    deadline = time.monotonic() + BOUND
    while len(read) < count:
        assert time.monotonic() < deadline, f"read {len(read)} of {count} records of {topic}"
        got = consumer.poll(timeout_ms=500)
        read += [(r.offset, r.value) for records in got.values() for r in records]
    return read


def send(p, topic, values):
    futures = [p.send(topic, v) for v in values]
    return [f.get(BOUND).offset for f in futures]


def values(prefix, count):
    return [b"%s-%d" % (prefix, i) for i in range(count)]


def test_a_diverged_leader_returns_with_the_new_leaders_batches(e2e):
    cluster = e2e.cluster(brokers=3)
    old = cluster.metadata().controller_id  # a killed controller fails over
    followers = non_controllers(cluster)
    create_placed_topic(cluster, "s4", [old, *followers])
    with producer(cluster, "all") as p_all, producer(cluster, 1) as p_one, \
            consumer_of(cluster, "s4") as consumer:
        assert send(p_all, "s4", values(b"first", 100)) == list(range(100))
        assert p_one.partitions_for("s4") == {0}
        assert len(read_from_start(consumer, "s4", 100)) == 100
        with paused(cluster, *followers):
            assert send(p_one, "s4", values(b"dropped", 50)) == list(range(100, 150))
            assert [v for _, v in read_from_start(consumer, "s4", 100)] == \
                values(b"first", 100)
            assert consumer.poll(timeout_ms=1000) == {}  # the rest is above the HW
            cluster.kill_broker(old)
        after = cluster.wait_for_metadata(
            lambda i: i.topics["s4"].partitions[0].leader in followers, timeout=BOUND)
        state = after.topics["s4"].partitions[0]
        assert state.leader_epoch == 1
        assert send(p_all, "s4", values(b"second", 50)) == list(range(100, 150))
        cluster.start_broker(old)
        wait_for_isr(cluster, "s4", {old, *followers})
        new = log_bytes(cluster, state.leader, "s4")
        wait_for(lambda: log_bytes(cluster, old, "s4") == new,
                   "the old leader holds the new leader's batches")
        assert {(first >= 100, epoch) for first, _, epoch, _ in batches(new)} == \
            {(False, 0), (True, 1)}  # stamped by the new leader in its epoch
        assert checkpoint_entries(os.path.join(partition_dir(cluster, old, "s4"),
                                               "leader-epoch-checkpoint")) == \
            [("0", "0"), ("1", "100")]
        read = read_from_start(consumer, "s4", 150)
        assert [v for _, v in read] == values(b"first", 100) + values(b"second", 50)


def test_unclean_election_off_keeps_the_partition_offline_on_elects_an_out_of_sync_replica(
        e2e):
    cluster = e2e.cluster(brokers=3, replica_lag_time_max_ms=1000)
    leader, lagging = non_controllers(cluster)
    create_placed_topic(cluster, "clean", [leader, lagging])
    create_placed_topic(cluster, "unclean", [leader, lagging],
                        unclean_leader_election_enable="true")
    with producer(cluster, "all") as p_all, producer(cluster, 1) as p_one:
        for topic in ("clean", "unclean"):
            assert send(p_all, topic, values(b"both", 10)) == list(range(10))
            assert p_one.partitions_for(topic) == {0}
        with paused(cluster, lagging):
            for topic in ("clean", "unclean"):
                assert send(p_one, topic, values(b"leader only", 20)) == list(range(10, 30))
                wait_for_isr(cluster, topic, {leader})
            cluster.kill_broker(leader)
        image = cluster.wait_for_metadata(
            lambda i: i.topics["unclean"].partitions[0].leader == lagging, timeout=BOUND)
        unclean = image.topics["unclean"].partitions[0]
        assert (unclean.isr, unclean.leader_epoch) == ((lagging,), 1)
        clean = image.topics["clean"].partitions[0]
        assert (clean.leader, clean.isr) == (NO_LEADER, (leader,))  # offline, ISR kept
        assert send(p_all, "unclean", values(b"unclean", 5)) == list(range(10, 15))
        cluster.start_broker(leader)
        wait_for_isr(cluster, "unclean", {leader, lagging})
        wait_for_isr(cluster, "clean", {leader, lagging})
        assert state_of(cluster, "clean").leader == leader
        with consumer_of(cluster, "clean") as consumer:
            assert [v for _, v in read_from_start(consumer, "clean", 30)] == \
                values(b"both", 10) + values(b"leader only", 20)
        new = log_bytes(cluster, lagging, "unclean")
        wait_for(lambda: log_bytes(cluster, leader, "unclean") == new,
                   "the old leader truncated to the unclean leader's batches")
        with consumer_of(cluster, "unclean") as consumer:
            assert [v for _, v in read_from_start(consumer, "unclean", 15)] == \
                values(b"both", 10) + values(b"unclean", 5)


def test_the_high_watermark_survives_a_restart_and_bounds_what_consumers_read(e2e):
    cluster = e2e.cluster(brokers=3, replica_lag_time_max_ms=1000,
                          broker_session_timeout_ms=2000, broker_heartbeat_interval_ms=200,
                          replica_high_watermark_checkpoint_interval_ms=100)
    leader = cluster.metadata().controller_id
    followers = non_controllers(cluster)
    create_placed_topic(cluster, "hw", [leader, *followers], min_insync_replicas=2)
    checkpoint = os.path.join(cluster.data_dir, f"broker-{leader}",
                              "replication-offset-checkpoint")
    with producer(cluster, "all") as p_all, producer(cluster, 1) as p_one:
        assert send(p_all, "hw", values(b"committed", 100)) == list(range(100))
        assert p_one.partitions_for("hw") == {0}
        with paused(cluster, *followers):
            assert send(p_one, "hw", values(b"above", 20)) == list(range(100, 120))
            wait_for_isr(cluster, "hw", {leader})  # the HW froze at 100
            wait_for(lambda: ("hw", "0", "100") in (checkpoint_entries(checkpoint) or ()),
                       "the leader checkpoints HW 100")
            cluster.kill_broker(leader)
            cluster.start_broker(leader)
            # its followers fenced (their heartbeats stopped): a client asks only it
            cluster.wait_for_metadata(lambda i: i.live_brokers() == [leader], timeout=BOUND)
            with consumer_of(cluster, "hw") as consumer:
                tp = TopicPartition("hw", 0)
                assert consumer.end_offsets([tp], timeout_ms=BOUND * 1000)[tp] == 100
                assert [v for _, v in read_from_start(consumer, "hw", 100)] == \
                    values(b"committed", 100)
                assert consumer.poll(timeout_ms=1000) == {}  # the rest is above the HW
        wait_for_isr(cluster, "hw", {leader, *followers})
        with consumer_of(cluster, "hw") as consumer:
            assert [v for _, v in read_from_start(consumer, "hw", 120)] == \
                values(b"committed", 100) + values(b"above", 20)
