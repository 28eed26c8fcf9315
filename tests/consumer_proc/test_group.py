"""KafkaConsumer in a consumer group, against fake brokers whose coordinator is the broker's
own group coordinator state machine (tests/support/fake_coordinator.py): joining, the
leader's assignment, rebalances when members come and go (eager and cooperative), the
listener's calls, heartbeat errors, the poll-interval leave, static members, commits and
committed offsets, a coordinator failover.

Members run in threads of the test (``Polling``: one consumer per thread, polling), so the
group's rebalances happen as between processes."""
from __future__ import annotations

import threading
import time

import pytest
from kio.schema.errors import ErrorCode

from cluster import ConsumerRebalanceListener as PublicListener
from cluster.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalStateError,
    InconsistentGroupProtocolError,
)
from cluster.structs import OffsetAndMetadata, TopicPartition
from consumer_proc import ConsumerRebalanceListener
from consumer_proc.assignors.member import Member
from consumer_proc.consumer import KafkaConsumer
from consumer_proc.coordinator import without_moves
from tests.support.bounds import IN_PROCESS_BOUND
from tests.support.waits import wait_for

TOPIC = "events"
PARTITIONS = 6
ALL = {TopicPartition(TOPIC, p) for p in range(PARTITIONS)}
SESSION_TIMEOUT_MS = 3000


class Recorder(ConsumerRebalanceListener):
    """Records every callback as (name, sorted partitions); ``on_revoked`` runs inside."""

    def __init__(self, on_revoked=None):
        self.calls = []
        self.on_revoked = on_revoked

    def on_partitions_revoked(self, revoked):
        self.calls.append(("revoked", sorted(revoked)))
        if self.on_revoked is not None:
            self.on_revoked(revoked)

    def on_partitions_assigned(self, assigned):
        self.calls.append(("assigned", sorted(assigned)))

    def on_partitions_lost(self, lost):
        self.calls.append(("lost", sorted(lost)))

    def names(self):
        return [name for name, _ in self.calls]


@pytest.fixture
def group(fake_cluster):
    """``(cluster, make(**config))``: a fake cluster with topic TOPIC of PARTITIONS
    partitions (two records in each) and a factory of group consumers, closed at the end."""
    cluster = fake_cluster(brokers=2)
    cluster.create_topic(TOPIC, PARTITIONS)
    for p in range(PARTITIONS):
        cluster.append(TOPIC, p, [b"a", b"b"])
    made = []

    def make(subscribe=True, listener=None, **config):
        settings = dict(bootstrap_servers=cluster.data_dir, group_id="g",
                        auto_offset_reset="earliest", session_timeout_ms=SESSION_TIMEOUT_MS,
                        heartbeat_interval_ms=50, max_poll_interval_ms=5000,
                        retry_backoff_ms=20, reconnect_backoff_ms=5,
                        reconnect_backoff_max_ms=50, request_timeout_ms=3000,
                        fetch_max_wait_ms=10)
        settings.update(config)
        consumer = KafkaConsumer(**settings)
        made.append(consumer)
        if subscribe:
            consumer.subscribe([TOPIC], listener=listener)
        return consumer
    yield cluster, make
    for consumer in made:
        consumer.close()


def poll_until(consumer, predicate, what):
    """Poll ``consumer`` in this thread until ``predicate(records so far)``."""
    records = []
    deadline = time.monotonic() + IN_PROCESS_BOUND
    while not predicate(records):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for batch in consumer.poll(50).values():
            records.extend(batch)
    return records


class Polling:
    """One consumer polling in its own thread; ``assignment`` and ``records`` as seen after
    each poll; ``paused`` stops its polls (the consumer then looks hung)."""

    def __init__(self, consumer):
        self.consumer = consumer
        self.assignment = set()
        self.records = []
        self.error = None
        self.paused = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            while not self._stop.is_set():
                if self.paused.is_set():
                    time.sleep(0.02)
                    continue
                batch = self.consumer.poll(30)
                with self._lock:
                    for records in batch.values():
                        self.records.extend(records)
                    self.assignment = self.consumer.assignment()
        except Exception as exc:
            self.error = exc

    def snapshot(self):
        with self._lock:
            return set(self.assignment)

    def stop(self, close=True):
        self._stop.set()
        self._thread.join(IN_PROCESS_BOUND)
        assert not self._thread.is_alive()
        if close:
            self.consumer.close()
        assert self.error is None, self.error


