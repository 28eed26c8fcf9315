"""ListTransactions, DescribeTransactions (replica_proc.transaction_coordinator.admin_handler) and
DescribeProducers (replica_proc.describe_producers_handler) with real frames: each request
is encoded, decoded as the broker decodes it, served by the handler — over a
TransactionCoordinator on a fake clock, or a ReplicaManager holding real partition logs —
and its response frame decoded as a client would. Checks the answers and Kafka's error
codes for each API."""
from __future__ import annotations

import dataclasses

import pytest

from cluster.config import BrokerConfig
from cluster.errors import (
    CoordinatorLoadInProgressError,
    InvalidRequestError,
    InvalidTopicError,
    NotCoordinatorError,
    NotLeaderForPartitionError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)
from cluster.metadata.model import PartitionState
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.describe_producers_handler import DescribeProducersHandler
from replica_proc.replica_manager import ReplicaManager
from replica_proc.transaction_coordinator.admin_handler import TransactionAdminHandler
from segments.record.records import RecordBatchBuilder
from tests.replica_proc.transaction_coordinator.env import TIMEOUT_MS, Env
from tests.support.broker import make_image
from tests.support.clock import T0, FakeClock


class RecordingChannel:
    def __init__(self):
        self.frames = []

    def send(self, frame):
        self.frames.append(bytes(frame))


def serve(handler, request, api_key, version, correlation_id=11):
    """``handler``'s decoded response to ``request``, through real frames."""
    header, decoded = protocol.decode_request(
        protocol.encode_request(request, correlation_id, "admin"))
    channel = RecordingChannel()
    handler(channel, header, decoded)
    [frame] = channel.frames
    got, response = protocol.decode_response(frame, api_key, version)
    assert got == correlation_id
    return response


# -- the transaction coordinator's APIs --------------------------------------------------------

@pytest.fixture
def env():
    return Env()


def list_transactions(env, version=1, **fields):
    m = protocol.request_module(ApiKey.LIST_TRANSACTIONS, version)
    handlers = TransactionAdminHandler(env.coordinator).handlers()
    response = serve(handlers[ApiKey.LIST_TRANSACTIONS], m.ListTransactionsRequest(**fields),
                     ApiKey.LIST_TRANSACTIONS, version)
    return (int(response.error_code), list(response.unknown_state_filters),
            sorted((s.transactional_id, s.producer_id, s.transaction_state)
                   for s in response.transaction_states))


