"""Bad input and misbehaving clients against a real broker process (auto.create.topics.enable
false), as a Kafka user meets them through the public API: each gets kafka-python's error
class with a message naming the bad value, and the broker keeps serving a bystander — a
producer and a consumer connected before the bad input and used after it — and new clients.

Clients killed mid-request and a rogue process writing garbage into its request ring are
separate OS processes. The ``e2e`` fixture stops the cluster and fails the test if any
process it started still runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import os
import random
import re
import signal
import time

import pytest

from cluster import KafkaAdminClient, KafkaConsumer, KafkaProducer, NewTopic, TopicPartition, errors

# the rogue process writes raw frames
from cluster.protocol import frame_descriptor as protocol_descriptor, frames as protocol
from shm_ring import connect
from shm_ring.errors import PeerClosedError
from shm_ring.naming import list_objects
from tests.support.bounds import BOUND
from tests.support.broker import api_versions_request, batch, produce_request
from tests.support.processes import CTX

# Every test runs a real cluster (broker processes) and client processes.
pytestmark = pytest.mark.multiprocess

GOOD = "good"
FAIL_FAST = dict(max_block_ms=1000, request_timeout_ms=1000, delivery_timeout_ms=1000)


@pytest.fixture
def cluster(e2e):
    """One broker, auto-creation off, topic 'good' with 2 partitions."""
    cluster = e2e.cluster(brokers=1, auto_create_topics_enable=False)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(GOOD, num_partitions=2, replication_factor=1)])
    return cluster


class Bystander:
    """A producer and a consumer of 'good' partition 0, connected before the bad input;
    ``check()`` writes a record and reads it back through both, and through new clients."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.tp = TopicPartition(GOOD, 0)
        self.producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1,
                                      linger_ms=0, max_block_ms=BOUND * 1000)
        self.consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                                      auto_offset_reset="latest", fetch_max_wait_ms=100)
        self.consumer.assign([self.tp])
        self.consumer.position(self.tp)  # from the end: only what check() writes
        self.count = 0

    def check(self):
        self.count += 1
        value = b"bystander-%d" % self.count
        offset = self.producer.send(GOOD, value, partition=0).get(BOUND).offset
        assert read(self.consumer, 1) == [(offset, value)]
        with KafkaProducer(bootstrap_servers=self.cluster.bootstrap_servers) as fresh:
            fresh.send(GOOD, b"newcomer", partition=1).get(BOUND)
        with KafkaConsumer(bootstrap_servers=self.cluster.bootstrap_servers) as fresh:
            assert fresh.end_offsets([self.tp])[self.tp] == offset + 1

    def close(self):
        self.producer.close(BOUND)
        self.consumer.close()


@pytest.fixture
def bystander(cluster):
    """A Bystander, made when the test asks for it (after it forked its processes)."""
    made = []

    def make():
        made.append(Bystander(cluster))
        return made[-1]
    yield make
    for one in made:
        one.close()


def read(consumer, count):
    """``count`` records of the consumer's assignment as [(offset, value)]."""
    got = []
    deadline = time.monotonic() + BOUND
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {got}, expected {count} records"
        for records in consumer.poll(timeout_ms=100).values():
            got += [(r.offset, r.value) for r in records]
    return got


def topics(cluster):
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        return set(admin.list_topics())


def test_an_unknown_topic_with_auto_creation_off(cluster, bystander):
    watcher = bystander()
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, **FAIL_FAST) as producer:
        with pytest.raises(errors.KafkaTimeoutError,
                           match="topic 'missing' not present in metadata after 1000 ms.*"
                                 "UNKNOWN_TOPIC_OR_PARTITION"):
            producer.send("missing", b"lost")
    missing = TopicPartition("missing", 0)
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=1000,
                       default_api_timeout_ms=1000, auto_offset_reset="earliest") as consumer:
        consumer.assign([missing])  # as Kafka: accepted; no records, no offsets
        assert consumer.poll(timeout_ms=300) == {}
        assert consumer.position(missing, timeout_ms=300) is None
        with pytest.raises(errors.KafkaTimeoutError, match="topic='missing', partition=0"):
            consumer.end_offsets([missing])
        assert consumer.partitions_for_topic("missing") == set()
    assert "missing" not in topics(cluster)  # nobody created it
    watcher.check()


