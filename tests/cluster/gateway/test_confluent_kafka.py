"""confluent-kafka (librdkafka) through the gateway: an idempotent acks=all producer, two
group members with manual commits (disjoint assignments, every record once, no re-read
after a restart, a SIGKILLed member's partitions taken over), and a transactional
consume-transform-produce copy read back with read_committed (an aborted transaction
left out)."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from tests.support.bounds import BOUND

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def create_topic(bootstrap, name, partitions=3):
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result is in
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=3)],
        operation_timeout=BOUND)
    futures[name].result(BOUND)


def produce(bootstrap, topic, records, **config):
    """Send ``records`` ((key, value) pairs) idempotently with acks=all; the delivery
    reports' errors (none expected)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, **config})
    errors, delivered = [], []

    def report(error, message):
        (errors if error else delivered).append(error or message.offset())
    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=report)
        producer.poll(0)
    assert producer.flush(BOUND) == 0
    assert len(errors) + len(delivered) == len(records)
    return errors


def member(bootstrap, group, **config):
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 3000, "heartbeat.interval.ms": 300, **config})


def drain(consumers, seen, want):
    """Poll ``consumers`` in turn, committing each message synchronously, until ``seen``
    (a list of (member index, key)) has ``want`` entries."""
    deadline = time.monotonic() + BOUND * 2
    while len(seen) < want:
        assert time.monotonic() < deadline, f"{len(seen)} of {want} records consumed"
        for index, consumer in enumerate(consumers):
            for message in consumer.consume(500, timeout=0.2):
                assert message.error() is None, message.error()
                seen.append((index, message.key().decode()))
            if seen:
                try:
                    consumer.commit(asynchronous=False)
                except confluent_kafka.KafkaException as exc:  # nothing to commit yet
                    assert exc.args[0].code() == confluent_kafka.KafkaError._NO_OFFSET


def test_idempotent_producer_acks_all(served):
    create_topic(served.bootstrap, "ck-idem")
    records = [(f"k{i}".encode(), b"v" * 100) for i in range(5000)]
    assert produce(served.bootstrap, "ck-idem", records) == []
    consumer = member(served.bootstrap, "ck-idem-reader")
    try:
        consumer.subscribe(["ck-idem"])
        seen = []
        drain([consumer], seen, len(records))
    finally:
        consumer.close()
    assert sorted(key for _, key in seen) == sorted(k.decode() for k, _ in records)


KILLED_MEMBER = """
import sys
import threading
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "enable.auto.commit": False, "auto.offset.reset": "earliest",
              "session.timeout.ms": 3000, "heartbeat.interval.ms": 300})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.2)
    if c.assignment():
        print("assigned", flush=True)
"""


