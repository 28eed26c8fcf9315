"""The transaction coordinator on real clusters, driven by raw requests as a transactional
producer sends them (FindCoordinator key_type 1, InitProducerId with a transactional id,
AddPartitionsToTxn, Produce of transactional batches, EndTxn): the epoch bumps and fences
the older producer; a committed transaction's markers reach every partition (led by
several brokers), the last stable offset passes them and a read_committed consumer reads
the records; an aborted one's it skips; offsets sent to a transaction (TxnOffsetCommit)
are the group's committed offsets once it commits, never if it aborts; a forgotten
transaction is aborted after its ``transaction.timeout.ms`` and its producer fenced; the
coordinator broker SIGKILLed with a transaction open: the new coordinator loaded it and
commits it; KafkaProducer.close() aborts the transaction it leaves open; a marker of a
partition the coordinator's broker leads does not wait for a follower's fetch max wait.

The ``e2e`` fixture stops the clusters and fails the test if any process it started still
runs or any shared-memory object of its clusters is left."""
from __future__ import annotations

import datetime
import time

import pytest
from kio.schema.errors import ErrorCode

from cluster import (
    ConsumerGroupMetadata,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
    NewTopic,
    OffsetAndMetadata,
    TopicPartition,
)
from cluster.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    ProducerFencedError,
)
from cluster.metadata.model import GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.coordinator_common.partitioning import partition_for
from replica_proc.responses import build
from segments.record.records import RecordBatchBuilder
from tests.support.bounds import BOUND
from tests.support.broker import Client, produce_to_leader
from tests.support.groups import find_coordinator_request

pytestmark = pytest.mark.multiprocess

TOPIC = "txn-out"
PARTITIONS = 3
TXN_PARTITIONS = 3
TXN_ID = "copier"
OFFSETS_PARTITIONS = 2
GROUP = "copiers"
#: Answers a client retries (Kafka's producer does).
RETRIABLE = (ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions,
             ErrorCode.coordinator_not_available, ErrorCode.not_coordinator)


def _retry(call, what):
    """``call()`` until its answer's error is not retriable (within BOUND); the answer."""
    deadline = time.monotonic() + BOUND
    while True:
        answer = call()
        if answer.error_code not in RETRIABLE:
            return answer
        assert time.monotonic() < deadline, f"{what}: still {answer} after {BOUND} s"
        time.sleep(0.05)