BAD_NAMES = ["with space", "slash/name", "colon:name", "ünïcode", ".", "..", "x" * 250]


def test_invalid_topic_names(cluster, bystander):
    """Kafka's rule: 1 to 249 of ASCII letters, digits, '.', '_', '-'; not '.' or '..'."""
    watcher = bystander()
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin, \
            KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, **FAIL_FAST) as producer:
        for name in BAD_NAMES:
            named = re.escape(repr(name)[:60])
            with pytest.raises(errors.InvalidTopicError, match=named):
                admin.create_topics([NewTopic(name, 1, 1)])
            with pytest.raises(errors.InvalidTopicError, match=named):
                producer.send(name, b"lost")
        longest = "x" * 249
        admin.create_topics([NewTopic(longest, 1, 1)])
        assert producer.send(longest, b"kept").get(BOUND).offset == 0
    assert topics(cluster) == {GOOD, longest}
    watcher.check()


def test_a_record_larger_than_max_message_bytes(cluster, bystander):
    watcher = bystander()
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic("small", 1, 1,
                                      topic_configs={"max.message.bytes": "1000"})])
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0,
                       **FAIL_FAST) as producer:
        future = producer.send("small", b"x" * 5000)
        with pytest.raises(errors.MessageSizeTooLargeError,
                           match=r"topic 'small' partition 0.*\b5070 bytes, larger than "
                                 r"max.message.bytes 1000"):
            future.get(BOUND)
        assert errors.MessageSizeTooLargeError.errno == 10  # MESSAGE_TOO_LARGE
        too_big_for_a_request = producer.send(GOOD, b"y" * (2 << 20))  # max_request_size
        with pytest.raises(errors.MessageSizeTooLargeError,
                           match=r"good-\d: the message is 2097\d\d\d bytes when serialized, "
                                 r"which is larger than 1048576, the value of max_request_size"):
            too_big_for_a_request.get(BOUND)
        assert producer.send("small", b"x" * 100).get(BOUND).offset == 0  # nothing appended
    watcher.check()


def test_a_partition_that_does_not_exist(cluster, bystander):
    watcher = bystander()
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, **FAIL_FAST) as producer:
        # at once, as kafka-python's send() (not after max_block_ms)
        with pytest.raises(ValueError, match="^Unrecognized partition 99 for topic good: "
                                             "it has 2 partitions, 0..1$"):
            producer.send(GOOD, b"lost", partition=99)
        assert producer.send(GOOD, b"kept", partition=1).get(BOUND).offset == 0
    watcher.check()


def test_a_fetch_offset_out_of_range(cluster, bystander):
    watcher = bystander()
    tp = TopicPartition(GOOD, 1)
    with KafkaProducer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        for value in (b"a", b"b", b"c"):
            producer.send(GOOD, value, partition=1)
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                       auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        deadline = time.monotonic() + BOUND
        with pytest.raises(errors.OffsetOutOfRangeError,
                           match=r"fetch offset 1000 of good-1 is out of range"):
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=100)
        consumer.seek(tp, 1)  # the consumer goes on from a valid offset
        assert read(consumer, 2) == [(1, b"b"), (2, b"c")]
    watcher.check()


# -- clients SIGKILLed mid-request -----------------------------------------------------------

def produce_forever(data_dir, started):
    """Send records without end (acks=all), each batch a request in flight."""
    with KafkaProducer(bootstrap_servers=data_dir, acks="all", linger_ms=0) as producer:
        producer.send(GOOD, b"first", partition=1).get(BOUND)
        started.set()
        while True:
            producer.send(GOOD, b"v" * 100, partition=1)


def fetch_forever(data_dir, started):
    """Long-poll an empty partition: a Fetch parked in the broker most of the time."""
    tp = TopicPartition(GOOD, 0)
    with KafkaConsumer(bootstrap_servers=data_dir, auto_offset_reset="latest",
                       fetch_max_wait_ms=20_000, request_timeout_ms=30_000) as consumer:
        consumer.assign([tp])
        consumer.position(tp)
        started.set()
        while True:
            consumer.poll(timeout_ms=60_000)


