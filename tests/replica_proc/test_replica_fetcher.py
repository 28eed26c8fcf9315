"""The follower side of replication against a fake leader, step by step in one process.

Broker 2 follows: a real ReplicaManager (logs in tmp_path) and a ReplicaFetcherManager whose
outbound connections wake broker 2's Listener. The leader, broker 1, is a bare Listener the
test serves by hand: it reads each Fetch request and writes the answer the test chooses,
with batches taken from a real leader log (the leader's offsets and epochs stamped). Every
step is a ``poll`` of the manager at a fake monotonic time, so back-offs are checked by
moving the clock, not by waiting.
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import uuid

import pytest
from kio.schema.errors import ErrorCode

from cluster.config.broker import BrokerConfig
from cluster.metadata.model import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.replica_fetcher import (
    EPOCH_VERSION,
    FETCH_VERSION,
    OFFSETS_FOR_LEADER_EPOCH,
    FetchState,
    ReplicaFetcherManager,
)
from replica_proc.replica_manager import ReplicaManager
from segments.log import PartitionLog
from segments.log_config import LogConfig
from shm_ring import Listener
from shm_ring.naming import list_objects
from tests.support.broker import batch
from tests.support.clock import T0, FakeClock
from tests.support.disk_faults import DiskFaults

TOPIC = "t"
MAX_CORRELATION_ID = 2**31 - 1
TOPIC_ID = str(uuid.uuid5(uuid.NAMESPACE_DNS, TOPIC))
LEADER, FOLLOWER = 1, 2
CONFIG = {"replica.fetch.wait.max.ms": "250", "replica.fetch.min.bytes": "7",
          "replica.fetch.response.max.bytes": "123456", "replica.fetch.max.bytes": "65536",
          "replica.fetch.backoff.ms": "100"}
_RSP = protocol.response_module(ApiKey.FETCH, FETCH_VERSION)


def image(version, leader=LEADER, epoch=0, partitions=1, alive=(0, 1, 2, 3), configs=None):
    states = tuple(PartitionState(TOPIC, n, leader, epoch, (LEADER, FOLLOWER, 3), (leader,))
                   for n in range(partitions))
    return MetadataImage(version, "c", 0, {b: BrokerInfo(b, 0, b in alive) for b in range(4)},
                         {TOPIC: TopicInfo(TOPIC, TOPIC_ID, states, dict(configs or {}))})


class Node:
    """Broker 2's ReplicaManager and fetchers, at a fake monotonic time ``now``."""

    def __init__(self, cluster_id, path, listener, epoch_truncation=None):
        config = BrokerConfig(CONFIG)
        self.replicas = ReplicaManager(FOLLOWER, path, config, FakeClock(T0))
        self.clock = FakeClock(100.0)
        self.fetchers = ReplicaFetcherManager(cluster_id, FOLLOWER, self.replicas, config,
                                              listener, self.clock,
                                              epoch_truncation=epoch_truncation)

    def apply(self, new_image):
        self.replicas.apply(new_image)

    def poll(self):
        self.fetchers.poll(self.clock())

    def partition(self, index=0):
        return self.replicas.partition(TOPIC, index)

    def close(self):
        self.fetchers.close()
        self.replicas.close()