def test_group_members_manual_commits_restart_and_takeover(served):
    bootstrap, topic, group = served.bootstrap, "ck-group", "ck-members"
    create_topic(bootstrap, topic)
    keys = [f"a{i}" for i in range(3000)]
    assert produce(bootstrap, topic, [(k.encode(), b"x") for k in keys]) == []
    a, b = member(bootstrap, group), member(bootstrap, group)
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        seen = []
        drain([a, b], seen, len(keys))
        assigned_a = {tp.partition for tp in a.assignment()}
        assigned_b = {tp.partition for tp in b.assignment()}
    finally:
        a.close()
        b.close()
    assert sorted(k for _, k in seen) == sorted(keys)  # each once
    assert assigned_a and assigned_b and not assigned_a & assigned_b
    assert assigned_a | assigned_b == {0, 1, 2}
    assert {i for i, _ in seen} == {0, 1}

    more = [f"b{i}" for i in range(300)]
    assert produce(bootstrap, topic, [(k.encode(), b"x") for k in more]) == []
    survivor = member(bootstrap, group)
    killed = subprocess.Popen([sys.executable, "-c", KILLED_MEMBER, bootstrap, group, topic],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert killed.stdout.readline() == b"assigned\n"
        survivor.subscribe([topic])
        seen = []
        drain([survivor], seen, 1)
        killed.kill()
        killed.wait(BOUND)
        drain([survivor], seen, len(more))  # no re-read of the committed records
        assert sorted(k for _, k in seen) == sorted(more)
        last = [f"c{i}" for i in range(300)]
        assert produce(bootstrap, topic, [(k.encode(), b"x") for k in last]) == []
        deadline = time.monotonic() + BOUND
        while {tp.partition for tp in survivor.assignment()} != {0, 1, 2}:
            assert time.monotonic() < deadline, "the killed member's partitions stayed away"
            survivor.poll(0.2)
            seen += [(0, m.key().decode()) for m in survivor.consume(500, timeout=0)]
        drain([survivor], seen, len(more) + len(last))
        assert sorted(k for _, k in seen) == sorted(more + last)
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait(BOUND)
        survivor.close()


def test_transactional_consume_transform_produce_read_committed(served):
    bootstrap = served.bootstrap
    create_topic(bootstrap, "ck-in")
    create_topic(bootstrap, "ck-out")
    values = [f"{i}" for i in range(600)]
    assert produce(bootstrap, "ck-in", [(v.encode(), v.encode()) for v in values]) == []
    consumer = member(bootstrap, "ck-eos", **{"isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ck-copy",
                         "linger.ms": 5})
    try:
        producer.init_transactions(BOUND)
        producer.begin_transaction()  # aborted: none of it may be read
        for value in ("aborted-1", "aborted-2"):
            producer.produce("ck-out", value=value.encode())
        producer.abort_transaction(BOUND)
        consumer.subscribe(["ck-in"])
        copied = 0
        deadline = time.monotonic() + BOUND * 2
        while copied < len(values):
            assert time.monotonic() < deadline, f"copied {copied} of {len(values)}"
            batch = consumer.consume(200, timeout=0.5)
            if not batch:
                continue
            producer.begin_transaction()
            for message in batch:
                assert message.error() is None, message.error()
                producer.produce("ck-out", key=message.key(),
                                 value=b"copy-" + message.value())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                BOUND)
            producer.commit_transaction(BOUND)
            copied += len(batch)
        committed = consumer.committed([TopicPartition("ck-in", p) for p in range(3)], BOUND)
    finally:
        consumer.close()
    reader = member(bootstrap, "ck-out-reader", **{"isolation.level": "read_committed"})
    try:
        reader.subscribe(["ck-out"])
        out = []
        deadline = time.monotonic() + BOUND
        while len(out) < len(values):
            assert time.monotonic() < deadline, f"read {len(out)} of {len(values)}"
            out += [m.value().decode() for m in reader.consume(500, timeout=0.5)
                    if m.error() is None]
        out += [m.value().decode() for m in reader.consume(500, timeout=1.0)
                if m.error() is None]
    finally:
        reader.close()
    assert sorted(out) == sorted(f"copy-{v}" for v in values)
    assert sum(tp.offset for tp in committed) == len(values)


def test_cooperative_member_closes_after_a_topic_of_its_assignment_is_deleted(served):
    """librdkafka's 0113 h_delete_topic: a cooperative-sticky member of two topics loses the
    deleted topic's partition (metadata answers UNKNOWN_TOPIC_OR_PARTITION), keeps the other
    one, and its close() returns (the hang 0113 shows is librdkafka 2.0.2's own, fixed in
    2.1.0; this client's newer librdkafka must not hang)."""
    bootstrap = served.bootstrap
    create_topic(bootstrap, "ck-coop-kept", partitions=1)
    create_topic(bootstrap, "ck-coop-deleted", partitions=1)
    consumer = member(bootstrap, "ck-coop", **{
        "partition.assignment.strategy": "cooperative-sticky",
        "topic.metadata.refresh.interval.ms": 500})
    try:
        consumer.subscribe(["ck-coop-kept", "ck-coop-deleted"])
        deadline = time.monotonic() + BOUND
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, consumer.assignment()
            consumer.poll(0.2)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics(["ck-coop-deleted"],
                            operation_timeout=BOUND)["ck-coop-deleted"].result(BOUND)
        while [tp.topic for tp in consumer.assignment()] != ["ck-coop-kept"]:
            assert time.monotonic() < deadline, consumer.assignment()
            consumer.poll(0.2)
    finally:
        closer = threading.Thread(target=consumer.close, daemon=True)
        closer.start()
        closer.join(BOUND)
    assert not closer.is_alive(), "close() did not return"
