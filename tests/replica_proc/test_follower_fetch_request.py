"""The follower's pre-encoded Fetch: patched frames decode as the request they stand for."""
from __future__ import annotations

import datetime

from cluster.config.broker import BrokerConfig
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.follower_fetch_request import VERSION, FollowerFetchRequest
from replica_proc.replica_fetcher import FetchSettings

CONFIG = {"replica.fetch.wait.max.ms": "250", "replica.fetch.min.bytes": "7",
          "replica.fetch.response.max.bytes": "123456", "replica.fetch.max.bytes": "65536"}
# Two topics interleaved: the request groups partitions by topic, the offsets come in
# the order the fetcher lists its partitions.
PARTITIONS = ((("a", 0), 3), (("bb", 2), 7), (("a", 5), 3), (("bb", 0), 1))


def _decoded(frame):
    header, request = protocol.decode_request(bytes(frame))
    assert (header.request_api_key, header.request_api_version) == (ApiKey.FETCH, VERSION)
    return header, request


def test_frames_carry_each_partitions_offsets_and_the_correlation_id():
    settings = FetchSettings(BrokerConfig(CONFIG), clock=None)
    template = FollowerFetchRequest(2, PARTITIONS, settings, "broker-2-replica-fetcher-1")
    for correlation_id, base in ((1, 0), (2**31 - 1, 1 << 40)):
        offsets = [(base + 10 * n + 1, base + n) for n in range(len(PARTITIONS))]
        header, request = _decoded(template.frame(correlation_id, offsets))
        assert header.correlation_id == correlation_id
        assert header.client_id == "broker-2-replica-fetcher-1"
        assert (request.replica_id, request.max_wait, request.min_bytes, request.max_bytes,
                request.isolation_level, request.session_epoch) == (
            2, datetime.timedelta(milliseconds=250), 7, 123456, 0, -1)
        found = {(t.topic, p.partition): (p.current_leader_epoch, p.fetch_offset,
                                          p.log_start_offset, p.partition_max_bytes)
                 for t in request.topics for p in t.partitions}
        assert found == {key: (epoch, fetch, start, 65536)
                         for (key, epoch), (fetch, start) in zip(PARTITIONS, offsets)}


def test_matches_only_the_same_partitions_epochs_and_order():
    settings = FetchSettings(BrokerConfig(CONFIG), clock=None)
    template = FollowerFetchRequest(2, PARTITIONS, settings, "c")
    assert template.matches(PARTITIONS)
    assert not template.matches(PARTITIONS[:3])
    assert not template.matches(PARTITIONS[1:] + PARTITIONS[:1])
    assert not template.matches(((("a", 0), 4),) + PARTITIONS[1:])
