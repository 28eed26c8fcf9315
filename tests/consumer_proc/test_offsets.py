"""The consumer's ListOffsets use (offset_lookup), its subscription state and its metrics,
against the fake client and a fake clock."""
from __future__ import annotations

import pytest

from cluster.config import ConsumerConfig
from cluster.errors import (
    IllegalStateError,
    InvalidTopicError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    UnsupportedForMessageFormatError,
)
from cluster.structs import TopicPartition
from consumer_proc.fetch_metrics import GROUP, FetchMetrics
from consumer_proc.fetcher import Fetcher
from consumer_proc.offset_lookup import OffsetLookup
from consumer_proc.subscription_state import EARLIEST, LATEST, SubscriptionState
from tests.consumer_proc.fake_client import A0, A1, B0, FakeClient, list_offsets_response
from tests.support.clock import FakeClock

NOT_LEADER = 6


def setup(leaders=None, reset="earliest"):
    leaders = leaders or {A0: 0, A1: 1, B0: 0}
    clock = FakeClock(100.0)
    client = FakeClient(leaders, clock)
    subscriptions = SubscriptionState(reset)
    subscriptions.assign_from_user(list(leaders))
    config = ConsumerConfig(bootstrap_servers="unused", retry_backoff_ms=100,
                            request_timeout_ms=30000)
    fetcher = Fetcher(client, subscriptions, config, FetchMetrics(clock=clock), clock=clock)
    return client, subscriptions, OffsetLookup(client, subscriptions, config, fetcher.leader,
                                               clock)


def sent(client):
    """The requests sent since the last call: [(node, request, future)]."""
    out, client.sent = client.sent, []
    return out


def asked(request):
    return {TopicPartition(t.name, p.partition_index): (p.timestamp, p.current_leader_epoch)
            for t in request.topics for p in t.partitions}


def test_resets_ask_each_leader_once_and_seek_on_the_answer():
    client, subscriptions, lookup = setup()
    subscriptions.reset_missing_positions()
    subscriptions.request_offset_reset(A1, LATEST)
    lookup.reset_offsets_if_needed()
    sent = {node: asked(request) for node, request, _ in client.sent}
    assert sent == {0: {A0: (EARLIEST, 3), B0: (EARLIEST, 3)}, 1: {A1: (LATEST, 3)}}
    lookup.reset_offsets_if_needed()
    assert len(client.sent) == 2  # pending: not asked again
    futures = {node: future for node, _, future in client.sent}
    subscriptions.seek(B0, 42)  # a seek meanwhile wins over the reset's answer
    futures[0].success(list_offsets_response((A0, 0, -1, 7), (B0, 0, -1, 9)))
    futures[1].success(list_offsets_response((A1, 0, -1, 70)))
    assert {tp: subscriptions.position(tp) for tp in (A0, A1, B0)} == {A0: 7, A1: 70, B0: 42}


def test_resets_retry_after_backoff_when_the_leader_is_unknown_or_wrong():
    client, subscriptions, lookup = setup({A0: -1, A1: 1})
    subscriptions.reset_missing_positions()
    lookup.reset_offsets_if_needed()
    assert [asked(r) for _, r, _ in client.sent] == [{A1: (EARLIEST, 3)}]
    assert client.cluster.need_update
    sent(client)[0][2].success(list_offsets_response((A1, NOT_LEADER, -1, -1)))
    client.set_leaders({A0: 0, A1: 0})
    lookup.reset_offsets_if_needed()
    assert client.sent == []  # both wait out the backoff
    client.clock.now += 0.1
    lookup.reset_offsets_if_needed()
    assert [asked(r) for _, r, _ in client.sent] == [{A0: (EARLIEST, 3), A1: (EARLIEST, 3)}]
    sent(client)[0][2].failure(KafkaConnectionError("broker 0 died"))
    client.clock.now += 0.1
    lookup.reset_offsets_if_needed()
    assert len(client.sent) == 1


def test_a_reset_error_that_cannot_be_retried_is_raised_once():
    client, subscriptions, lookup = setup({A0: 0})
    subscriptions.reset_missing_positions()
    lookup.reset_offsets_if_needed()
    code = UnsupportedForMessageFormatError.errno
    sent(client)[0][2].success(list_offsets_response((A0, code, -1, -1)))
    with pytest.raises(UnsupportedForMessageFormatError, match="a-0 at timestamp -2"):
        lookup.reset_offsets_if_needed()
    lookup.reset_offsets_if_needed()