class Producer:
    """A transactional producer's requests to the coordinator of ``TXN_ID``."""

    def __init__(self, cluster, timeout_ms=60_000):
        self.cluster = cluster
        self.timeout_ms = timeout_ms
        self.coordinator = None
        self.client = None
        self.producer_id = self.epoch = -1
        self.sequences = {}

    def find_coordinator(self, excluded=()):
        """Ask until a live broker not in ``excluded`` is named; connect to it."""
        asked = next(b for b in self.cluster.broker_ids if b not in excluded)
        client = Client(self.cluster.namespace, asked)
        try:
            deadline = time.monotonic() + BOUND
            while True:
                answer = client.call(find_coordinator_request(TXN_ID, key_type=1))
                if answer.error_code == ErrorCode.none and answer.node_id not in excluded:
                    break
                assert answer.error_code in (ErrorCode.none,
                                             ErrorCode.coordinator_not_available), answer
                assert time.monotonic() < deadline, f"no coordinator after {BOUND} s"
                time.sleep(0.05)
        finally:
            client.close()
        self.close()
        self.coordinator = answer.node_id
        self.client = Client(self.cluster.namespace, self.coordinator)
        return self.coordinator

    def init(self):
        cls = protocol.request_class(ApiKey.INIT_PRODUCER_ID, 1)
        answer = _retry(lambda: self.client.call(cls(
            transactional_id=TXN_ID,
            transaction_timeout=datetime.timedelta(milliseconds=self.timeout_ms))),
            "InitProducerId")
        assert answer.error_code == ErrorCode.none, answer
        self.producer_id, self.epoch = answer.producer_id, answer.producer_epoch
        self.sequences = {}
        return self.producer_id, self.epoch

    def add_partitions(self, partitions, epoch=None):
        """{(topic, partition): error code} of AddPartitionsToTxn v1."""
        m = protocol.request_module(ApiKey.ADD_PARTITIONS_TO_TXN, 1)
        topics = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        request = m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TXN_ID, v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.epoch if epoch is None else epoch,
            v3_and_below_topics=tuple(m.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps))
                                      for t, ps in topics.items()))

        class _Answer:
            def __init__(self, response):
                self.codes = {(t.name, p.partition_index): p.partition_error_code
                              for t in response.results_by_topic_v3_and_below
                              for p in t.results_by_partition}
                codes = set(self.codes.values())
                self.error_code = codes.pop() if len(codes) == 1 else ErrorCode.none

        return _retry(lambda: _Answer(self.client.call(request)), "AddPartitionsToTxn").codes

    def produce(self, cluster, partition, values, topic=TOPIC):
        """Produce ``values`` as one transactional batch to ``topic``-``partition``."""
        sequence = self.sequences.get((topic, partition), 0)
        self.sequences[(topic, partition)] = sequence + len(values)
        builder = RecordBatchBuilder(producer_id=self.producer_id,
                                     producer_epoch=self.epoch, base_sequence=sequence,
                                     is_transactional=True)
        for value in values:
            assert builder.append(None, None, value) is not None
        produce_to_leader(cluster, topic, partition, bytes(builder.build()))

    def add_offsets(self, group):
        """AddOffsetsToTxn v1's error code."""
        m = protocol.request_module(ApiKey.ADD_OFFSETS_TO_TXN, 1)
        request = m.AddOffsetsToTxnRequest(transactional_id=TXN_ID,
                                           producer_id=self.producer_id,
                                           producer_epoch=self.epoch, group_id=group)
        return _retry(lambda: self.client.call(request), "AddOffsetsToTxn").error_code

    def end(self, committed, epoch=None):
        """EndTxn v1's error code."""
        m = protocol.request_module(ApiKey.END_TXN, 1)
        request = m.EndTxnRequest(transactional_id=TXN_ID, producer_id=self.producer_id,
                                  producer_epoch=self.epoch if epoch is None else epoch,
                                  committed=committed)
        return _retry(lambda: self.client.call(request), "EndTxn").error_code

    def close(self):
        if self.client is not None:
            self.client.close()
            self.client = None


def stable_offsets(cluster, topic=TOPIC):
    """{partition: (last stable offset, log end offset)} of ``topic`` (ListOffsets latest,
    read_committed and read_uncommitted, from each leader)."""
    m = protocol.request_module(ApiKey.LIST_OFFSETS, 5)
    offsets = {}
    for state in cluster.metadata().topics[topic].partitions:
        client = Client(cluster.namespace, state.leader)
        try:
            pair = []
            for isolation in (1, 0):
                response = client.call(build(
                    m.ListOffsetsRequest, replica_id=-1, isolation_level=isolation,
                    topics=(m.ListOffsetsTopic(name=topic, partitions=(
                        m.ListOffsetsPartition(partition_index=state.partition,
                                               timestamp=-1),)),)))
                partition = response.topics[0].partitions[0]
                assert partition.error_code == ErrorCode.none, partition
                pair.append(partition.offset)
        finally:
            client.close()
        offsets[state.partition] = tuple(pair)
    return offsets


def wait_stable(cluster, topic=TOPIC):
    """Wait (within BOUND) until no transaction is open in ``topic``: every partition's
    last stable offset is its log end offset; return the offsets."""
    deadline = time.monotonic() + BOUND
    while True:
        offsets = stable_offsets(cluster, topic)
        if all(lso == leo for lso, leo in offsets.values()):
            return {p: leo for p, (_, leo) in offsets.items()}
        assert time.monotonic() < deadline, f"transactions still open: {offsets}"
        time.sleep(0.05)


def read_committed(cluster, ends, topic=TOPIC):
    """Every value a read_committed consumer reads of ``topic`` up to ``ends``
    ({partition: offset})."""
    partitions = [TopicPartition(topic, p) for p in sorted(ends)]
    values = []
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers,
                       isolation_level="read_committed", enable_auto_commit=False,
                       group_id=None) as consumer:
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        deadline = time.monotonic() + BOUND
        while any(consumer.position(tp) < ends[tp.partition] for tp in partitions):
            for records in consumer.poll(timeout_ms=200).values():
                values.extend(r.value for r in records)
            assert time.monotonic() < deadline, "the consumer did not reach the ends"
    return sorted(values)


