"""Exactly-once consume-transform-produce with consumer groups (KIP-447) on a real 3-broker
cluster: each instance of a copier is a member of one group with its own transactional
producer, and commits its input offsets with ``send_offsets_to_transaction(offsets,
consumer.group_metadata())``.

- A zombie: instance A stops polling with a transaction open; past its
  ``max_poll_interval_ms`` it is out of the group (its heartbeat thread keeps its session
  alive until then, as Java's consumer, so the poll interval is what a hung instance runs
  out of) and B owns every input partition, starting from the committed offsets. A's
  TxnOffsetCommit (v3: its stale generation and member id) is refused (UNKNOWN_MEMBER_ID),
  so its ``send_offsets_to_transaction`` raises CommitFailedError; A aborts, and the
  output read with read_committed holds every input record exactly once.
- A read_committed member whose group's offsets are pending in an open transaction
  (OffsetFetch v7 with require_stable: UNSTABLE_OFFSET_COMMIT) has no position until the
  transaction commits, then starts from the transaction's offset, not the older one.

The ``e2e`` fixture stops the cluster and fails the test if any process it started still
runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import time

import pytest

from cluster import (
    ConsumerGroupMetadata,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
    NewTopic,
    OffsetAndMetadata,
    TopicPartition,
)
from cluster.errors import CommitFailedError
from tests.support.bounds import BOUND

pytestmark = pytest.mark.multiprocess

IN, OUT = "eos-in", "eos-out"
IN_PARTITIONS, OUT_PARTITIONS = 4, 2
PER_PARTITION = 30
GROUP = "eos-copiers"
ALL_IN = {TopicPartition(IN, p) for p in range(IN_PARTITIONS)}


def start(e2e):
    cluster = e2e.cluster(brokers=3, offsets_topic_num_partitions=2,
                          transaction_state_log_num_partitions=2,
                          group_initial_rebalance_delay_ms=0)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(IN, IN_PARTITIONS, 3), NewTopic(OUT, OUT_PARTITIONS, 3)])
    cluster.wait_for_metadata(lambda i: all(
        t in i.topics and all(p.leader >= 0 for p in i.topics[t].partitions)
        for t in (IN, OUT)))
    inputs = [b"%d-%d" % (p, i) for p in range(IN_PARTITIONS) for i in range(PER_PARTITION)]
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
        for value in inputs:
            producer.send(IN, value, partition=int(value.split(b"-")[0]))
        producer.flush()
    return cluster, sorted(inputs)


class Copier:
    """One instance of the copier: a group member reading IN (read_committed) and a
    transactional producer writing OUT, one transaction per poll."""

    def __init__(self, cluster, name, **consumer_config):
        self.name = name
        self.consumer = KafkaConsumer(
            bootstrap_servers=cluster.bootstrap_servers, group_id=GROUP, client_id=name,
            isolation_level="read_committed", enable_auto_commit=False,
            auto_offset_reset="earliest", max_poll_records=7, **consumer_config)
        self.consumer.subscribe([IN])
        self.producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                                      transactional_id=f"eos-{name}")
        self.producer.init_transactions()

    def poll_and_send(self):
        """Poll once; with records, begin a transaction and send their copies. The
        offsets to commit after them ({tp: OffsetAndMetadata}), or None."""
        polled = self.consumer.poll(timeout_ms=100)
        if not polled:
            return None
        self.producer.begin_transaction()
        for records in polled.values():
            for record in records:
                self.producer.send(OUT, record.value)
        return {tp: OffsetAndMetadata(records[-1].offset + 1, "")
                for tp, records in polled.items()}

    def commit(self, offsets):
        self.producer.send_offsets_to_transaction(offsets, self.consumer.group_metadata())
        self.producer.commit_transaction()

    def step(self):
        """One poll and its transaction; the number of records copied."""
        offsets = self.poll_and_send()
        if offsets is None:
            return 0
        self.commit(offsets)
        return 1

    def close(self):
        self.consumer.close()
        self.producer.close(timeout=5)


def read_committed(cluster, topic, partitions):
    """Every value of ``topic`` a read_committed reader sees up to the end offsets (with no
    transaction open, the last stable offsets)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    values = []
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None,
                       isolation_level="read_committed", enable_auto_commit=False) as reader:
        reader.assign(tps)
        ends = reader.end_offsets(tps)
        reader.seek_to_beginning(*tps)
        deadline = time.monotonic() + BOUND
        while any(reader.position(tp) < ends[tp] for tp in tps):
            for records in reader.poll(timeout_ms=200).values():
                values.extend(r.value for r in records)
            assert time.monotonic() < deadline, "the reader did not reach the end offsets"
    return sorted(values)