def test_wait_for_resets_drives_them_to_a_position():
    client, subscriptions, lookup = setup({A0: 0})
    client.responder = lambda node, request, future: future.success(
        list_offsets_response((A0, 0, -1, 5)))
    subscriptions.reset_missing_positions()
    lookup.wait_for_resets([A0], timeout=1.0)
    assert subscriptions.position(A0) == 5


def test_lookups_by_time_retry_then_answer():
    client, _, lookup = setup()
    answers = iter([
        lambda tp: (tp, NOT_LEADER, -1, -1) if tp == A1 else (tp, 0, 1234, 10),
        lambda tp: (tp, 0, -1, -1),  # A1 on the retry: no record at or after the time
    ])
    current = {}

    def responder(node, request, future):
        answer = current.setdefault(node, next(answers))
        future.success(list_offsets_response(*(answer(tp) for tp in asked(request))))
    client.responder = responder
    found = lookup.offsets_by_times({A0: 1000, A1: 1000, B0: 1000}, timeout=5.0)
    assert found == {A0: (10, 1234, 3), B0: (10, 1234, 3), A1: None}


def test_lookups_time_out_naming_the_partitions_and_the_last_errors():
    client, _, lookup = setup({A0: 0})
    client.responder = lambda node, request, future: future.failure(
        KafkaConnectionError("broker 0 is down"))
    with pytest.raises(KafkaTimeoutError, match=r"a', partition=0.*broker 0 is down"):
        lookup.offsets_at([A0], LATEST, timeout=1.0)


def test_lookup_errors_that_cannot_be_retried_are_raised():
    client, _, lookup = setup({A0: 0})
    code = UnsupportedForMessageFormatError.errno
    client.responder = lambda node, request, future: future.success(
        list_offsets_response((A0, code, -1, -1)))
    with pytest.raises(UnsupportedForMessageFormatError):
        lookup.offsets_by_times({A0: 5}, timeout=1.0)


# -- SubscriptionState ------------------------------------------------------------------------

def test_subscribe_and_assign_exclude_each_other_until_unsubscribe():
    state = SubscriptionState("latest")
    state.subscribe(["a", "b"])
    with pytest.raises(IllegalStateError, match="only one way"):
        state.assign_from_user([A0])
    with pytest.raises(ValueError, match="not subscribed"):
        state.assign_from_subscribed([TopicPartition("c", 0)])
    state.unsubscribe()
    state.assign_from_user([A0])
    with pytest.raises(IllegalStateError):
        state.subscribe(["a"])
    with pytest.raises(IllegalStateError):
        state.assign_from_subscribed([A0])


def test_subscribe_checks_its_arguments():
    state = SubscriptionState()
    with pytest.raises(TypeError, match="list of topic names"):
        state.subscribe("abc")
    with pytest.raises(InvalidTopicError, match="contains"):
        state.subscribe(["bad topic"])
    with pytest.raises(ValueError, match="neither"):
        state.subscribe([])
    with pytest.raises(IllegalStateError):
        state.subscribe(["a"], pattern="a.*")
    state.subscribe(pattern="^a")
    assert state.matches("abc") and not state.matches("b")
    state.assign_from_subscribed([A0, A1])
    assert state.subscription == {"a"}


def test_positions_survive_reassignment_of_the_same_partition():
    state = SubscriptionState("earliest")
    state.assign_from_user([A0, A1])
    state.seek(A0, 5)
    state.pause(A1)
    state.assign_from_user([A0, B0])
    assert state.position(A0) == 5 and state.assigned_partitions() == {A0, B0}
    assert state.paused_partitions() == set()
    state.reset_missing_positions()
    assert state.assignment[B0].reset_strategy == EARLIEST
    assert state.fetchable_partitions() == [A0]


def test_no_reset_policy_names_the_partitions_without_position():
    state = SubscriptionState("none")
    state.assign_from_user([A0, B0])
    state.seek(A0, 1)
    with pytest.raises(NoOffsetForPartitionError, match=r"partition=0\)\] and auto_offset"):
        state.reset_missing_positions()
    with pytest.raises(ValueError, match="auto_offset_reset"):
        SubscriptionState("smallest")


# -- metrics ----------------------------------------------------------------------------------

def test_fetch_metrics_use_kafka_pythons_names():
    clock = FakeClock(100.0)
    metrics = FetchMetrics(clock=clock)
    metrics.fetch_received(0.002, 1000, 10)
    metrics.consumed(10)
    metrics.fetch_failed()
    values = metrics.snapshot()[GROUP]
    assert values["fetch-latency-avg"] == pytest.approx(2.0)
    assert (values["fetch-total"], values["bytes-consumed-total"],
            values["records-consumed-total"], values["fetch-error-total"]) == (1, 1000, 10, 1)
