"""Acknowledged records survive the brokers going away, through the public API only.

A graceful stop and a start on the same data directory recover every topic and every
record acknowledged with acks=1 and acks=all. A broker SIGKILLed while two producers
(acks=1 and acks=all) write to it: its producers' records fail (after retrying for
delivery_timeout_ms) while the other broker's keep being acknowledged; once it is started
again the producers' records are acknowledged again; and every record acknowledged
before, during and after the crash is read back at its offset.

The ``e2e`` fixture stops the clusters and fails the test if any process it started still
runs or any shared-memory object of its clusters is left."""
from __future__ import annotations

import threading
import time

import pytest

from cluster import KafkaConsumer, KafkaProducer, TopicPartition, errors
from cluster.producer.partitioner import partition_for_key
from shm_ring.naming import list_objects
from tests.e2e.helpers import (
    FAST,
    KEYS_PER_PRODUCER,
    check_exactly_once_in_order,
    consume_partitions,
    expected_layout,
    record_key,
    record_value,
    running,
    stamp_of,
)
from tests.support.bounds import BOUND
from tests.support.topics import create_topic
from tests.support.waits import wait_for

# Every test runs a real cluster (broker processes) and client processes.
pytestmark = pytest.mark.multiprocess

PARTITIONS = 4


def produce(cluster, topic, producer, count, acks):
    """Send ``count`` keyed records with ``acks``; their (partition, offset) by seq."""
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=acks, linger_ms=2,
                       max_block_ms=BOUND * 1000) as p:
        futures = [p.send(topic, record_value(producer, seq), key=record_key(producer, seq))
                   for seq in range(count)]
        p.flush(BOUND)
        return [(f.get(BOUND).partition, f.get(BOUND).offset) for f in futures]


def test_a_stop_and_a_start_keep_every_acknowledged_record(e2e):
    cluster = e2e.cluster(brokers=2, log_segment_bytes=64 * 1024)  # several segments each
    leaders = create_topic(cluster, "durable", 4)
    acknowledged = {0: produce(cluster, "durable", 0, 3000, acks=1),
                    1: produce(cluster, "durable", 1, 3000, acks="all")}
    cluster_id, before = cluster.cluster_id, list(cluster.started)
    cluster.stop()
    assert [p.pid for p in before if running(p)] == []
    assert list_objects(cluster_id) == []
    cluster.start()  # the same data directory
    assert cluster.cluster_id == cluster_id
    image = cluster.metadata()
    assert {s.partition: s.leader for s in image.topics["durable"].partitions} == leaders
    layout = expected_layout((0, 1), 3000, 4)
    consumed = consume_partitions(cluster.bootstrap_servers, "durable",
                                  {p: len(rows) for p, rows in layout.items()})
    check_exactly_once_in_order(consumed, layout, acknowledged)


class Writer(threading.Thread):
    """Sends keyed records, paced, until stopped; notes each record's acknowledgement
    ({seq: (partition, offset)}) or failure ({seq: exception}), from the producer's
    callbacks."""

    def __init__(self, producer, topic, number):
        super().__init__(name=f"writer-{number}", daemon=True)
        self.producer = producer
        self.topic = topic
        self.number = number
        self.partition_of_key = [partition_for_key(record_key(number, seq), PARTITIONS)
                                 for seq in range(KEYS_PER_PRODUCER)]
        self.sent = 0  # records sent so far (the next seq)
        self.acked = {}
        self.failed = {}
        self._lock = threading.Lock()  # guards acked and failed (the sender thread writes them)
        self.stopping = threading.Event()
        self.error = None

    def run(self):
        seq = 0
        try:
            while not self.stopping.is_set():
                for _ in range(20):
                    future = self.producer.send(self.topic, record_value(self.number, seq),
                                                key=record_key(self.number, seq))
                    future.add_callback(self._acked, seq).add_errback(self._failed, seq)
                    seq += 1
                    self.sent = seq
                time.sleep(0.002)
        except Exception as exc:  # reported by the test
            self.error = exc

    def _acked(self, seq, metadata):
        with self._lock:
            self.acked[seq] = (metadata.partition, metadata.offset)

    def _failed(self, seq, exception):
        with self._lock:
            self.failed[seq] = exception

    def on(self, partitions, table):
        """Entries of ``table`` (acked or failed) for records keyed to ``partitions``."""
        where = self.partition_of_key
        with self._lock:
            items = list(table.items())
        return {seq: v for seq, v in items if where[seq % KEYS_PER_PRODUCER] in partitions}