class FakeLeader:
    """Broker 1: a Listener served by the test; a real log supplies the batches."""

    def __init__(self, cluster_id, path):
        self.listener = Listener(cluster_id, LEADER)
        self.log = PartitionLog(str(path / "leader-log"), LogConfig.from_dict({}),
                                clock=FakeClock(T0))
        self.conns = []

    def append(self, count, epoch=0):
        self.log.append(bytearray(batch([b"v%d" % n for n in range(count)])), leader_epoch=epoch)

    def bytes_from(self, offset):
        return self.log.read_slice(offset, 1 << 20).tobytes()

    def next_request(self):
        """The next request: ``(correlation id, request)``, or None."""
        self.conns += self.listener.accept_pending()
        for conn in self.conns:
            frame = conn.recv()
            if frame is not None:
                header, request = protocol.decode_request(frame)
                del frame
                conn.release()
                self.pending = conn
                return header.correlation_id, request
        return None

    def answer_epochs(self, correlation_id, *results):
        """Answer an OffsetsForLeaderEpoch; ``results``: (partition, error, epoch, end)."""
        module = protocol.response_module(OFFSETS_FOR_LEADER_EPOCH, EPOCH_VERSION)
        response = module.OffsetForLeaderEpochResponse(
            throttle_time=datetime.timedelta(0), topics=(module.OffsetForLeaderTopicResult(
                topic=TOPIC, partitions=tuple(
                    module.EpochEndOffset(error_code=e, partition=p, leader_epoch=epoch,
                                          end_offset=end) for p, e, epoch, end in results)),))
        assert self.pending.try_send(protocol.encode_response(response, correlation_id))

    def answer(self, correlation_id, *partitions):
        """Answer on the connection of the last request; ``partitions``: PartitionData."""
        response = _RSP.FetchResponse(
            throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
            responses=(_RSP.FetchableTopicResponse(topic=TOPIC, partitions=partitions),))
        assert self.pending.try_send(protocol.encode_response(response, correlation_id))

    def close(self):
        self.log.close()
        self.listener.close()


def data(index=0, error=ErrorCode.none, hw=0, log_start=0, records=None):
    return _RSP.PartitionData(partition_index=index, error_code=error, high_watermark=hw,
                              last_stable_offset=hw, log_start_offset=log_start,
                              aborted_transactions=(), preferred_read_replica=-1,
                              records=records)


@pytest.fixture
def cluster(cluster_id, tmp_path):
    with contextlib.ExitStack() as stack:
        waker = Listener(cluster_id, FOLLOWER)
        stack.callback(waker.close)
        leader = FakeLeader(cluster_id, tmp_path)
        stack.callback(leader.close)
        node = Node(cluster_id, tmp_path / "broker-2", waker)
        stack.callback(node.close)
        yield leader, node, waker


def request_of(leader):
    found = leader.next_request()
    assert found is not None, "the follower sent no Fetch"
    return found


def test_fetch_request_and_append_with_follower_high_watermark(cluster):
    leader, node, waker = cluster
    leader.append(3)
    leader.append(2)
    node.apply(image(1))
    node.poll()
    correlation_id, request = request_of(leader)
    assert (request.replica_id, request.max_wait.total_seconds(), request.min_bytes,
            request.max_bytes) == (FOLLOWER, 0.25, 7, 123456)
    [topic] = request.topics
    [p] = topic.partitions
    assert (topic.topic, p.partition, p.fetch_offset, p.current_leader_epoch,
            p.partition_max_bytes, p.log_start_offset) == (TOPIC, 0, 0, 0, 65536, 0)
    node.poll()
    assert leader.next_request() is None  # one request in flight
    leader.answer(correlation_id, data(hw=3, records=leader.bytes_from(0)))
    assert waker.wait(0)  # the answer is an event of the follower's loop
    node.poll()
    partition = node.partition()
    assert partition.log.log_end_offset == 5
    assert partition.high_watermark == 3  # min(leader's 3, own LEO 5)
    assert partition.log.read_slice(0, 1 << 20).tobytes() == leader.bytes_from(0)
    correlation_id, request = request_of(leader)
    assert request.topics[0].partitions[0].fetch_offset == 5
    leader.append(1)
    leader.answer(correlation_id, data(hw=9, records=leader.bytes_from(5)))
    node.poll()
    assert (partition.log.log_end_offset, partition.high_watermark) == (6, 6)
    correlation_id, _ = request_of(leader)
    leader.answer(correlation_id, data(hw=2))  # a leader's HW behind ours never moves it back
    node.poll()
    assert partition.high_watermark == 6