def until(predicate, what, step=lambda: None, state=lambda: ""):
    """Call ``step`` until ``predicate()``; after BOUND seconds fail naming ``what`` and
    what ``state()`` says of the copiers then (a failure seen once under load, not yet
    explained: the message is what the next one will tell)."""
    deadline = time.monotonic() + BOUND
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}{state()}"
        step()


def described(copiers, copied):
    """What each copier holds, has copied and joined as (``until``'s ``state``)."""
    return "".join(
        f"; {c.name}: assigned {sorted(tp.partition for tp in c.consumer.assignment())}, "
        f"copied {copied[c.name]}, generation {c.consumer.group_metadata().generation_id}"
        for c in copiers)


def test_a_zombie_copier_is_fenced_by_its_group_metadata(e2e):
    cluster, inputs = start(e2e)
    a = Copier(cluster, "a", max_poll_interval_ms=2000)
    b = Copier(cluster, "b")
    try:
        copied = {"a": 0, "b": 0}

        def both():
            copied["a"] += a.step()
            copied["b"] += b.step()
        until(lambda: a.consumer.assignment() and b.consumer.assignment()
              and a.consumer.assignment() | b.consumer.assignment() == ALL_IN
              and copied["a"] and copied["b"], "both instances copying", both,
              lambda: described((a, b), copied))
        stale = a.consumer.group_metadata()
        # A takes one more poll's records and sends their copies, then hangs.
        pending = []

        def zombie_poll():
            offsets = a.poll_and_send()
            if offsets is None:
                b.step()
            else:
                pending.append(offsets)
        until(lambda: pending, "records for A", zombie_poll)
        [offsets] = pending
        assert a.consumer.group_metadata() == stale
        until(lambda: b.consumer.assignment() == ALL_IN, "B owning every partition", b.step)
        assert a.consumer.group_metadata() == stale  # what the last join gave, now stale
        with pytest.raises(CommitFailedError):
            a.commit(offsets)
        a.producer.abort_transaction()  # the producer stays usable
        with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
            def done():
                committed = admin.list_consumer_group_offsets(GROUP)
                return all(committed.get(tp) is not None
                           and committed[tp].offset == PER_PARTITION for tp in ALL_IN)
            until(done, "B copying everything", b.step)
    finally:
        a.close()
        b.close()
    assert read_committed(cluster, OUT, OUT_PARTITIONS) == inputs  # each exactly once


def test_a_read_committed_member_waits_for_offsets_pending_in_a_transaction(e2e):
    cluster, _ = start(e2e)
    tp = TopicPartition(IN, 0)
    others = sorted(ALL_IN - {tp})
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                             transactional_id="eos-offsets")
    consumer = None
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            {t: OffsetAndMetadata(5, "") for t in ALL_IN}, GROUP)
        producer.commit_transaction()
        producer.begin_transaction()  # the newer offsets wait for this transaction
        producer.send(OUT, b"copied")
        producer.send_offsets_to_transaction(
            {tp: OffsetAndMetadata(12, "")}, ConsumerGroupMetadata(GROUP, -1, "", None))
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                                 group_id=GROUP, isolation_level="read_committed",
                                 enable_auto_commit=False, auto_offset_reset="earliest")
        consumer.subscribe([IN])
        until(lambda: consumer.assignment() == ALL_IN, "the assignment",
              lambda: consumer.poll(timeout_ms=100))
        # UNSTABLE_OFFSET_COMMIT: no position yet (neither the older 5 nor a reset)
        assert consumer.position(tp, timeout_ms=300) is None
        producer.commit_transaction()
        read = {}

        def poll():
            for part, records in consumer.poll(timeout_ms=100).items():
                read.setdefault(part, []).extend(r.offset for r in records)
        until(lambda: all(len(read.get(t, ())) == PER_PARTITION - 5 for t in others)
              and len(read.get(tp, ())) == PER_PARTITION - 12, "the records", poll)
        assert read[tp] == list(range(12, PER_PARTITION))
        assert all(read[t] == list(range(5, PER_PARTITION)) for t in others)
    finally:
        if consumer is not None:
            consumer.close()
        producer.close(timeout=5)