def shares(members, partitions=ALL):
    """True when the members' assignments are disjoint, non-empty and cover
    ``partitions``."""
    seen = [m.snapshot() for m in members]
    union = set().union(*seen)
    return (all(seen) and union == partitions
            and sum(len(s) for s in seen) == len(partitions))


def requests(cluster, api):
    with cluster.lock:
        return [request for _, name, request in cluster.requests if name == api]


def rejoin_as_a_new_member(consumer, cluster, joins):
    """Poll ``consumer`` (told UNKNOWN_MEMBER_ID by an injected error, after ``joins``
    JoinGroups) until it waits in its JoinGroup under a new member id; then run the
    coordinator's clock past the session of the member it was, which the coordinator still
    holds (a real one answers UNKNOWN_MEMBER_ID once it has removed the member): the
    rebalance waits for that session to run out, skipped instead of waited for."""
    poll_until(consumer, lambda r: len(requests(cluster, "JOIN_GROUP")) >= joins + 2,
               "a JoinGroup for a new member id, then one with it")
    cluster.group_coordinator.clock.advance(SESSION_TIMEOUT_MS / 1000)


# -- one member ----------------------------------------------------------------------------------

def test_a_lone_member_gets_every_partition_and_commits_round_trip(group):
    cluster, make = group
    listener = Recorder()
    consumer = make(listener=listener)
    records = poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    assert consumer.assignment() == ALL
    assert listener.calls == [("assigned", sorted(ALL))]
    joins = requests(cluster, "JOIN_GROUP")
    assert joins[0].member_id == ""  # then MEMBER_ID_REQUIRED gives it one (v4+)
    assert joins[1].member_id != ""
    consumer.commit()
    tp = TopicPartition(TOPIC, 0)
    assert consumer.committed(tp) == 2
    consumer.commit({tp: OffsetAndMetadata(1, "half", -1)})
    assert consumer.committed(tp) == 1
    assert consumer.committed(tp, metadata=True).metadata == "half"
    assert consumer.committed(TopicPartition("nothing-here", 0)) is None
    assert sorted((r.partition, r.offset) for r in records) == \
        sorted((p, o) for p in range(PARTITIONS) for o in range(2))


def test_a_new_member_starts_from_the_committed_offsets(group):
    cluster, make = group
    first = make(enable_auto_commit=False)
    poll_until(first, lambda r: len(r) == 2 * PARTITIONS, "every record")
    first.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(1, "", -1),
                  TopicPartition(TOPIC, 1): OffsetAndMetadata(2, "", -1)})
    first.close()
    second = make(enable_auto_commit=False)
    records = poll_until(second, lambda r: len(r) >= 2 * PARTITIONS - 3, "the rest")
    time.sleep(0.1)
    records += [r for batch in second.poll(50).values() for r in batch]
    # committed: p0 from 1, p1 from 2 (nothing); the others have none: earliest
    assert sorted((r.partition, r.offset) for r in records) == \
        [(0, 1)] + [(p, o) for p in range(2, PARTITIONS) for o in range(2)]


def test_auto_commit_on_close_and_commit_async_callback(group):
    cluster, make = group
    consumer = make(auto_commit_interval_ms=60000)
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    answers = []
    future = consumer.commit_async({TopicPartition(TOPIC, 3): OffsetAndMetadata(1, "", -1)},
                                   callback=lambda offsets, result: answers.append(result))
    poll_until(consumer, lambda r: future.is_done, "the async commit")
    assert future.succeeded() and answers == [future.value]
    consumer.close()  # auto-commit: every position
    probe = make(subscribe=False)
    assert {tp: probe.committed(tp) for tp in ALL} == {tp: 2 for tp in ALL}


def test_without_a_group_id_nothing_of_the_group_runs(group):
    cluster, make = group
    consumer = make(subscribe=False, group_id=None)
    consumer.subscribe([TOPIC])
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    assert consumer._coordinator is None
    assert requests(cluster, "FIND_COORDINATOR") == []
    with pytest.raises(IllegalStateError, match="Requires group_id"):
        consumer.commit()