def test_the_log_start_follows_the_leaders_up_to_the_high_watermark(cluster):
    leader, node, _ = cluster
    for _ in range(3):
        leader.append(2)
    node.apply(image(1))
    node.poll()
    correlation_id, _ = request_of(leader)
    leader.answer(correlation_id, data(hw=4, log_start=5, records=leader.bytes_from(0)))
    node.poll()
    partition = node.partition()
    assert (partition.log.log_start_offset, partition.high_watermark) == (4, 4)
    correlation_id, request = request_of(leader)
    assert request.topics[0].partitions[0].log_start_offset == 4
    leader.answer(correlation_id, data(hw=6, log_start=5))
    node.poll()
    assert partition.log.log_start_offset == 5


@pytest.mark.parametrize("error", [ErrorCode.not_leader_or_follower,
                                   ErrorCode.unknown_topic_or_partition,
                                   ErrorCode.unknown_leader_epoch,
                                   ErrorCode.kafka_storage_error])
def test_errors_of_a_leader_behind_back_off_then_fetch_again(cluster, error):
    leader, node, _ = cluster
    node.apply(image(1))
    node.poll()
    correlation_id, _ = request_of(leader)
    leader.answer(correlation_id, data(error=error))
    node.poll()
    assert leader.next_request() is None
    assert node.fetchers.next_deadline() == pytest.approx(node.clock.now + 0.1)
    node.clock.advance(0.1)
    node.poll()
    request_of(leader)


def test_fenced_epoch_stops_the_partition_until_the_image_moves(cluster):
    leader, node, _ = cluster
    node.apply(image(1))
    node.poll()
    correlation_id, _ = request_of(leader)
    leader.answer(correlation_id, data(error=ErrorCode.fenced_leader_epoch))
    node.poll()
    node.clock.advance(10)
    node.poll()
    assert leader.next_request() is None
    fetcher = node.fetchers.fetcher_of((TOPIC, 0))
    assert fetcher.partitions[(TOPIC, 0)].state is FetchState.FENCED
    node.apply(image(2, epoch=1))
    node.poll()
    _, request = request_of(leader)
    assert request.topics[0].partitions[0].current_leader_epoch == 1


def test_offset_out_of_range_truncates_to_the_leaders_log(cluster):
    leader, node, _ = cluster
    leader.append(5)
    node.apply(image(1))
    node.poll()
    correlation_id, _ = request_of(leader)
    leader.answer(correlation_id, data(hw=0, records=leader.bytes_from(0)))
    node.poll()
    partition = node.partition()
    assert partition.log.log_end_offset == 5
    # the leader's log is shorter than ours (it lost its unacknowledged tail): truncate
    # to its HW
    correlation_id, _ = request_of(leader)
    leader.answer(correlation_id, data(error=ErrorCode.offset_out_of_range, hw=0))
    node.poll()
    assert (partition.log.log_end_offset, partition.high_watermark) == (0, 0)
    # the leader's log starts past our end (it deleted records): restart empty there
    correlation_id, request = request_of(leader)
    assert request.topics[0].partitions[0].fetch_offset == 0
    leader.answer(correlation_id, data(error=ErrorCode.offset_out_of_range, hw=50,
                                       log_start=40))
    node.poll()
    assert (partition.log.log_start_offset, partition.log.log_end_offset,
            partition.high_watermark) == (40, 40, 40)
    _, request = request_of(leader)
    assert request.topics[0].partitions[0].fetch_offset == 40


