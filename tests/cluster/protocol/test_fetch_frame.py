"""FetchFrame: the kept-encoded Fetch frames of a consumer and of a follower are the bytes
kio's FetchRequest encodes to, at every version it writes, as offsets, epochs, log start
offsets and partition sets change."""
from __future__ import annotations

import datetime

import pytest

from cluster.protocol import frames as protocol
from cluster.protocol.fetch_frame import VERSIONS, FetchFrame
from cluster.protocol.frames import ApiKey
from cluster.structs import TopicPartition

FIXED = dict(max_wait_ms=500, min_bytes=1, max_bytes=52_428_800, isolation_level=1,
             partition_max_bytes=1 << 20)
A0, A3, B1 = TopicPartition("app-logs", 0), TopicPartition("app-logs", 3), \
    TopicPartition("journ\u00e9es", 1)


def kio_frame(version, client_id, partitions, correlation_id, replica_id=-1):
    """The frame ``frames.encode_request`` writes for the equivalent kio FetchRequest."""
    m = protocol.request_module(ApiKey.FETCH, version)
    topics = {}
    for tp, (offset, epoch, log_start) in partitions.items():
        fields = dict(partition=tp.partition, fetch_offset=offset,
                      partition_max_bytes=FIXED["partition_max_bytes"])
        if version >= 5:
            fields["log_start_offset"] = log_start
        if version >= 9:
            fields["current_leader_epoch"] = epoch
        topics.setdefault(tp.topic, []).append(m.FetchPartition(**fields))
    extra = {}
    if version >= 7:
        extra.update(session_id=0, session_epoch=-1, forgotten_topics_data=())
    if version >= 11:
        extra["rack_id"] = ""
    request = m.FetchRequest(
        replica_id=replica_id, max_wait=datetime.timedelta(milliseconds=FIXED["max_wait_ms"]),
        min_bytes=FIXED["min_bytes"], max_bytes=FIXED["max_bytes"],
        isolation_level=FIXED["isolation_level"], **extra,
        topics=tuple(m.FetchTopic(topic=name, partitions=tuple(parts))
                     for name, parts in topics.items()))
    return bytes(protocol.encode_request(request, correlation_id, client_id))


def written(fetch_frame, node, partitions, correlation_id):
    frame = fetch_frame.frame(node, partitions)
    out = bytearray(len(frame) + 7)  # a ring slot longer than the frame
    with memoryview(out) as view:
        FetchFrame.write(frame, view, correlation_id)
    return bytes(out[:len(frame)])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id", ["consumer-1", None])
def test_frames_equal_kio_as_fetches_change(version, client_id):
    fetch_frame = FetchFrame(version, client_id, **FIXED)
    fetches = [
        {A0: (0, 3, -1)},
        {A0: (123_456_789_012, 4, -1)},  # the same partitions: the kept frame
        {A0: (7, 4, -1), B1: (2**40, -1, -1), A3: (9, 0, -1)},  # topics interleaved
        {A0: (8, 4, -1), B1: (2**40 + 1, -1, -1), A3: (10, 0, -1)},
        {B1: (5, 2, -1)},
        {},
    ]
    for correlation_id, partitions in enumerate(fetches, start=2**31 - 3):
        correlation_id &= 2**31 - 1
        assert written(fetch_frame, 0, partitions, correlation_id) == kio_frame(
            version, client_id, partitions, correlation_id)


def test_one_frame_kept_per_broker():
    fetch_frame = FetchFrame(11, "c", **FIXED)
    on_0, on_1 = {A0: (5, 1, -1)}, {B1: (6, 1, -1), A3: (1, 1, -1)}
    for _ in range(2):
        assert written(fetch_frame, 0, on_0, 1) == kio_frame(11, "c", on_0, 1)
        assert written(fetch_frame, 1, on_1, 2) == kio_frame(11, "c", on_1, 2)


@pytest.mark.parametrize("version", [3, 12])
def test_versions_it_does_not_write_are_refused(version):
    with pytest.raises(ValueError, match=f"Fetch v{version}"):
        FetchFrame(version, "c", **FIXED)


def test_a_followers_frames_carry_its_replica_id_and_log_start_offsets():
    """A follower (replica id = its broker id) sends its log start offset per partition,
    and the frame it patches in place (``with_correlation_id``) is kio's, fetch after
    fetch; an epoch change needs no new frame."""
    fetch_frame = FetchFrame(11, "broker-2-replica-fetcher-1", replica_id=2, **FIXED)
    fetches = [
        {A0: (10, 3, 0), B1: (7, 1, 5), A3: (0, 3, 0)},
        {A0: (11, 3, 4), B1: (2**40, 1, 2**39), A3: (1, 3, 0)},
        {A0: (12, 4, 4), B1: (2**40 + 1, 1, 2**39), A3: (2, 4, 1)},  # a new leader epoch
    ]
    for correlation_id, partitions in enumerate(fetches, start=1):
        frame = fetch_frame.frame(1, partitions)
        assert FetchFrame.with_correlation_id(frame, correlation_id) is frame
        assert bytes(frame) == kio_frame(11, "broker-2-replica-fetcher-1", partitions,
                                         correlation_id, replica_id=2)
