"""OffsetsForLeaderEpoch (replica_proc.offsets_for_leader_epoch_handler) with real frames: each
request is encoded, decoded as the broker decodes it, served by the handler over a
ReplicaManager on a fake clock, and its response frame decoded as a client would. Checks
LeaderEpochFileCache.endOffsetFor's answers from the leader's epoch cache and the per-partition
errors (unknown partition, not leader, fenced / unknown current epoch), for v2 and v3. One test asks
a broker process."""
from __future__ import annotations

import dataclasses

import pytest

from cluster.config import BrokerConfig
from cluster.metadata.model import PartitionState
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.offsets_for_leader_epoch_handler import OffsetsForLeaderEpochHandler
from replica_proc.replica_manager import ReplicaManager
from tests.support.broker import batch, make_image, offsets_for_leader_epoch_request
from tests.support.clock import T0, FakeClock

CLUSTER = "unit-cluster"
NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 0, 3, 6
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 74, 75


class RecordingChannel:
    """What the handler sends, kept as frames."""

    def __init__(self):
        self.frames = []

    def send(self, frame):
        self.frames.append(bytes(frame))


@pytest.fixture
def manager(tmp_path):
    config = BrokerConfig({"broker.id": 0}, data_dir=tmp_path)
    replicas = ReplicaManager(0, config["log.dirs"], config, FakeClock(T0))
    yield replicas
    replicas.close()


def with_epoch(image, topic, leader, epoch, replicas):
    """``image`` with every partition of ``topic`` led by ``leader`` in ``epoch``."""
    info = image.topics[topic]
    image.topics[topic] = dataclasses.replace(info, partitions=tuple(
        PartitionState(topic, n, leader, epoch, replicas, replicas)
        for n in range(len(info.partitions))))
    return image


def publish(manager, version, epoch, leader=0):
    image = make_image(CLUSTER, version, {"t": (2, {}), "other": (1, {}, 1)},
                       brokers=(0, 1))
    manager.apply(with_epoch(image, "t", leader, epoch, (leader, 1 - leader)))


def ask(manager, partitions, version=3, topic="t", replica_id=-1):
    """The response's EpochEndOffsets as (error, partition, epoch, end offset)."""
    request = offsets_for_leader_epoch_request(topic, partitions, version, replica_id)
    header, decoded = protocol.decode_request(protocol.encode_request(request, 7, "test"))
    channel = RecordingChannel()
    OffsetsForLeaderEpochHandler(manager)(channel, header, decoded)
    [frame] = channel.frames
    correlation_id, response = protocol.decode_response(
        frame, ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    assert correlation_id == 7
    [result] = response.topics
    assert result.topic == topic
    return [(int(p.error_code), p.partition, p.leader_epoch, p.end_offset)
            for p in result.partitions]


@pytest.fixture
def epochs(manager):
    """Partition t-0 led here through epochs 1 (offsets 0-9), 3 (10-24) and 4 (25-29)."""
    for version, epoch, count in ((1, 1, 10), (2, 3, 15), (3, 4, 5)):
        publish(manager, version, epoch)
        manager.leader("t", 0).append_as_leader(batch([b"v"] * count), 1)
    assert manager.leader("t", 0).log.leader_epoch_cache.entries() == [
        (1, 0), (3, 10), (4, 25)]
    return manager


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("requested, expected", [
    (4, (4, 30)),  # the latest epoch: the log end offset
    (3, (3, 25)),
    (2, (1, 10)),  # not in the cache: the largest epoch below, where the next starts
    (1, (1, 10)),
    (0, (0, 0)),  # below every entry: the first start offset
    (5, (-1, -1)),  # newer than any
    (-1, (-1, -1)),
])
def test_the_leader_answers_from_its_epoch_cache(epochs, version, requested, expected):
    assert ask(epochs, [(0, -1, requested)], version) == [(NONE, 0, *expected)]
    assert ask(epochs, [(0, 4, requested)], version) == [(NONE, 0, *expected)]


def test_a_new_leader_answers_its_epoch_before_it_appends(epochs):
    publish(epochs, 4, 6)
    assert epochs.leader("t", 0).log.leader_epoch_cache.entries()[-1] == (6, 30)
    assert ask(epochs, [(0, 6, 6), (0, 6, 4)]) == [(NONE, 0, 6, 30), (NONE, 0, 4, 30)]


def test_an_empty_partition_knows_only_its_latest_epoch(epochs):
    """t-1 was led in epochs 1, 3 and 4 without an append: each started at offset 0."""
    assert epochs.leader("t", 1).log.leader_epoch_cache.entries() == [(4, 0)]
    assert ask(epochs, [(1, -1, 4)]) == [(NONE, 1, 4, 0)]
    assert ask(epochs, [(1, -1, 3)]) == [(NONE, 1, 3, 0)]


@pytest.mark.parametrize("current, code", [(3, FENCED_LEADER_EPOCH),
                                           (5, UNKNOWN_LEADER_EPOCH)])
def test_a_stale_or_future_current_leader_epoch_is_refused(epochs, current, code):
    assert ask(epochs, [(0, current, 4), (1, 4, 4)]) == [
        (code, 0, -1, -1), (NONE, 1, 4, 0)]


@pytest.mark.parametrize("replica_id", [-1, 1])
def test_only_the_leader_answers_followers_and_consumers(epochs, replica_id):
    publish(epochs, 4, 5, leader=1)  # broker 1 leads now; this broker follows
    assert ask(epochs, [(0, 5, 4)], replica_id=replica_id) == [
        (NOT_LEADER_OR_FOLLOWER, 0, -1, -1)]
    assert ask(epochs, [(0, 4, 4)], replica_id=replica_id) == [
        (FENCED_LEADER_EPOCH, 0, -1, -1)]  # the epoch is checked first, as Kafka


def test_unknown_and_unhosted_partitions(epochs):
    assert ask(epochs, [(7, -1, 1)]) == [(UNKNOWN_TOPIC_OR_PARTITION, 7, -1, -1)]
    assert ask(epochs, [(0, -1, 1)], topic="missing") == [
        (UNKNOWN_TOPIC_OR_PARTITION, 0, -1, -1)]
    assert ask(epochs, [(0, -1, 0)], topic="other") == [(NOT_LEADER_OR_FOLLOWER, 0, -1, -1)]