@pytest.mark.parametrize("damaged", [False, True])
def test_an_intact_follower_never_truncates_below_its_high_watermark(cluster, damaged):
    """A leader whose log ends below what this follower knew acknowledged lost records:
    an intact follower keeps them and asks again later; a damaged one follows."""
    leader, node, _ = cluster
    leader.append(5)
    node.apply(image(1))
    node.poll()
    correlation_id, _ = request_of(leader)
    leader.answer(correlation_id, data(hw=5, records=leader.bytes_from(0)))
    node.poll()
    partition = node.partition()
    partition.damaged = damaged
    assert (partition.log.log_end_offset, partition.high_watermark) == (5, 5)
    correlation_id, _ = request_of(leader)
    leader.answer(correlation_id, data(error=ErrorCode.offset_out_of_range, hw=2))
    node.poll()
    fetch = node.fetchers.fetcher_of((TOPIC, 0)).partitions[(TOPIC, 0)]
    if damaged:  # the batch 0-4 holding offset 2 goes whole
        assert partition.log.log_end_offset == 0
        assert fetch.state is FetchState.FETCHING
    else:
        assert (partition.log.log_end_offset, partition.high_watermark) == (5, 5)
        assert fetch.not_before > node.clock()  # after a back-off: truncate again


def test_a_leader_change_truncates_to_the_high_watermark_before_fetching(cluster):
    leader, node, _ = cluster
    leader.append(2)
    leader.append(2)
    node.apply(image(1))
    node.poll()
    correlation_id, _ = request_of(leader)
    leader.answer(correlation_id, data(hw=2, records=leader.bytes_from(0)))
    node.poll()
    partition = node.partition()
    assert (partition.log.log_end_offset, partition.high_watermark) == (4, 2)
    request_of(leader)  # in flight when the leader changes; its answer is never used
    node.apply(image(2, leader=3, epoch=1))
    node.poll()
    assert partition.log.log_end_offset == 2  # truncated to the HW
    assert node.fetchers.fetcher_of((TOPIC, 0)).leader_id == 3
    assert LEADER not in node.fetchers.fetchers  # its fetcher closed with no partitions


def test_becoming_leader_removes_the_partition_and_closes_the_connection(cluster_id,
                                                                          cluster):
    leader, node, _ = cluster
    node.apply(image(1))
    node.poll()
    request_of(leader)
    [conn] = leader.conns
    names = [n for n in list_objects(cluster_id) if conn.name in n]
    assert names
    node.apply(image(2, leader=FOLLOWER, epoch=1))
    node.poll()
    assert node.fetchers.fetchers == {}
    assert leader.listener.reap() == [conn]
    assert not [n for n in list_objects(cluster_id) if conn.name in n]


def test_a_dead_leader_is_not_fetched_from(cluster):
    leader, node, _ = cluster
    node.apply(image(1, alive=(0, 2, 3)))
    node.poll()
    assert node.fetchers.fetchers == {} and leader.next_request() is None


def test_a_leader_that_closes_is_reconnected_after_the_back_off(cluster_id, cluster):
    leader, node, _ = cluster
    node.apply(image(1))
    node.poll()
    request_of(leader)
    [conn] = leader.conns
    leader.listener.drop(conn)
    leader.conns.clear()
    node.poll()
    fetcher = node.fetchers.fetcher_of((TOPIC, 0))
    assert not fetcher.connected
    node.poll()
    assert leader.next_request() is None
    node.clock.advance(0.1)
    node.poll()
    assert fetcher.connected
    request_of(leader)


def test_the_correlation_id_wraps_and_replication_goes_on_past_int32(cluster):
    """A correlation id is an int32: after 2^31 - 1 requests to a leader (days of fetches)
    the next one wraps to 0 instead of failing to encode, which once stopped replication
    from that leader for good (the fetcher restarted with the same counter)."""
    leader, node, _ = cluster
    leader.append(2)
    node.apply(image(1))
    node.poll()
    correlation_id, _ = request_of(leader)
    fetcher = node.fetchers.fetcher_of((TOPIC, 0))
    fetcher.channel._correlation_id = MAX_CORRELATION_ID - 1  # two fetches before the wrap
    leader.answer(correlation_id, data(hw=0))
    node.poll()
    seen = []
    for _ in range(2):
        correlation_id, _ = request_of(leader)
        seen.append(correlation_id)
        leader.answer(correlation_id, data(hw=0))
        node.poll()
    correlation_id, request = request_of(leader)
    seen.append(correlation_id)
    assert seen == [MAX_CORRELATION_ID, 0, 1]
    leader.answer(correlation_id, data(hw=2, records=leader.bytes_from(0)))
    node.poll()
    assert node.partition().log.log_end_offset == 2