def objects_of(cluster, pid):
    return [name for name in list_objects(cluster.cluster_id) if f".c{pid}-" in name]


def test_clients_killed_mid_request_are_dropped_and_their_rings_freed(cluster, bystander, e2e):
    started = [CTX.Event(), CTX.Event()]
    clients = [e2e.start("producer", produce_forever, cluster.bootstrap_servers, started[0]),
               e2e.start("consumer", fetch_forever, cluster.bootstrap_servers, started[1])]
    for event, client in zip(started, clients):
        assert event.wait(BOUND), f"{client.name} did not start"
        assert objects_of(cluster, client.pid)  # its connection's rings
    watcher = bystander()
    broker = cluster.pids()
    time.sleep(0.2)  # producing and long-polling
    for client in clients:
        os.kill(client.pid, signal.SIGKILL)
        client.process.join(BOUND)
    deadline = time.monotonic() + BOUND
    while any(objects_of(cluster, client.pid) for client in clients):
        assert time.monotonic() < deadline, [objects_of(cluster, c.pid) for c in clients]
        time.sleep(0.02)
    watcher.check()  # also appends to the partition the dead consumer was waiting on
    assert cluster.pids() == broker  # the same broker process throughout


# -- garbage in a request ring ---------------------------------------------------------------

def junk_frames():
    """Frames that are not Kafka requests the broker can serve."""
    rng = random.Random(7)
    unknown_api = bytearray(protocol.encode_request(api_versions_request(), 1, "rogue"))
    protocol_descriptor.INT16.pack_into(unknown_api, protocol_descriptor.API_KEY_OFFSET, 999)
    produce = protocol.encode_request(produce_request(GOOD, 0, batch([b"rogue"] * 3)), 2, "r")
    return {"text": b"\x00\x00\x00\x10this is not kafka",
            "random bytes": bytes(rng.randrange(256) for _ in range(300)),
            "a huge size prefix": b"\x7f\xff\xff\xff" + bytes(60),
            "an unknown API key": bytes(unknown_api),
            "a truncated produce": bytes(produce[:len(produce) // 2])}


def rogue(cluster_id, go):
    """Send each junk frame on a connection of its own; each must be closed by the broker.
    Returns the junk names."""
    assert go.wait(BOUND)
    closed = []
    for name, frame in junk_frames().items():
        with connect(cluster_id, 0, timeout=BOUND) as conn:
            assert conn.send(frame, timeout=BOUND)
            try:
                answer = conn.recv(timeout=BOUND)
            except PeerClosedError:
                closed.append(name)
            else:
                raise AssertionError(f"{name}: answered {bytes(answer)!r} instead of closing")
    return closed


def test_garbage_in_a_request_ring_closes_only_that_connection(cluster, bystander, e2e):
    go = CTX.Event()
    intruder = e2e.start("rogue", rogue, cluster.namespace, go)
    watcher = bystander()
    broker = cluster.pids()
    go.set()
    assert intruder.result() == list(junk_frames())
    watcher.check()
    assert cluster.pids() == broker
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers) as consumer:
        tp = TopicPartition(GOOD, 0)
        assert consumer.end_offsets([tp])[tp] == 1  # the bystander's record only


def test_clients_of_a_stopped_cluster_say_how_to_start_it(e2e):
    stopped = e2e.cluster(brokers=2, name="stopped")
    stopped.stop()
    for make in (KafkaProducer, KafkaConsumer, KafkaAdminClient):
        started = time.monotonic()
        with pytest.raises(errors.NoBrokersAvailable) as raised:
            make(bootstrap_servers=stopped.data_dir)
        assert time.monotonic() - started < 5.0, make  # at once, not after a retry loop
        message = str(raised.value)
        assert f"in {stopped.data_dir} is not running" in message, make
        assert (f"start it with: ringlog cluster start --data-dir {stopped.data_dir} --brokers 2 "
                f"--detach") in message, make
