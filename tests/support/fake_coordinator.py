"""The group APIs of the fake brokers (tests/support/fake_broker.py): Kafka's classic group
coordinator, served on Kafka's wire protocol, for the consumer's group tests.

The rules are not re-implemented here: ``FakeGroupCoordinator`` drives the broker's own
I/O-free state machine (``replica_proc.group_coordinator.GroupCoordinator``, Kafka's
GroupCoordinator) and only translates requests (FindCoordinator 0-2, JoinGroup 2-5, SyncGroup 1-3,
Heartbeat 1-3, LeaveGroup 1-3, OffsetCommit 2-7, OffsetFetch 1-7) into its calls and its
answers into responses. Its ``__consumer_offsets`` store keeps the records in memory and
acknowledges them at once (every write "replicated"), so ``move(...)`` can hand the groups to
another broker as a coordinator failover would: parked requests get NOT_COORDINATOR, and the
new coordinator loads what was stored.

Settings for fast tests (overridable by ``FakeCluster(group_config=...)``):
``group.initial.rebalance.delay.ms`` 0 (the first member forms generation 1 at once; each
later one makes the group rebalance) and ``group.min.session.timeout.ms`` 100. The
coordinator's ``clock`` is an AdvancingClock (tests/support/clock.py): a test moves it past a
session timeout with ``clock.advance(seconds)`` instead of waiting the session out.

JoinGroup, SyncGroup and OffsetCommit may be answered later: the handler returns a
``Parked`` answer and the broker stops reading that connection until it is filled (Kafka
mutes a channel while its request is parked). Timers (rebalance deadlines, sessions) run
from the coordinator broker's serve loop (``poll``).

Thread safety: every method is called with the FakeCluster's lock held.
"""
from __future__ import annotations

import dataclasses
import datetime
import time

from kio.schema.errors import ErrorCode

from cluster.config.broker import BrokerConfig
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.group_coordinator.coordinator import GroupCoordinator
from replica_proc.group_coordinator.results import JoinResult, SyncResult
from segments.record.control_record import ABORT, COMMIT
from tests.support.clock import AdvancingClock

NO_TIME = datetime.timedelta(0)

GROUP_APIS = (ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
              ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH)

DEFAULTS = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 100}


class Parked:
    """A response to come: ``frame`` is None until the coordinator answers."""

    __slots__ = ("frame",)

    def __init__(self):
        self.frame = None


def _ms(value):
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) \
        else int(value)