def test_one_request_carries_every_partition_of_the_leader(cluster):
    leader, node, _ = cluster
    node.apply(image(1, partitions=3))
    node.poll()
    _, request = request_of(leader)
    assert sorted(p.partition for p in request.topics[0].partitions) == [0, 1, 2]
    assert len(node.fetchers.fetchers) == 1


def test_a_full_disk_backs_off_and_the_append_is_retried(cluster, monkeypatch, tmp_path):
    leader, node, _ = cluster
    leader.append(2)
    node.apply(image(1))
    node.poll()
    disk = DiskFaults(monkeypatch, tmp_path / "broker-2")
    disk.arm(0, errno.ENOSPC)
    correlation_id, _ = request_of(leader)
    leader.answer(correlation_id, data(hw=2, records=leader.bytes_from(0)))
    node.poll()
    partition = node.partition()
    assert partition.log.log_end_offset == 0 and partition.log.offline is None
    assert leader.next_request() is None
    disk.clear()
    node.clock.advance(0.1)
    node.poll()
    correlation_id, request = request_of(leader)
    assert request.topics[0].partitions[0].fetch_offset == 0
    leader.answer(correlation_id, data(hw=2, records=leader.bytes_from(0)))
    node.poll()
    assert partition.log.log_end_offset == 2


def test_a_failed_fsync_takes_the_log_offline_and_it_is_no_longer_fetched(
        cluster, monkeypatch, tmp_path):
    leader, node, _ = cluster
    leader.append(2)
    node.apply(image(1, configs={"flush.messages": "1"}))  # followers flush every append
    node.poll()
    disk = DiskFaults(monkeypatch, tmp_path / "broker-2")
    disk.arm(0, errno.EIO, kinds=("sync",))
    correlation_id, _ = request_of(leader)
    leader.answer(correlation_id, data(hw=2, records=leader.bytes_from(0)))
    node.poll()
    assert node.replicas.offline(TOPIC, 0) is not None
    assert node.fetchers.fetcher_of((TOPIC, 0)) is None
    node.clock.advance(10)
    node.poll()
    assert leader.next_request() is None
    node.apply(image(2, configs={"flush.messages": "1"}, epoch=1))  # not even then
    node.poll()
    assert node.fetchers.fetcher_of((TOPIC, 0)) is None
    disk.clear()


def test_an_invalid_batch_backs_off_and_keeps_the_log(cluster):
    leader, node, _ = cluster
    leader.append(2)
    node.apply(image(1))
    node.poll()
    correlation_id, _ = request_of(leader)
    corrupt = bytearray(leader.bytes_from(0))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    leader.answer(correlation_id, data(hw=2, records=bytes(corrupt)))
    node.poll()
    assert node.partition().log.log_end_offset == 0
    assert leader.next_request() is None
    node.clock.advance(0.1)
    node.poll()
    request_of(leader)


class ScriptedEpochTruncation:
    """An EpochTruncation whose answers the test sets: ``latest`` is the epoch to ask
    about (None: none known); ``decisions`` maps the leader's (epoch, end offset) to
    (offset, epoch to ask next)."""

    def __init__(self, latest, decisions):
        self.latest = latest
        self.decisions = decisions
        self.asked = []

    def epoch_to_ask(self, partition):
        return self.latest

    def decide(self, partition, leader_epoch, end_offset):
        self.asked.append((leader_epoch, end_offset))
        return self.decisions[(leader_epoch, end_offset)]


def epoch_cluster(cluster_id, tmp_path, stack, truncation):
    waker = Listener(cluster_id, FOLLOWER)
    stack.callback(waker.close)
    leader = FakeLeader(cluster_id, tmp_path)
    stack.callback(leader.close)
    node = Node(cluster_id, tmp_path / "broker-2", waker, truncation)
    stack.callback(node.close)
    return leader, node