def test_a_broker_killed_mid_production_loses_no_acknowledged_record(e2e):
    cluster = e2e.cluster(brokers=2)
    leaders = create_topic(cluster, "crash", PARTITIONS)
    victim = cluster.metadata().controller_id  # the controller: broker 1 must take over
    lost = {p for p, leader in leaders.items() if leader == victim}
    kept = set(leaders) - lost
    assert lost and kept
    producers = [KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=acks,
                               linger_ms=2, request_timeout_ms=1000, delivery_timeout_ms=1500,
                               max_block_ms=BOUND * 1000, **FAST)
                 for acks in (1, "all")]
    writers = [Writer(p, "crash", n) for n, p in enumerate(producers)]
    try:
        for writer in writers:
            writer.start()
        wait_for(lambda: all(len(w.on(lost, w.acked)) >= 300 for w in writers),
                   "records acknowledged by the victim before the crash")
        cluster.kill_broker(victim)
        killed_at = {w.number: w.sent for w in writers}
        wait_for(lambda: all(w.on(lost, w.failed) for w in writers),
                   "the victim's records failing")
        for writer in writers:
            for exception in writer.on(lost, writer.failed).values():
                assert isinstance(exception, errors.KafkaError) and exception.retriable, \
                    repr(exception)
            failed = writer.on(kept, writer.failed)  # the other broker kept serving them
            assert not failed, f"producer {writer.number}: {len(failed)} records to " \
                               f"partitions {kept} failed: {set(map(str, failed.values()))}"
            assert max(writer.on(kept, writer.acked)) >= killed_at[writer.number]
        cluster.start_broker(victim)
        restarted_at = {w.number: w.sent for w in writers}
        wait_for(lambda: all(max(w.on(lost, w.acked), default=-1) >= restarted_at[w.number]
                               for w in writers), "the victim's records acknowledged again")
    finally:
        for writer in writers:
            writer.stopping.set()
            writer.join(BOUND)
        for producer in producers:
            producer.close(BOUND)
    for writer in writers:
        assert writer.error is None, writer.error
        assert len(writer.acked) + len(writer.failed) == writer.sent  # every future done
    tps = [TopicPartition("crash", p) for p in range(PARTITIONS)]
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                       auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        stored = {}
        deadline = time.monotonic() + BOUND
        while len(stored) < sum(ends.values()):
            assert time.monotonic() < deadline, f"read {len(stored)} records of {ends}"
            for tp, records in consumer.poll(timeout_ms=200).items():
                for record in records:
                    stored[tp.partition, record.offset] = stamp_of(record.value)
    for writer in writers:
        for seq, place in writer.acked.items():
            assert stored.get(place) == (writer.number, seq), (
                f"producer {writer.number} seq {seq} acknowledged at {place}, which holds "
                f"{stored.get(place)}")