def describe_transactions(env, *ids):
    m = protocol.request_module(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    handlers = TransactionAdminHandler(env.coordinator).handlers()
    response = serve(handlers[ApiKey.DESCRIBE_TRANSACTIONS],
                     m.DescribeTransactionsRequest(transactional_ids=ids),
                     ApiKey.DESCRIBE_TRANSACTIONS, 0)
    return response.transaction_states


@pytest.mark.parametrize("version", [0, 1])
def test_list_transactions_with_kafkas_filters(env, version):
    t = env.ongoing("t", [("a", 0)])
    idle = env.init("idle")
    done = env.ongoing("done", [("a", 1)])
    assert env.end("done", done).error == 0
    env.ack()
    everything = [("done", done.producer_id, "CompleteCommit"),
                  ("idle", idle.producer_id, "Empty"), ("t", t.producer_id, "Ongoing")]
    assert list_transactions(env, version) == (0, [], everything)
    assert list_transactions(env, version, state_filters=("Ongoing", "CompleteCommit")) == (
        0, [], [everything[0], everything[2]])
    assert list_transactions(env, version, state_filters=("Ongoing", "Running")) == (
        0, ["Running"], [everything[2]])
    assert list_transactions(env, version, state_filters=("Running",)) == (0, ["Running"], [])
    assert list_transactions(env, version,
                             producer_id_filters=(idle.producer_id, 123456)) == (
        0, [], [everything[1]])


def test_list_transactions_duration_filter(env):
    env.ongoing("t", [("a", 0)])
    env.clock.now += 10_000
    fresh = env.ongoing("fresh", [("a", 1)])
    # "fresh" began just now, "t" 10 s ago
    assert [row[0] for row in list_transactions(env, duration_filter=5_000)[2]] == ["t"]
    assert len(list_transactions(env, duration_filter=-1)[2]) == 2
    assert fresh.error == 0


def test_list_transactions_while_a_partition_loads(env):
    env.ongoing("t")
    env.coordinator.begin_load(7, 3)
    assert list_transactions(env) == (CoordinatorLoadInProgressError.errno, [], [])


def test_describe_transactions_answers_each_id(env):
    t = env.ongoing("t", [("b", 2), ("a", 1), ("a", 0)])
    started = env.clock()
    idle = env.init("idle")
    described = {s.transactional_id: s for s in describe_transactions(env, "t", "idle",
                                                                          "nobody", "")}
    s = described["t"]
    assert (int(s.error_code), s.transaction_state, s.producer_id, s.producer_epoch) == (
        0, "Ongoing", t.producer_id, t.producer_epoch)
    assert s.transaction_timeout.total_seconds() * 1000 == TIMEOUT_MS
    assert s.transaction_start_time == started
    assert [(d.topic, list(d.partitions)) for d in s.topics] == [("a", [0, 1]), ("b", [2])]
    s = described["idle"]  # no transaction: Kafka's start time -1, which kio cannot read
    assert (int(s.error_code), s.transaction_state, s.producer_id, s.transaction_start_time,
            s.topics) == (0, "Empty", idle.producer_id, -1, ())
    assert int(described["nobody"].error_code) == TransactionalIdNotFoundError.errno
    assert int(described[""].error_code) == InvalidRequestError.errno


def test_describe_transactions_not_here_or_loading(env):
    env.ongoing("t")
    partition = env.coordinator.partition_of("t")
    env.coordinator.unload(partition)
    [s] = describe_transactions(env, "t")
    assert (int(s.error_code), s.transaction_state, s.topics) == (
        NotCoordinatorError.errno, "", ())
    env.coordinator.begin_load(partition, 5)
    [s] = describe_transactions(env, "t")
    assert int(s.error_code) == CoordinatorLoadInProgressError.errno


def test_describe_transactions_while_it_completes(env):
    """Between PrepareCommit and CompleteCommit the answer lists the partitions still
    without a marker (the fake log keeps markers until acknowledged)."""
    t = env.ongoing("t", [("a", 0), ("a", 1)])
    env.end("t", t)
    [s] = describe_transactions(env, "t")
    assert s.transaction_state == "PrepareCommit"
    assert [(d.topic, list(d.partitions)) for d in s.topics] == [("a", [0, 1])]


# -- DescribeProducers --------------------------------------------------------------------------

PID, TXN_PID = 4242, 77


@pytest.fixture
def manager(tmp_path):
    """Broker 0 of a cluster where it hosts t-0 (leader) and t-1 (follower of broker 1),
    and no replica of other-0."""
    config = BrokerConfig({"broker.id": 0}, data_dir=tmp_path)
    replicas = ReplicaManager(0, config["log.dirs"], config, FakeClock(T0))
    image = make_image("unit-cluster", 1, {"t": (2, {}), "other": (1, {}, 1)},
                       brokers=(0, 1))
    image.topics["t"] = dataclasses.replace(image.topics["t"], partitions=(
        PartitionState("t", 0, 0, 0, (0, 1), (0, 1)),
        PartitionState("t", 1, 1, 0, (1, 0), (1, 0))))
    replicas.apply(image)
    yield replicas
    replicas.close()


def producer_batch(producer_id, epoch, sequence, count, transactional=False):
    builder = RecordBatchBuilder(0, 1 << 20, producer_id=producer_id, producer_epoch=epoch,
                                 base_sequence=sequence, is_transactional=transactional)
    for n in range(count):
        builder.append(T0 + n, b"k", b"v%d" % n)
    return bytes(builder.build())


def describe_producers(manager, topics):
    m = protocol.request_module(ApiKey.DESCRIBE_PRODUCERS, 0)
    response = serve(DescribeProducersHandler(manager), m.DescribeProducersRequest(
        topics=tuple(m.TopicRequest(name=name, partition_indexes=tuple(indexes))
                     for name, indexes in topics.items())), ApiKey.DESCRIBE_PRODUCERS, 0)
    return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}


def test_describe_producers_reads_the_producer_state(manager):
    leader = manager.leader("t", 0)
    leader.append_as_leader(producer_batch(PID, 3, 0, 4), 1)
    leader.append_as_leader(producer_batch(PID, 3, 4, 2), 1)
    leader.append_as_leader(producer_batch(TXN_PID, 0, 0, 1, transactional=True), 1)
    [p] = describe_producers(manager, {"t": [0]}).values()
    assert (int(p.error_code), p.error_message) == (0, None)
    states = [(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
               s.coordinator_epoch, s.current_txn_start_offset) for s in p.active_producers]
    assert states == [(TXN_PID, 0, 0, T0, -1, 6), (PID, 3, 5, T0 + 1, -1, -1)]


def test_describe_producers_errors(manager):
    answers = describe_producers(manager, {"t": [1, 2], "other": [0], "missing": [0],
                                           "bad/name": [0]})
    # t-1 has a (follower) replica here: Kafka answers from any replica
    assert (int(answers[("t", 1)].error_code), answers[("t", 1)].active_producers) == (0, ())
    codes = {key: int(p.error_code) for key, p in answers.items() if key != ("t", 1)}
    assert codes == {("t", 2): UnknownTopicOrPartitionError.errno,
                     ("other", 0): NotLeaderForPartitionError.errno,
                     ("missing", 0): UnknownTopicOrPartitionError.errno,
                     ("bad/name", 0): InvalidTopicError.errno}
    assert "missing" in answers[("missing", 0)].error_message
    assert "bad/name" in answers[("bad/name", 0)].error_message