def test_truncation_by_epochs_asks_the_leader_then_fetches(cluster_id, tmp_path):
    truncation = ScriptedEpochTruncation(0, {(0, 2): (2, None)})
    with contextlib.ExitStack() as stack:
        leader, node = epoch_cluster(cluster_id, tmp_path, stack, truncation)
        for _ in range(3):
            leader.append(2)  # offsets 0..5 in the follower, as if from an older leader
        node.replicas.apply(image(1, leader=FOLLOWER))
        node.partition().log.append_as_follower(leader.bytes_from(0))
        node.apply(image(2, epoch=1))
        node.poll()
        correlation_id, request = request_of(leader)
        assert (request.__api_key__, request.replica_id) == (OFFSETS_FOR_LEADER_EPOCH,
                                                             FOLLOWER)
        [p] = request.topics[0].partitions
        assert (p.partition, p.current_leader_epoch, p.leader_epoch) == (0, 1, 0)
        node.poll()
        assert leader.next_request() is None  # no Fetch before the truncation
        leader.answer_epochs(correlation_id, (0, ErrorCode.none, 0, 2))
        node.poll()
        assert truncation.asked == [(0, 2)]
        assert node.partition().log.log_end_offset == 2
        _, request = request_of(leader)
        assert request.topics[0].partitions[0].fetch_offset == 2  # now Fetching


def test_truncation_by_epochs_asks_again_about_an_older_epoch(cluster_id, tmp_path):
    truncation = ScriptedEpochTruncation(3, {(1, 4): (4, 1), (1, 3): (3, None)})
    with contextlib.ExitStack() as stack:
        leader, node = epoch_cluster(cluster_id, tmp_path, stack, truncation)
        for _ in range(3):
            leader.append(2)
        node.replicas.apply(image(1, leader=FOLLOWER))
        node.partition().log.append_as_follower(leader.bytes_from(0))
        node.apply(image(2, epoch=5))
        node.poll()
        correlation_id, request = request_of(leader)
        assert request.topics[0].partitions[0].leader_epoch == 3
        leader.answer_epochs(correlation_id, (0, ErrorCode.none, 1, 4))
        node.poll()
        correlation_id, request = request_of(leader)
        assert request.topics[0].partitions[0].leader_epoch == 1  # KIP-279: ask again
        leader.answer_epochs(correlation_id, (0, ErrorCode.none, 1, 3))
        node.poll()
        assert node.partition().log.log_end_offset == 2  # the batch holding 3 went whole
        _, request = request_of(leader)
        assert request.topics[0].partitions[0].fetch_offset == 2


def test_truncation_by_epochs_backs_off_on_an_error_and_falls_back_without_epochs(
        cluster_id, tmp_path):
    truncation = ScriptedEpochTruncation(0, {})
    with contextlib.ExitStack() as stack:
        leader, node = epoch_cluster(cluster_id, tmp_path, stack, truncation)
        node.apply(image(1))
        node.poll()
        correlation_id, _ = request_of(leader)
        leader.answer_epochs(correlation_id, (0, ErrorCode.unknown_leader_epoch, -1, -1))
        node.poll()
        assert leader.next_request() is None
        node.clock.advance(0.1)
        truncation.latest = None  # no epoch known: the high watermark rule
        node.poll()
        correlation_id, request = request_of(leader)
        assert request.__api_key__ == OFFSETS_FOR_LEADER_EPOCH  # it was still asking
        leader.answer_epochs(correlation_id, (0, ErrorCode.fenced_leader_epoch, -1, -1))
        node.poll()
        fetch = node.fetchers.fetcher_of((TOPIC, 0)).partitions[(TOPIC, 0)]
        assert fetch.state is FetchState.FENCED
        node.apply(image(2, epoch=1))
        node.poll()
        _, request = request_of(leader)
        assert request.__api_key__ == ApiKey.FETCH  # latest None: truncated to the HW