def test_group_metadata_follows_the_joins(group):
    cluster, make = group
    consumer = make(group_instance_id="i1")
    assert consumer.group_metadata() == ("g", -1, "", "i1")  # not joined yet
    poll_until(consumer, lambda r: consumer.assignment() == ALL, "the assignment")
    first = consumer.group_metadata()
    assert first.generation_id >= 1 and first.member_id.startswith("i1-")  # Kafka's form
    other = Polling(make())
    poll_until(consumer, lambda r: consumer.group_metadata().generation_id
               > first.generation_id, "the next generation")
    assert consumer.group_metadata().member_id == first.member_id
    other.stop()
    with pytest.raises(IllegalStateError, match="Requires group_id"):
        make(subscribe=False, group_id=None).group_metadata()


def test_assign_with_a_group_id_commits_outside_group_management(group):
    cluster, make = group
    tp = TopicPartition(TOPIC, 2)
    consumer = make(subscribe=False, enable_auto_commit=False)
    consumer.assign([tp])
    poll_until(consumer, lambda r: len(r) == 2, "partition 2")
    consumer.commit()
    assert requests(cluster, "JOIN_GROUP") == []
    assert [r.generation_id_or_member_epoch for r in requests(cluster, "OFFSET_COMMIT")] == [-1]
    assert consumer.committed(tp) == 2


# -- errors --------------------------------------------------------------------------------------

def test_find_coordinator_is_retried_while_the_coordinator_is_not_available(group):
    cluster, make = group
    cluster.fail_next("g", None, ErrorCode.coordinator_not_available, times=2,
                      api="FIND_COORDINATOR")
    consumer = make()
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    assert len(requests(cluster, "FIND_COORDINATOR")) >= 3


def test_heartbeat_rebalance_in_progress_makes_the_member_rejoin(group):
    cluster, make = group
    listener = Recorder()
    consumer = make(listener=listener)
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    joins = len(requests(cluster, "JOIN_GROUP"))
    cluster.fail_next("g", None, ErrorCode.rebalance_in_progress, api="HEARTBEAT")
    poll_until(consumer, lambda r: len(requests(cluster, "SYNC_GROUP")) >= 2, "a rejoin")
    assert len(requests(cluster, "JOIN_GROUP")) == joins + 1
    # eager: everything revoked before the rejoin, everything assigned again
    assert listener.calls[-2:] == [("revoked", sorted(ALL)), ("assigned", sorted(ALL))]


@pytest.mark.parametrize("code, member_id_kept", [
    (ErrorCode.unknown_member_id, False), (ErrorCode.illegal_generation, True)])
def test_heartbeat_member_errors_lose_the_partitions_and_rejoin(group, code, member_id_kept):
    cluster, make = group
    listener = Recorder()
    consumer = make(listener=listener)
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    member_id = requests(cluster, "SYNC_GROUP")[-1].member_id
    joins = len(requests(cluster, "JOIN_GROUP"))
    cluster.fail_next("g", None, code, api="HEARTBEAT")
    if not member_id_kept:
        rejoin_as_a_new_member(consumer, cluster, joins)
    poll_until(consumer, lambda r: ("lost", sorted(ALL)) in listener.calls
               and listener.calls[-1][0] == "assigned", "lost, then assigned again")
    rejoin = requests(cluster, "JOIN_GROUP")[2]
    assert (rejoin.member_id == member_id) == member_id_kept
    assert consumer.assignment() == ALL


@pytest.mark.parametrize("code", [ErrorCode.illegal_generation, ErrorCode.unknown_member_id,
                                  ErrorCode.rebalance_in_progress])
def test_a_sync_commit_refused_by_the_group_raises_commit_failed(group, code):
    cluster, make = group
    consumer = make(enable_auto_commit=False)
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    joins = len(requests(cluster, "JOIN_GROUP"))
    cluster.fail_next("g", None, code, api="OFFSET_COMMIT")
    with pytest.raises(CommitFailedError):
        consumer.commit()
    if code == ErrorCode.unknown_member_id:
        rejoin_as_a_new_member(consumer, cluster, joins)
    # back in the group, and (nothing was committed) its records read again from the start
    poll_until(consumer, lambda r: consumer.assignment() == ALL and
               consumer._coordinator.member.state == "STABLE" and
               consumer.position(TopicPartition(TOPIC, 0)) == 2, "the member back in the group")
    consumer.commit()
    assert consumer.committed(TopicPartition(TOPIC, 0)) == 2