def find_group_coordinator(cluster):
    """Ask for ``GROUP``'s coordinator until one is named (``__consumer_offsets`` is
    created on first use)."""
    client = Client(cluster.namespace, cluster.broker_ids[0])
    try:
        deadline = time.monotonic() + BOUND
        while client.call(find_coordinator_request(GROUP)).error_code != ErrorCode.none:
            assert time.monotonic() < deadline, "no group coordinator"
            time.sleep(0.05)
    finally:
        client.close()


def start(e2e, **config):
    cluster = e2e.cluster(brokers=3, transaction_state_log_num_partitions=TXN_PARTITIONS,
                          offsets_topic_num_partitions=OFFSETS_PARTITIONS,
                          broker_session_timeout_ms=1500, broker_heartbeat_interval_ms=100,
                          **config)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    cluster.wait_for_metadata(lambda i: TOPIC in i.topics and all(
        p.leader >= 0 for p in i.topics[TOPIC].partitions))
    return cluster


def test_commit_abort_and_fencing(e2e):
    cluster = start(e2e)
    producer = Producer(cluster)
    try:
        node = producer.find_coordinator()
        image = cluster.wait_for_metadata(lambda i: TRANSACTION_STATE_TOPIC in i.topics)
        state = image.topics[TRANSACTION_STATE_TOPIC].partitions[
            partition_for(TXN_ID, TXN_PARTITIONS)]
        assert node == state.leader and len(state.replicas) == 3
        leaders = {p.leader for p in image.topics[TOPIC].partitions}
        assert leaders - {node}, leaders  # markers travel to other brokers too
        producer_id, epoch = producer.init()
        assert producer.init() == (producer_id, epoch + 1)  # the epoch bumps
        everywhere = [(TOPIC, p) for p in range(PARTITIONS)]
        # the older epoch is fenced (INVALID_PRODUCER_EPOCH: v1 knows no PRODUCER_FENCED)
        assert set(producer.add_partitions(everywhere, epoch=epoch).values()) == {
            ErrorCode.invalid_producer_epoch}
        # a partition that does not exist: nothing is attempted
        assert producer.add_partitions([(TOPIC, 0), ("missing", 0)]) == {
            (TOPIC, 0): ErrorCode.operation_not_attempted,
            ("missing", 0): ErrorCode.unknown_topic_or_partition}

        assert set(producer.add_partitions(everywhere).values()) == {ErrorCode.none}
        for p in range(PARTITIONS):
            producer.produce(cluster, p, [b"c%d-%d" % (p, i) for i in range(3)])
        offsets = stable_offsets(cluster)
        assert all(lso < leo for lso, leo in offsets.values()), offsets  # open
        # the group's offsets partition joins the transaction (it gets a marker too)
        find_group_coordinator(cluster)
        assert producer.add_offsets(GROUP) == ErrorCode.none
        assert producer.end(committed=True) == ErrorCode.none
        ends = wait_stable(cluster)
        group_partition = partition_for(GROUP, OFFSETS_PARTITIONS)
        offsets = wait_stable(cluster, GROUP_METADATA_TOPIC)
        assert offsets[group_partition] == 1  # its COMMIT marker
        committed = sorted(b"c%d-%d" % (p, i) for p in range(PARTITIONS) for i in range(3))
        assert read_committed(cluster, ends) == committed

        assert set(producer.add_partitions(everywhere[:2]).values()) == {ErrorCode.none}
        for p in range(2):
            producer.produce(cluster, p, [b"a%d" % p])
        assert producer.end(committed=False) == ErrorCode.none
        ends = wait_stable(cluster)
        assert read_committed(cluster, ends) == committed  # the aborted records skipped
        # a stale EndTxn of the older epoch is fenced too
        assert producer.end(committed=True, epoch=epoch) == ErrorCode.invalid_producer_epoch
    finally:
        producer.close()


