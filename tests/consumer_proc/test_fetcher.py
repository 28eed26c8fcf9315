"""The fetcher's requests, response handling and positions, against a fake client: the
requests it writes are inspected, the responses are kio FetchResponse objects the test
builds, completed through the futures the fake client handed out."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from kio.schema.errors import ErrorCode

from cluster.config import ConsumerConfig
from cluster.errors import (
    KafkaConnectionError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    UnknownError,
)
from cluster.protocol import frames
from consumer_proc.fetch_metrics import GROUP, FetchMetrics
from consumer_proc.fetcher import MAX_BUFFERED_RESPONSES, Fetcher
from consumer_proc.subscription_state import EARLIEST, SubscriptionState
from segments.errors import CorruptRecordError
from segments.record import batch_descriptor as d
from segments.record.batch_header import BatchHeader
from tests.consumer_proc.fake_client import (
    A0,
    A1,
    B0,
    FakeClient,
    batch,
    fetch_response as response,
)


def setup(leaders=None, reset="latest", **config):
    leaders = leaders or {A0: 0, A1: 1, B0: 0}
    client = FakeClient(leaders)
    subscriptions = SubscriptionState(reset)
    subscriptions.assign_from_user(list(leaders))
    for tp in leaders:
        subscriptions.seek(tp, 0)
    metrics = FetchMetrics()
    fetcher = Fetcher(client, subscriptions,
                      ConsumerConfig(bootstrap_servers="unused", **config), metrics)
    return client, subscriptions, fetcher, metrics


def offsets(drained):
    return {tp: [r.offset for r in records] for tp, records in drained.items()}


def test_one_fetch_per_leader_with_every_fetchable_partition():
    client, subscriptions, fetcher, _ = setup(max_partition_fetch_bytes=4096,
                                              fetch_max_bytes=9999, fetch_min_bytes=7)
    subscriptions.seek(A1, 40)
    assert fetcher.send_fetches() == 2
    (node0, request0, _), (node1, request1, _) = sorted(client.sent, key=lambda s: s[0])
    assert (node0, node1) == (0, 1)
    assert [(t.topic, [(p.partition, p.fetch_offset, p.current_leader_epoch,
                        p.partition_max_bytes) for p in t.partitions])
            for t in request0.topics] == [("a", [(0, 0, 3, 4096)]), ("b", [(0, 0, 3, 4096)])]
    assert [p.fetch_offset for t in request1.topics for p in t.partitions] == [40]
    assert (request0.max_bytes, request0.min_bytes, request0.replica_id) == (9999, 7, -1)
    assert fetcher.send_fetches() == 0  # both brokers have one in flight
    assert fetcher.in_flight()


def test_records_come_in_order_and_the_next_fetch_starts_where_the_buffer_ends():
    client, subscriptions, fetcher, metrics = setup({A0: 0})
    fetcher.send_fetches()
    ((_, asked, future),) = client.take()
    future.success(response((A0, 0, 100, batch(0, 10) + batch(10, 10))))
    assert not fetcher.in_flight()
    assert offsets(fetcher.fetched_records(5)) == {A0: [0, 1, 2, 3, 4]}
    assert subscriptions.position(A0) == 5
    fetcher.send_fetches()  # pipelined: from the end of what is buffered
    ((_, asked, future),) = client.take()
    assert asked == {A0: 20}
    future.success(response((A0, 0, 100, batch(20, 5))))
    assert offsets(fetcher.fetched_records(100)) == {A0: list(range(5, 25))}
    assert subscriptions.position(A0) == 25
    assert subscriptions.assignment[A0].highwater == 100
    snapshot = metrics.snapshot()[GROUP]
    assert (snapshot["fetch-total"], snapshot["records-consumed-total"]) == (2, 25)
    assert snapshot["records-lag-max"] == 95  # high watermark 100, position 5


def test_at_most_max_buffered_responses_per_partition():
    client, _, fetcher, _ = setup({A0: 0})
    first = 0
    for _ in range(MAX_BUFFERED_RESPONSES):
        assert fetcher.send_fetches() == 1
        ((_, asked, future),) = client.take()
        assert asked == {A0: first}
        future.success(response((A0, 0, 1000, batch(first, 3))))
        first += 3
    assert fetcher.send_fetches() == 0
    fetcher.fetched_records(4)  # the first response is used up: room for one more
    assert fetcher.send_fetches() == 1


def test_a_response_for_an_offset_no_longer_wanted_is_ignored():
    client, subscriptions, fetcher, _ = setup({A0: 0})
    fetcher.send_fetches()
    ((_, _, future),) = client.take()
    subscriptions.seek(A0, 500)
    future.success(response((A0, 0, 1000, batch(0, 3))))
    assert fetcher.fetched_records(10) == {}
    fetcher.send_fetches()
    ((_, asked, future),) = client.take()
    assert asked == {A0: 500}
    future.success(response((A0, 0, 1000, batch(500, 3))))
    assert offsets(fetcher.fetched_records(10)) == {A0: [500, 501, 502]}


def test_a_seek_drops_buffered_records():
    client, subscriptions, fetcher, _ = setup({A0: 0})
    fetcher.send_fetches()
    client.take()[0][2].success(response((A0, 0, 1000, batch(0, 10))))
    assert offsets(fetcher.fetched_records(3)) == {A0: [0, 1, 2]}
    subscriptions.seek(A0, 7)
    assert fetcher.fetched_records(10) == {}
    assert not fetcher.has_buffered()
    fetcher.send_fetches()
    assert client.take()[0][1] == {A0: 7}


def test_drains_without_position_updates_keep_the_pipeline():
    """The iterator drains with update_offsets=False and moves the position record by
    record; the fetcher keeps fetching ahead meanwhile, and drops the buffer only when the
    caller stopped inside it."""
    client, subscriptions, fetcher, _ = setup({A0: 0})
    fetcher.send_fetches()
    client.take()[0][2].success(response((A0, 0, 1000, batch(0, 10))))
    drained = fetcher.fetched_records(4, update_offsets=False)
    assert offsets(drained) == {A0: [0, 1, 2, 3]} and subscriptions.position(A0) == 0
    fetcher.send_fetches()
    ((_, asked, future),) = client.take()
    assert asked == {A0: 10}  # buffer kept, fetched ahead
    subscriptions.seek(A0, 4)  # the caller handed out all four
    future.success(response((A0, 0, 1000, batch(10, 2))))
    assert offsets(fetcher.fetched_records(100, update_offsets=False)) == {
        A0: list(range(4, 12))}
    subscriptions.seek(A0, 6)  # the caller stopped after offset 5
    assert fetcher.fetched_records(100) == {}
    fetcher.send_fetches()
    assert client.take()[0][1] == {A0: 6}


def test_out_of_range_resets_by_policy():
    client, subscriptions, fetcher, _ = setup({A0: 0}, reset="earliest")
    subscriptions.seek(A0, 999)
    fetcher.send_fetches()
    client.take()[0][2].success(response((A0, OffsetOutOfRangeError.errno, 50, None)))
    state = subscriptions.assignment[A0]
    assert state.position is None and state.reset_strategy == EARLIEST


def test_out_of_range_without_policy_raises_from_the_next_drain():
    client, subscriptions, fetcher, _ = setup({A0: 0}, reset="none")
    subscriptions.seek(A0, 999)
    fetcher.send_fetches()
    client.take()[0][2].success(response((A0, OffsetOutOfRangeError.errno, 50, None)))
    with pytest.raises(OffsetOutOfRangeError, match="fetch offset 999 of a-0 .*'none'"):
        fetcher.fetched_records(10)
    assert subscriptions.position(A0) == 999


def test_an_error_of_a_fetch_before_a_seek_is_dropped():
    """Two fetches at 999 fail out of range (the second went out before the first error
    was raised); the caller seeks to 50 on the first error: the second is stale."""
    client, subscriptions, fetcher, _ = setup({A0: 0}, reset="none")
    subscriptions.seek(A0, 999)
    fetcher.send_fetches()
    client.take()[0][2].success(response((A0, OffsetOutOfRangeError.errno, 50, None)))
    fetcher.send_fetches()
    client.take()[0][2].success(response((A0, OffsetOutOfRangeError.errno, 50, None)))
    with pytest.raises(OffsetOutOfRangeError, match="fetch offset 999"):
        fetcher.fetched_records(10)
    subscriptions.seek(A0, 50)
    assert fetcher.fetched_records(10) == {}
    fetcher.send_fetches()
    assert [offsets for _, offsets, _ in client.take()] == [{A0: 50}]


@pytest.mark.parametrize("code", [6, 3, 5, 74, 56])  # not leader, unknown, no leader,
def test_invalid_metadata_errors_refresh_the_metadata(code):  # fenced epoch, storage
    client, _, fetcher, _ = setup({A0: 0})
    assert not client.cluster.need_update
    fetcher.send_fetches()
    client.take()[0][2].success(response((A0, code, -1, None)))
    assert client.cluster.need_update
    assert fetcher.fetched_records(10) == {}
    assert fetcher.send_fetches() == 1  # fetched again (from whoever leads it now)


def test_unknown_leader_asks_for_metadata_and_sends_nothing():
    client, _, fetcher, _ = setup({A0: -1})
    assert fetcher.send_fetches() == 0
    assert client.cluster.need_update


def test_message_too_large_and_fetches_without_a_whole_batch():
    client, _, fetcher, _ = setup({A0: 0, A1: 1})
    fetcher.send_fetches()
    (_, _, f0), (_, _, f1) = sorted(client.take(), key=lambda s: s[0])
    f0.success(response((A0, RecordTooLargeError.errno, 10, None)))
    f1.success(response((A1, 0, 10, batch(0, 5)[:40])))
    with pytest.raises(RecordTooLargeError, match="fetch of a-0 at offset 0"):
        fetcher.fetched_records(10)
    with pytest.raises(RecordTooLargeError, match="a-1 at offset 0: the 40 bytes"):
        fetcher.fetched_records(10)


def test_non_retriable_partition_errors_are_raised():
    client, _, fetcher, _ = setup({A0: 0})
    fetcher.send_fetches()
    code = TopicAuthorizationFailedError.errno
    client.take()[0][2].success(response((A0, code, -1, None)))
    with pytest.raises(TopicAuthorizationFailedError, match="fetch of a-0 at offset 0"):
        fetcher.fetched_records(10)


def test_an_error_for_the_whole_response():
    client, _, fetcher, _ = setup({A0: 0})
    fetcher.send_fetches()
    failed = response((A0, 0, 9, batch(0, 3)))
    client.take()[0][2].success(dataclasses.replace(failed, error_code=ErrorCode(-1)))
    with pytest.raises(UnknownError, match="fetch from broker 0"):
        fetcher.fetched_records(10)
    fetcher.send_fetches()
    client.take()[0][2].success(dataclasses.replace(failed, error_code=ErrorCode(6)))
    assert client.cluster.need_update and fetcher.fetched_records(10) == {}


def test_a_failed_fetch_is_counted_and_retried():
    client, _, fetcher, metrics = setup({A0: 0})
    fetcher.send_fetches()
    client.take()[0][2].failure(KafkaConnectionError("broker 0: died"))
    assert metrics.snapshot()[GROUP]["fetch-error-total"] == 1
    assert not fetcher.in_flight() and client.cluster.need_update
    client.delays[0] = 0.5  # reconnect backoff: not tried meanwhile
    assert fetcher.send_fetches() == 0
    client.delays[0] = 0.0
    assert fetcher.send_fetches() == 1


def test_paused_partitions_are_not_fetched_nor_returned():
    client, subscriptions, fetcher, _ = setup({A0: 0, B0: 0})
    fetcher.send_fetches()
    client.take()[0][2].success(response((A0, 0, 9, batch(0, 3)), (B0, 0, 9, batch(0, 2))))
    subscriptions.pause(A0)
    assert offsets(fetcher.fetched_records(10)) == {B0: [0, 1]}
    fetcher.send_fetches()
    assert client.take()[0][1] == {B0: 2}
    subscriptions.resume(A0)
    assert offsets(fetcher.fetched_records(10)) == {A0: [0, 1, 2]}


def test_an_error_after_some_records_is_raised_by_the_next_drain():
    client, _, fetcher, _ = setup({A0: 0, B0: 0})
    fetcher.send_fetches()
    bad = bytearray(batch(0, 2))
    d.UINT32.pack_into(bad, d.CRC_OFFSET, BatchHeader(bad).crc ^ 1)
    client.take()[0][2].success(response((A0, 0, 9, batch(0, 3)), (B0, 0, 9, bytes(bad))))
    assert offsets(fetcher.fetched_records(10)) == {A0: [0, 1, 2]}
    with pytest.raises(CorruptRecordError, match="b-0: batch at offset 0"):
        fetcher.fetched_records(10)


def test_columns_advance_positions_like_records():
    client, subscriptions, fetcher, _ = setup({A0: 0})
    fetcher.send_fetches()
    client.take()[0][2].success(response((A0, 0, 9, batch(0, 6))))
    runs = fetcher.fetched_columns(4)[A0]
    assert [o for c in runs for o in c.offsets.tolist()] == [0, 1, 2, 3]
    assert subscriptions.position(A0) == 4
    assert [v for c in fetcher.fetched_columns(100)[A0] for v in c.values()] == [
        b"v4", b"v5"]


#: A fresh interpreter makes a fetcher, then decodes the Fetch response frame of argv[1]
#: (hex): the modules that decoding imported.
FIRST_RESPONSE = """
import sys
from types import SimpleNamespace
from cluster.config import ConsumerConfig
from cluster.protocol import frames
from cluster.protocol.frames import ApiKey
from consumer_proc.fetch_metrics import FetchMetrics
from consumer_proc.fetcher import Fetcher
from consumer_proc.subscription_state import SubscriptionState
Fetcher(SimpleNamespace(client_id="c"), SubscriptionState("latest"),
        ConsumerConfig(bootstrap_servers="unused"), FetchMetrics())
loaded = set(sys.modules)
correlation_id, _ = frames.decode_response(bytes.fromhex(sys.argv[1]), ApiKey.FETCH, 11)
assert correlation_id == 7, correlation_id
print(sorted(set(sys.modules) - loaded))
"""


@pytest.mark.multiprocess
def test_a_new_fetcher_has_the_fetch_codecs_so_its_first_response_imports_nothing():
    """kio imports an API's schema modules at their first use (10-15 ms for Fetch): the
    fetcher, which writes its requests without kio (FetchFrame), loads the Fetch codecs when
    it is made, so its first response, with records flowing, does not pay for them (it did:
    workload 9's worst latencies, perf/README.md "The consumer's cost per fetch")."""
    frame = frames.encode_response(response((A0, 0, 5, batch(0, 5))), 7)
    out = subprocess.run([sys.executable, "-c", FIRST_RESPONSE, bytes(frame).hex()],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[]"