def test_a_commit_is_retried_while_the_coordinator_moves(group):
    cluster, make = group
    consumer = make(enable_auto_commit=False)
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    cluster.fail_next("g", None, ErrorCode.not_coordinator, api="OFFSET_COMMIT")
    consumer.commit()
    assert len(requests(cluster, "OFFSET_COMMIT")) == 2
    assert consumer.committed(TopicPartition(TOPIC, 5)) == 2


def test_committed_offsets_survive_a_coordinator_failover(group):
    cluster, make = group
    consumer = make(enable_auto_commit=False)
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    consumer.commit()
    cluster.move_coordinator(1)
    assert consumer.committed(TopicPartition(TOPIC, 4)) == 2
    for p in range(PARTITIONS):
        cluster.append(TOPIC, p, [b"c"])
    records = poll_until(consumer, lambda r: len(r) == PARTITIONS, "the new records")
    assert {r.offset for r in records} == {2}
    consumer.commit()
    with cluster.lock:
        commits_to = [broker for broker, name, _ in cluster.requests if name == "OFFSET_COMMIT"]
    assert commits_to[0] == 0 and commits_to[-1] == 1  # found the new coordinator
    assert consumer.committed(TopicPartition(TOPIC, 4)) == 3


def test_a_static_member_taken_over_is_fenced_and_does_not_leave_on_close(group):
    cluster, make = group
    first = make(group_instance_id="static-1")
    poll_until(first, lambda r: len(r) == 2 * PARTITIONS, "every record")
    second = make(group_instance_id="static-1")
    member = Polling(second)
    wait_for(lambda: member.snapshot() == ALL, "the new instance's assignment")
    with pytest.raises(FencedInstanceIdError):
        poll_until(first, lambda r: False, "the fence")
    member.stop()
    assert requests(cluster, "LEAVE_GROUP") == []
    assert all(r.group_instance_id == "static-1" for r in requests(cluster, "JOIN_GROUP"))


# -- several members ------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_members_share_the_partitions_and_a_leaving_member_hands_them_over(group, strategy):
    cluster, make = group
    members = [Polling(make(partition_assignment_strategy=[strategy])) for _ in range(3)]
    wait_for(lambda: shares(members), "three disjoint complete assignments")
    wait_for(lambda: sum(len(m.records) for m in members) >= 2 * PARTITIONS, "every record")
    assert sorted((r.partition, r.offset) for m in members for r in m.records) == \
        sorted((p, o) for p in range(PARTITIONS) for o in range(2))  # each once
    members[0].stop()  # close: LeaveGroup, a rebalance
    wait_for(lambda: shares(members[1:]), "two members sharing everything")
    assert requests(cluster, "LEAVE_GROUP")
    for m in members[1:]:
        m.stop()


def test_cooperative_rebalance_revokes_only_the_partitions_that_move(group):
    cluster, make = group
    first_listener, second_listener = Recorder(), Recorder()
    config = dict(partition_assignment_strategy=["cooperative-sticky", "range"])
    first = Polling(make(listener=first_listener, **config))
    wait_for(lambda: first.snapshot() == ALL, "the first member's assignment")
    second = Polling(make(listener=second_listener, **config))
    wait_for(lambda: shares([first, second]), "two members sharing everything")
    first.stop(close=False)
    second.stop(close=False)
    moved = set(second.snapshot())
    revoked = [set(p) for name, p in first_listener.calls if name == "revoked"]
    assert revoked == [moved]  # never everything: only what moved, once
    assert first_listener.calls[0] == ("assigned", sorted(ALL))
    # the second member got them one generation later, after a second rejoin
    assert [set(p) for name, p in second_listener.calls if name == "assigned"][-1] == moved
    assert len({r.generation_id for r in requests(cluster, "SYNC_GROUP")}) >= 3
    first.consumer.close()
    second.consumer.close()