def test_clients_of_a_dead_last_broker_keep_their_timeouts(e2e):
    """The only broker SIGKILLed: no controller is left to mark it dead on the metadata
    page, yet its clients see at once that its process is gone (instead of waiting out a
    connect to it each time): polls return after their timeout, and a record's future
    fails with the delivery timeout; started again, the broker serves them both."""
    cluster = e2e.cluster(brokers=1)
    create_topic(cluster, "alone", 1)
    tp = TopicPartition("alone", 0)
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0,
                       request_timeout_ms=1000, delivery_timeout_ms=1000,
                       **FAST) as producer, \
            KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, fetch_max_wait_ms=100,
                          auto_offset_reset="earliest", **FAST) as consumer:
        consumer.assign([tp])
        producer.send("alone", b"before").get(BOUND)
        assert [r.value for r in consumer.poll(timeout_ms=BOUND * 1000)[tp]] == [b"before"]
        cluster.kill_broker(0)
        lost = producer.send("alone", b"lost")
        for _ in range(10):
            assert consumer.poll(timeout_ms=100) == {}
        with pytest.raises(errors.KafkaTimeoutError, match="delivery_timeout_ms 1000"):
            lost.get(BOUND)
        cluster.start_broker(0)
        assert producer.send("alone", b"after").get(BOUND).offset == 1
        got = []
        deadline = time.monotonic() + BOUND
        while len(got) < 1:
            assert time.monotonic() < deadline
            got += [(r.offset, r.value) for r in consumer.poll(timeout_ms=200).get(tp, [])]
        assert got == [(1, b"after")]


def test_a_new_partition_has_every_live_replica_in_its_isr_and_fails_over_to_one(e2e):
    """A new partition's ISR is all its live replicas; when its leader dies, the
    follower in the ISR leads in the next epoch, and the dead broker leaves the ISR."""
    from cluster import KafkaAdminClient, NewTopic
    cluster = e2e.cluster(brokers=2)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("replicated", 1, 2)])
    image = cluster.wait_for_metadata(lambda i: "replicated" in i.topics)
    state = image.topics["replicated"].partitions[0]
    assert len(state.replicas) == 2 and state.isr == state.replicas
    [follower] = [b for b in state.replicas if b != state.leader]
    cluster.kill_broker(state.leader)
    image = cluster.wait_for_metadata(
        lambda i: i.topics["replicated"].partitions[0].leader_epoch > state.leader_epoch)
    after = image.topics["replicated"].partitions[0]
    assert (after.leader, after.leader_epoch, after.isr) == (
        follower, state.leader_epoch + 1, (follower,))
    cluster.start_broker(state.leader)


def test_a_hung_broker_does_not_hold_back_records_for_the_others(e2e):
    """A producer waiting on a stopped (SIGSTOP) broker's response still sends, and gets
    acknowledged, records for the partition another broker leads."""
    import os
    import signal
    cluster = e2e.cluster(brokers=2)
    leaders = create_topic(cluster, "spread", 2)
    by_broker = {broker: partition for partition, broker in leaders.items()}
    assert sorted(by_broker) == [0, 1]
    hung_pid = cluster.pids()[0]
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1, linger_ms=0,
                       max_block_ms=BOUND * 1000, request_timeout_ms=60_000) as p:
        for partition in (0, 1):
            p.send("spread", b"warm", partition=partition).get(BOUND)
        os.kill(hung_pid, signal.SIGSTOP)
        try:
            stuck = p.send("spread", b"to the hung broker", partition=by_broker[0])
            time.sleep(0.2)  # its request is in flight; the sender waits for the answer
            assert not stuck.is_done
            metadata = p.send("spread", b"to the live broker", partition=by_broker[1]).get(10)
            assert (metadata.partition, metadata.offset) == (by_broker[1], 1)
            assert not stuck.is_done
        finally:
            os.kill(hung_pid, signal.SIGCONT)
        assert stuck.get(BOUND).offset == 1


def test_clients_bootstrap_past_a_hung_broker(e2e):
    """With broker 0 stopped (SIGSTOP: alive, never answering), new clients get their
    metadata from broker 1 instead of failing on broker 0."""
    import os
    import signal
    cluster = e2e.cluster(brokers=2)
    leaders = create_topic(cluster, "around", 2)
    hung_pid = cluster.pids()[0]
    os.kill(hung_pid, signal.SIGSTOP)
    try:
        with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers) as c:
            assert "around" in c.topics()
        live = next(p for p, broker in leaders.items() if broker == 1)
        with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1,
                           max_block_ms=BOUND * 1000) as p:
            assert p.send("around", b"v", partition=live).get(BOUND).partition == live
    finally:
        os.kill(hung_pid, signal.SIGCONT)