def test_a_forgotten_transaction_is_aborted_after_its_timeout(e2e):
    cluster = start(e2e, transaction_abort_timed_out_transaction_cleanup_interval_ms=200)
    producer = Producer(cluster, timeout_ms=1000)
    try:
        producer.find_coordinator()
        _, epoch = producer.init()
        assert set(producer.add_partitions([(TOPIC, 0)]).values()) == {ErrorCode.none}
        producer.produce(cluster, 0, [b"forgotten"])
        ends = wait_stable(cluster)  # aborted by the coordinator
        assert read_committed(cluster, ends) == []
        # the abort bumped the epoch: the forgetful producer is fenced
        assert producer.end(committed=True) == ErrorCode.invalid_producer_epoch
        _, new_epoch = producer.init()
        assert new_epoch > epoch + 1
    finally:
        producer.close()


def test_the_new_coordinator_completes_a_transaction_of_a_killed_one(e2e):
    cluster = start(e2e)
    producer = Producer(cluster)
    try:
        node = producer.find_coordinator()
        producer.init()
        everywhere = [(TOPIC, p) for p in range(PARTITIONS)]
        assert set(producer.add_partitions(everywhere).values()) == {ErrorCode.none}
        for p in range(PARTITIONS):
            producer.produce(cluster, p, [b"k%d" % p])
        cluster.kill_broker(node)
        index = partition_for(TXN_ID, TXN_PARTITIONS)
        cluster.wait_for_metadata(lambda i: all(
            p.leader not in (node, -1) for p in i.topics[TOPIC].partitions) and
            i.topics[TRANSACTION_STATE_TOPIC].partitions[index].leader not in (node, -1))
        assert producer.find_coordinator(excluded=(node,)) != node
        # the new coordinator loaded the open transaction with its partitions
        assert producer.end(committed=True) == ErrorCode.none
        ends = wait_stable(cluster)
        assert read_committed(cluster, ends) == [b"k%d" % p for p in range(PARTITIONS)]
    finally:
        producer.close()


def test_a_prepared_commit_is_completed_by_the_next_coordinator(e2e):
    """The coordinator answered EndTxn (PrepareCommit stored) but one partition's leader is
    down, so its marker waits; the coordinator is SIGKILLed: the next one loads
    PrepareCommit and writes the markers, the last once that leader is back."""
    cluster = start(e2e)
    producer = Producer(cluster)
    try:
        coordinator = producer.find_coordinator()
        # not the controller either, when it can be: a broker SIGKILLed while its
        # connection to a just-killed controller is being set up leaves that connection's
        # shared memory behind (the harness would report it)
        controller = cluster.metadata().controller_id
        solo_broker = min(cluster.broker_ids, key=lambda b: (b == coordinator,
                                                             b == controller))
        with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
            admin.create_topics([NewTopic("solo", replica_assignments={0: [solo_broker]})])
        cluster.wait_for_metadata(lambda i: "solo" in i.topics and
                                  i.topics["solo"].partitions[0].leader == solo_broker)
        producer.init()
        everywhere = [(TOPIC, p) for p in range(PARTITIONS)] + [("solo", 0)]
        assert set(producer.add_partitions(everywhere).values()) == {ErrorCode.none}
        for p in range(PARTITIONS):
            producer.produce(cluster, p, [b"k%d" % p])
        producer.produce(cluster, 0, [b"solo"], topic="solo")
        cluster.kill_broker(solo_broker)
        cluster.wait_for_metadata(lambda i: not i.brokers[solo_broker].alive and all(
            solo_broker not in p.isr for p in i.topics[TOPIC].partitions))
        assert producer.end(committed=True) == ErrorCode.none  # PrepareCommit stored
        ends = wait_stable(cluster)  # the markers of the partitions with a leader
        assert read_committed(cluster, ends) == [b"k%d" % p for p in range(PARTITIONS)]

        cluster.kill_broker(coordinator)
        index = partition_for(TXN_ID, TXN_PARTITIONS)
        cluster.wait_for_metadata(
            lambda i: i.topics[TRANSACTION_STATE_TOPIC].partitions[index].leader not in (
                coordinator, solo_broker, -1))
        cluster.start_broker(solo_broker)
        ends = wait_stable(cluster, "solo")
        assert read_committed(cluster, ends, "solo") == [b"solo"]
        # the transaction is complete: the next InitProducerId is answered (not
        # CONCURRENT_TRANSACTIONS) by the new coordinator
        assert producer.find_coordinator(excluded=(coordinator,)) != coordinator
        producer.init()
    finally:
        producer.close()