def test_eager_auto_commit_happens_before_revocation(group):
    cluster, make = group
    seen = {}

    def on_revoked(revoked):
        for tp in revoked:
            seen[tp] = consumer.committed(tp)

    listener = Recorder(on_revoked)
    consumer = make(listener=listener, auto_commit_interval_ms=60000)
    first = Polling(consumer)
    wait_for(lambda: len(first.records) == 2 * PARTITIONS, "every record")
    second = Polling(make())
    wait_for(lambda: shares([first, second]), "two members sharing everything")
    first.stop()
    second.stop()
    assert seen == {tp: 2 for tp in ALL}  # committed before the listener ran
    assert sum(len(m.records) for m in (first, second)) == 2 * PARTITIONS  # none twice


def test_a_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll(group):
    cluster, make = group
    listener = Recorder()
    slow = Polling(make(listener=listener, max_poll_interval_ms=600))
    other = Polling(make(max_poll_interval_ms=600))
    wait_for(lambda: shares([slow, other]), "two members sharing everything")
    wait_for(lambda: slow.consumer.group_metadata().generation_id >= 2, "the second join")
    joined = slow.consumer.group_metadata()
    slow.paused.set()
    wait_for(lambda: other.snapshot() == ALL, "the other member taking everything")
    assert requests(cluster, "LEAVE_GROUP")
    # As Java's groupMetadata(): what the last join gave, stale now (KIP-447 fences it)
    assert slow.consumer.group_metadata() == joined
    slow.paused.clear()
    wait_for(lambda: "lost" in listener.names() and shares([slow, other]),
             "the slow member back in the group")
    slow.stop()
    other.stop()