class FakeGroupCoordinator:
    """The coordinator of every group (module doc); ``clock`` is monotonic seconds (an
    AdvancingClock unless given)."""

    def __init__(self, group_config=None, clock=None):
        settings = dict(DEFAULTS)
        settings.update(group_config or {})
        self.config = BrokerConfig(settings)
        self.clock = AdvancingClock() if clock is None else clock
        self.stored = {}  # __consumer_offsets partition -> [(key, value)]
        self.coordinator = self._loaded()

    def _loaded(self):
        coordinator = GroupCoordinator(self.config, self._store, lambda: int(time.time() * 1000))
        for partition in range(coordinator.partitions_count):
            coordinator.begin_load(partition)
            coordinator.load(partition, list(self.stored.get(partition, ())), self.clock())
        return coordinator

    def _store(self, partition, pairs, callback, producer=None):
        """Keep ``pairs`` (with their producer id if in a transaction, as the log holds
        them for ``load``) and acknowledge them."""
        stored = self.stored.setdefault(partition, [])
        stored.extend(pairs if producer is None else ((k, v, producer[0]) for k, v in pairs))
        callback(0)

    def complete_transaction(self, group_id, producer_id, commit):
        """A transaction's COMMIT (``commit``) or ABORT marker on ``group_id``'s partition
        (its offsets sent with ``coordinator.commit_transactional_offsets``)."""
        partition = self.coordinator.partition_of(group_id)
        self.stored.setdefault(partition, []).append((None, COMMIT if commit else ABORT,
                                                       producer_id))
        self.coordinator.complete_transaction(partition, producer_id, commit)

    def failover(self):
        """Unload every group (parked requests: NOT_COORDINATOR) and load them afresh from
        what was stored, as a new coordinator would."""
        for partition in range(self.coordinator.partitions_count):
            self.coordinator.unload(partition)
        self.coordinator = self._loaded()

    def poll(self):
        self.coordinator.poll(self.clock())

    # -- requests (lock held) ----------------------------------------------------------------

    def handle(self, broker, api_key, version, request, client_id, correlation_id, injected):
        """The response to a group request (a kio object), or a Parked one. ``broker``: the
        FakeBroker asked; ``injected``: the error code a test queued for it, or None."""
        m = protocol.response_module(api_key, version)
        handler = getattr(self, "_" + ApiKey(api_key).name.lower())
        if api_key != ApiKey.FIND_COORDINATOR and injected is None \
                and broker.broker_id != broker.cluster.coordinator_id:
            injected = ErrorCode.not_coordinator
        parked = Parked()

        def respond(response):
            parked.frame = bytes(protocol.encode_response(response, correlation_id))

        answer = handler(m, version, request, client_id, injected, respond, broker)
        if answer is not None:
            return bytes(protocol.encode_response(answer, correlation_id))
        return parked.frame if parked.frame is not None else parked

    def _find_coordinator(self, m, version, request, client_id, injected, respond, broker):
        node = broker.cluster.coordinator_id
        code = ErrorCode.none if injected is None else ErrorCode(injected)
        return _build(m.FindCoordinatorResponse, throttle_time=NO_TIME, error_code=code,
                      error_message=None, node_id=node if not code else -1,
                      host="localhost" if not code else "", port=0 if not code else -1)

    def _join_group(self, m, version, request, client_id, injected, respond, broker):
        def answer(result):
            respond(_build(
                m.JoinGroupResponse, throttle_time=NO_TIME, error_code=ErrorCode(result.error),
                generation_id=result.generation, protocol_name=result.protocol_name or "",
                leader=result.leader, member_id=result.member_id, members=tuple(
                    _build(m.JoinGroupResponseMember, member_id=j.member_id,
                           group_instance_id=j.group_instance_id, metadata=j.metadata)
                    for j in result.members)))

        if injected is not None:
            answer(JoinResult.failed(request.member_id, injected))
            return None
        self.coordinator.join_group(
            self.clock(), request.group_id, request.member_id,
            getattr(request, "group_instance_id", None), client_id or "", "/127.0.0.1",
            _ms(request.session_timeout), _ms(request.rebalance_timeout),
            request.protocol_type, [(p.name, p.metadata) for p in request.protocols],
            version >= 4, answer)
        return None

    def _sync_group(self, m, version, request, client_id, injected, respond, broker):
        def answer(result):
            respond(_build(m.SyncGroupResponse, throttle_time=NO_TIME,
                           error_code=ErrorCode(result.error), assignment=result.assignment))

        if injected is not None:
            answer(SyncResult(injected))
            return None
        self.coordinator.sync_group(
            self.clock(), request.group_id, request.generation_id, request.member_id,
            getattr(request, "group_instance_id", None), None, None,
            {a.member_id: a.assignment for a in request.assignments}, answer)
        return None

    def _heartbeat(self, m, version, request, client_id, injected, respond, broker):
        code = injected if injected is not None else self.coordinator.heartbeat(
            self.clock(), request.group_id, request.generation_id, request.member_id,
            getattr(request, "group_instance_id", None))
        return m.HeartbeatResponse(throttle_time=NO_TIME, error_code=ErrorCode(code))

    def _leave_group(self, m, version, request, client_id, injected, respond, broker):
        members = ([(x.member_id, x.group_instance_id) for x in request.members]
                   if version >= 3 else [(request.member_id, None)])
        if injected is not None:
            code, answers = injected, []
        else:
            code, answers = self.coordinator.leave_group(self.clock(), request.group_id,
                                                         members)
        return _build(m.LeaveGroupResponse, throttle_time=NO_TIME, error_code=ErrorCode(code),
                      members=tuple(m.MemberResponse(member_id=a, group_instance_id=b,
                                                     error_code=ErrorCode(c))
                                    for a, b, c in answers))

    def _offset_commit(self, m, version, request, client_id, injected, respond, broker):
        offsets = {(t.name, p.partition_index): (
            p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
            for t in request.topics for p in t.partitions}

        def answer(errors):
            topics = {}
            for (topic, partition), code in errors.items():
                topics.setdefault(topic, []).append(m.OffsetCommitResponsePartition(
                    partition_index=partition, error_code=ErrorCode(code)))
            respond(_build(m.OffsetCommitResponse, throttle_time=NO_TIME, topics=tuple(
                m.OffsetCommitResponseTopic(name=name, partitions=tuple(parts))
                for name, parts in topics.items())))

        if injected is not None:
            answer({tp: injected for tp in offsets})
            return None
        generation = getattr(request, "generation_id_or_member_epoch",
                             getattr(request, "generation_id", -1))
        self.coordinator.commit_offsets(
            self.clock(), request.group_id, generation, request.member_id,
            getattr(request, "group_instance_id", None), offsets, answer)
        return None

    def _offset_fetch(self, m, version, request, client_id, injected, respond, broker):
        partitions = None if request.topics is None else [
            (t.name, p) for t in request.topics for p in t.partition_indexes]
        if injected is not None:
            code, found = injected, {}
        else:
            code, found = self.coordinator.fetch_offsets(
                request.group_id, partitions, getattr(request, "require_stable", False))
        topics = {}
        for (topic, partition), c in found.items():
            topics.setdefault(topic, []).append(_build(
                m.OffsetFetchResponsePartition, partition_index=partition,
                committed_offset=c.offset, committed_leader_epoch=c.leader_epoch,
                metadata=c.metadata, error_code=ErrorCode(c.error)))
        return _build(m.OffsetFetchResponse, throttle_time=NO_TIME, error_code=ErrorCode(code),
                      topics=tuple(m.OffsetFetchResponseTopic(name=name, partitions=tuple(parts))
                                   for name, parts in topics.items()))


def _build(cls, **fields):
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in fields.items() if name in names})