def test_the_transactional_producer_commits_and_aborts_on_real_brokers(e2e):
    """KafkaProducer's transactional API against the brokers' coordinator: committed
    records are read by a read_committed consumer, aborted ones never; a second producer
    with the same transactional id fences the first."""
    cluster = start(e2e)
    first = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                          transactional_id=TXN_ID)
    second = None
    try:
        first.init_transactions()
        first.begin_transaction()
        for p in range(PARTITIONS):
            for i in range(3):
                first.send(TOPIC, b"c%d-%d" % (p, i), partition=p)
        first.commit_transaction()
        first.begin_transaction()
        for p in range(PARTITIONS):
            first.send(TOPIC, b"a%d" % p, partition=p)
        first.flush()
        first.abort_transaction()
        ends = wait_stable(cluster)
        committed = sorted(b"c%d-%d" % (p, i) for p in range(PARTITIONS) for i in range(3))
        assert read_committed(cluster, ends) == committed

        second = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                               transactional_id=TXN_ID)
        second.init_transactions()  # fences the first
        first.begin_transaction()
        first.send(TOPIC, b"zombie", partition=0)
        with pytest.raises(ProducerFencedError):
            first.commit_transaction()
        second.begin_transaction()
        second.send(TOPIC, b"after", partition=0)
        second.commit_transaction()
        ends = wait_stable(cluster)
        assert read_committed(cluster, ends) == sorted(committed + [b"after"])
    finally:
        first.close(timeout=5)
        if second is not None:
            second.close(timeout=5)


def committed_offsets(admin):
    return {tp: o.offset for tp, o in admin.list_consumer_group_offsets(GROUP).items()}


def test_offsets_sent_to_a_transaction_count_only_when_it_commits(e2e):
    """send_offsets_to_transaction (AddOffsetsToTxn, TxnOffsetCommit) on real brokers: the
    group's offsets are its committed ones once the transaction commits (the COMMIT
    marker reaches ``__consumer_offsets``, after EndTxn answered), unchanged by an
    aborted one."""
    cluster = start(e2e)
    group = ConsumerGroupMetadata(GROUP, -1, "", None)
    tp = TopicPartition(TOPIC, 1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                             transactional_id=TXN_ID)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, b"copied", partition=1)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(5, "")}, group)
        producer.commit_transaction()
        with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
            deadline = time.monotonic() + BOUND
            while committed_offsets(admin) != {tp: 5}:
                assert time.monotonic() < deadline, committed_offsets(admin)
                time.sleep(0.05)
            producer.begin_transaction()
            producer.send(TOPIC, b"dropped", partition=1)
            producer.send_offsets_to_transaction({tp: OffsetAndMetadata(9, "")}, group)
            producer.abort_transaction()
            # The next transaction starts once every marker of the abort is written.
            producer.begin_transaction()
            producer.send(TOPIC, b"next", partition=1)
            producer.commit_transaction()
            assert committed_offsets(admin) == {tp: 5}
        assert read_committed(cluster, wait_stable(cluster)) == [b"copied", b"next"]
    finally:
        producer.close(timeout=5)


def offsets_after_failover(admin):
    """The group's committed offsets, asked until its new coordinator answers."""
    deadline = time.monotonic() + BOUND
    while True:
        try:
            return committed_offsets(admin)
        except (NotCoordinatorError, CoordinatorLoadInProgressError,
                CoordinatorNotAvailableError):
            assert time.monotonic() < deadline, f"no group coordinator after {BOUND} s"
            time.sleep(0.05)