def test_the_listener_is_exported_by_the_facade():
    assert PublicListener is ConsumerRebalanceListener
    calls = []

    class Default(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            calls.append(revoked)

    Default().on_partitions_lost({1})
    assert calls == [{1}]


def test_auto_commit_every_interval_from_poll(group):
    cluster, make = group
    consumer = make(auto_commit_interval_ms=100)
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    probe = make(subscribe=False)
    poll_until(consumer, lambda r: {tp: probe.committed(tp) for tp in ALL} ==
               {tp: 2 for tp in ALL}, "the positions auto-committed")
    assert all(r.generation_id_or_member_epoch >= 1
               for r in requests(cluster, "OFFSET_COMMIT"))


def test_the_leader_runs_the_assignor_the_members_voted_for(group):
    cluster, make = group
    first = Polling(make(partition_assignment_strategy=["roundrobin", "range"]))
    second = Polling(make(partition_assignment_strategy=["range"]))
    wait_for(lambda: shares([first, second]), "two members sharing everything")
    first.stop(close=False)
    second.stop(close=False)
    assert first.consumer._coordinator.member.protocol == "range"
    # range: consecutive halves, in member id order
    halves = sorted(sorted(tp.partition for tp in m.snapshot()) for m in (first, second))
    assert halves == [[0, 1, 2], [3, 4, 5]]
    first.consumer.close()
    second.consumer.close()


def test_a_static_member_restarted_gets_its_partitions_back_without_a_rebalance(group):
    cluster, make = group
    first = Polling(make(group_instance_id="a"))
    second = Polling(make(group_instance_id="b"))
    wait_for(lambda: shares([first, second]), "two members sharing everything")
    owned = first.snapshot()
    first.stop()
    generations = {r.generation_id for r in requests(cluster, "SYNC_GROUP")}
    again = Polling(make(group_instance_id="a"))
    wait_for(lambda: again.snapshot() == owned, "the same partitions back")
    assert {r.generation_id for r in requests(cluster, "SYNC_GROUP")} == generations
    assert second.snapshot() == ALL - owned
    again.stop()
    second.stop()


def test_a_pattern_subscription_follows_new_matching_topics(group):
    cluster, make = group
    cluster.create_topic("pat-a", 2)
    consumers = [make(subscribe=False, metadata_max_age_ms=100) for _ in range(2)]
    for consumer in consumers:
        consumer.subscribe(pattern="pat-.*")
    members = [Polling(consumer) for consumer in consumers]
    wanted = {TopicPartition("pat-a", p) for p in range(2)}
    wait_for(lambda: shares(members, wanted), "pat-a shared")
    cluster.create_topic("pat-b", 2)
    wanted |= {TopicPartition("pat-b", p) for p in range(2)}
    wait_for(lambda: shares(members, wanted), "pat-a and pat-b shared")
    for m in members:
        m.stop()


@pytest.mark.parametrize("api, code", [
    ("JOIN_GROUP", ErrorCode.not_coordinator), ("JOIN_GROUP", ErrorCode.rebalance_in_progress),
    ("SYNC_GROUP", ErrorCode.rebalance_in_progress),
    ("SYNC_GROUP", ErrorCode.coordinator_not_available)])
def test_retriable_join_and_sync_errors_make_the_member_join_again(group, api, code):
    cluster, make = group
    cluster.fail_next("g", None, code, api=api)
    consumer = make()
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    assert consumer.assignment() == ALL
    if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
        assert len(requests(cluster, "FIND_COORDINATOR")) == 2  # looked up again


def test_a_join_error_that_is_not_retriable_is_raised_by_poll(group):
    cluster, make = group
    cluster.fail_next("g", None, ErrorCode.inconsistent_group_protocol, api="JOIN_GROUP")
    consumer = make()
    with pytest.raises(InconsistentGroupProtocolError):
        poll_until(consumer, lambda r: False, "the error")
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record, joined at last")


def test_the_heartbeat_thread_keeps_a_member_that_does_not_poll_in_the_group(group):
    cluster, make = group
    consumer = make(session_timeout_ms=300, heartbeat_interval_ms=50)
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    joins = len(requests(cluster, "JOIN_GROUP"))
    beats = len(requests(cluster, "HEARTBEAT"))
    wait_for(lambda: len(requests(cluster, "HEARTBEAT")) >= beats + 20,
             "heartbeats over several session timeouts")
    assert consumer.poll(50) == {}
    assert len(requests(cluster, "JOIN_GROUP")) == joins
    assert consumer._coordinator.member.state == "STABLE"


def test_unsubscribe_revokes_and_leaves_the_group(group):
    cluster, make = group
    listener = Recorder()
    consumer = make(listener=listener)
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    consumer.unsubscribe()
    assert listener.calls[-1] == ("revoked", sorted(ALL))
    assert consumer.assignment() == set()
    (leave,) = requests(cluster, "LEAVE_GROUP")
    assert [m.member_id for m in leave.members] == [requests(cluster, "SYNC_GROUP")[-1].member_id]
    consumer.subscribe([TOPIC], listener=listener)
    poll_until(consumer, lambda r: consumer.assignment() == ALL, "joined again")


def test_an_eager_leader_keeps_a_moving_partition_out_of_the_generation():
    members = {
        "a": Member("a", ("t",), owned=(("t", 0), ("t", 1)), generation=3),
        "b": Member("b", ("t",), generation=3),
    }
    assignment = {"a": {"t": [1]}, "b": {"t": [0]}}  # an eager assignor moved partition 0
    assert without_moves(assignment, members, {"t": 2}) == {"a": {"t": [1]}, "b": {"t": []}}
    assert without_moves(assignment, {"a": Member("a", ("t",)), "b": Member("b", ("t",))},
                          {"t": 2}) == assignment  # nobody owns anything: unchanged


def test_a_member_polling_with_timeout_zero_joins_and_reads(group):
    cluster, make = group
    consumer = make()
    records = []
    deadline = time.monotonic() + IN_PROCESS_BOUND
    while len(records) < 2 * PARTITIONS:
        assert time.monotonic() < deadline, "timed out polling with timeout 0"
        records += [r for batch in consumer.poll(0).values() for r in batch]
    assert consumer.assignment() == ALL


def test_metrics_report_the_group_under_kafka_pythons_names(group):
    cluster, make = group
    consumer = make(enable_auto_commit=False)
    assert set(consumer.metrics()) == {"consumer-fetch-manager-metrics",
                                       "consumer-coordinator-metrics"}
    poll_until(consumer, lambda r: len(r) == 2 * PARTITIONS, "every record")
    consumer.commit()
    consumer.commit()
    wait_for(lambda: consumer.metrics()["consumer-coordinator-metrics"]["heartbeat-total"],
             "an answered heartbeat")
    metrics = consumer.metrics()
    coordinator = metrics["consumer-coordinator-metrics"]
    assert coordinator["assigned-partitions"] == PARTITIONS
    assert coordinator["commit-total"] == 2 and coordinator["commit-rate"] > 0
    assert 0 < coordinator["commit-latency-avg"] <= coordinator["commit-latency-max"]
    assert coordinator["join-total"] == len(requests(cluster, "JOIN_GROUP"))
    assert coordinator["sync-total"] == len(requests(cluster, "SYNC_GROUP")) >= 1
    assert 0 < coordinator["sync-time-avg"] <= coordinator["sync-time-max"]
    assert coordinator["heartbeat-rate"] > 0 and coordinator["heartbeat-response-time-max"] > 0
    assert 0 <= coordinator["last-heartbeat-seconds-ago"] < IN_PROCESS_BOUND
    fetch = metrics["consumer-fetch-manager-metrics"]
    assert fetch["records-consumed-total"] == 2 * PARTITIONS
    assert fetch["records-consumed-rate"] > 0 and fetch["bytes-consumed-rate"] > 0
    assert fetch["fetch-rate"] > 0 and fetch["records-per-request-avg"] > 0
    assert fetch["records-lag-max"] == 0


def test_a_consumer_without_a_group_has_no_coordinator_metrics(group):
    cluster, make = group
    consumer = make(subscribe=False, group_id=None)
    assert set(consumer.metrics()) == {"consumer-fetch-manager-metrics"}


# -- KIP-447: require_stable -------------------------------------------------------------------

def test_a_read_committed_member_waits_for_offsets_pending_in_a_transaction(group):
    """OffsetFetch with require_stable: UNSTABLE_OFFSET_COMMIT keeps the partitions waiting
    (no reset, asked again after retry_backoff_ms) until the transaction commits; then they
    start from its offsets, not from the older committed ones."""
    cluster, make = group
    coordinator = cluster.group_coordinator
    tp0, tp1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
    with cluster.lock:
        answers = []
        coordinator.coordinator.commit_offsets(coordinator.clock(), "g", -1, "", None, {
            (TOPIC, 0): (0, -1, ""), (TOPIC, 1): (0, -1, "")}, answers.append)
        coordinator.coordinator.commit_transactional_offsets(
            coordinator.clock(), "g", 42, 0, {(TOPIC, 0): (1, -1, ""), (TOPIC, 1): (2, -1, "")},
            answers.append)
        assert answers == [{(TOPIC, 0): 0, (TOPIC, 1): 0}] * 2
    consumer = make(enable_auto_commit=False, isolation_level="read_committed")
    wait_for(lambda: consumer.poll(20) is not None and len(
        requests(cluster, "OFFSET_FETCH")) >= 3, "OffsetFetch asked again")
    assert all(r.require_stable and r.__version__ == 7
               for r in requests(cluster, "OFFSET_FETCH"))
    assert consumer.assignment() == ALL
    assert consumer.position(tp0, timeout_ms=100) is None  # no reset to earliest
    with cluster.lock:
        coordinator.complete_transaction("g", 42, True)
    records = poll_until(consumer, lambda r: len(r) >= 2 * PARTITIONS - 3, "the rest")
    assert sorted((r.partition, r.offset) for r in records) == \
        [(0, 1)] + [(p, o) for p in range(2, PARTITIONS) for o in range(2)]
    assert consumer.position(tp1) == 2


def test_a_read_uncommitted_member_takes_the_committed_offsets_at_once(group):
    cluster, make = group
    coordinator = cluster.group_coordinator
    with cluster.lock:
        coordinator.coordinator.commit_transactional_offsets(
            coordinator.clock(), "g", 42, 0, {(TOPIC, 0): (1, -1, "")}, lambda answer: None)
    consumer = make(enable_auto_commit=False)
    records = poll_until(consumer, lambda r: len(r) >= 2 * PARTITIONS, "every record")
    assert sorted((r.partition, r.offset) for r in records) == \
        [(p, o) for p in range(PARTITIONS) for o in range(2)]
    fetches = requests(cluster, "OFFSET_FETCH")
    assert fetches and not any(r.require_stable for r in fetches)