def test_the_new_group_coordinator_replays_transactional_offsets(e2e):
    """The group coordinator SIGKILLed after a committed, an aborted and an open
    transaction's offsets: the next one loaded the committed offsets only, and the open
    transaction's become committed when it commits."""
    cluster = start(e2e)
    group = ConsumerGroupMetadata(GROUP, -1, "", None)
    tp = TopicPartition(TOPIC, 1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                             transactional_id=TXN_ID)
    try:
        producer.init_transactions()
        for offset, commit in ((5, True), (9, False), (11, None)):
            producer.begin_transaction()
            producer.send_offsets_to_transaction({tp: OffsetAndMetadata(offset, "")}, group)
            if commit:
                producer.commit_transaction()
            elif commit is not None:
                producer.abort_transaction()
        index = partition_for(GROUP, OFFSETS_PARTITIONS)
        image = cluster.wait_for_metadata(lambda i: GROUP_METADATA_TOPIC in i.topics)
        node = image.topics[GROUP_METADATA_TOPIC].partitions[index].leader
        cluster.kill_broker(node)
        cluster.wait_for_metadata(lambda i: i.topics[GROUP_METADATA_TOPIC].partitions[
            index].leader not in (node, -1))
        with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
            assert offsets_after_failover(admin) == {tp: 5}
            producer.commit_transaction()
            deadline = time.monotonic() + BOUND
            while offsets_after_failover(admin) != {tp: 11}:
                assert time.monotonic() < deadline, offsets_after_failover(admin)
                time.sleep(0.05)
    finally:
        producer.close(timeout=5)


def test_close_aborts_an_open_transaction_and_frees_the_transactional_id(e2e):
    """KafkaProducer.close() with a transaction open aborts it (as Java's producer): with a
    transaction timeout of ten minutes, its records are never read by read_committed and
    the partitions are stable at once; the next InitProducerId of the id bumps the epoch
    once (no open transaction to abort first: no CONCURRENT_TRANSACTIONS)."""
    cluster = start(e2e)
    probe = Producer(cluster)
    closing = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                            transactional_id=TXN_ID, transaction_timeout_ms=600_000)
    try:
        probe.find_coordinator()
        producer_id, epoch = probe.init()
        closing.init_transactions()  # epoch + 1
        closing.begin_transaction()
        for p in range(PARTITIONS):
            closing.send(TOPIC, b"kept-%d" % p, partition=p)
        closing.commit_transaction()
        closing.begin_transaction()
        for p in range(PARTITIONS):
            closing.send(TOPIC, b"open-%d" % p, partition=p).get(timeout=BOUND)
        closing.send(TOPIC, b"queued", partition=0)
        assert all(lso < leo for lso, leo in stable_offsets(cluster).values())
        closing.close(timeout=BOUND)
        ends = wait_stable(cluster)  # aborted by close, not by the coordinator's timeout
        assert read_committed(cluster, ends) == sorted(b"kept-%d" % p
                                                       for p in range(PARTITIONS))
        assert probe.init() == (producer_id, epoch + 2)
    finally:
        closing.close(timeout=5)
        probe.close()


def test_a_transactions_markers_do_not_wait_for_a_followers_fetch_max_wait(e2e):
    """The coordinator's broker leads a partition of the transaction: its marker, appended
    when a follower's fetch moves the ``__transaction_state`` high watermark, reaches the
    followers at once (their fetch read again, not parked for ``replica.fetch.wait.max.ms``),
    so the transaction completes and the next one's AddPartitionsToTxn is not refused
    (CONCURRENT_TRANSACTIONS) until that wait runs out."""
    # (The long fetch wait also delays the first write to __transaction_state once, as in
    # Kafka: the followers' fetches parked before the topic existed do not include it.)
    cluster = start(e2e, replica_fetch_wait_max_ms=15_000, replica_lag_time_max_ms=60_000)
    probe = Producer(cluster)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                             transactional_id=TXN_ID, linger_ms=0)
    try:
        node = probe.find_coordinator()
        leaders = {p.leader for p in cluster.metadata().topics[TOPIC].partitions}
        assert node in leaders, (node, leaders)
        producer.init_transactions()
        for n in range(3):
            producer.begin_transaction()
            for p in range(PARTITIONS):  # each within 5 s: well below the fetch max wait
                producer.send(TOPIC, b"t%d-%d" % (n, p), partition=p).get(timeout=5)
            producer.commit_transaction(timeout_ms=5_000)
        ends = wait_stable(cluster)
        assert read_committed(cluster, ends) == sorted(
            b"t%d-%d" % (n, p) for n in range(3) for p in range(PARTITIONS))
    finally:
        producer.close(timeout=5)
        probe.close()
