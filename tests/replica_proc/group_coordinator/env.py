"""A group coordinator under test: fake clocks, a fake store, and one helper per request
that collects what ``respond`` receives (an empty list = the request is parked)."""
from __future__ import annotations

from cluster.config.broker import BrokerConfig
from replica_proc.group_coordinator.coordinator import GroupCoordinator
from replica_proc.group_coordinator.results import UNKNOWN_MEMBER_ID
from tests.support.clock import T0, FakeClock

PARTITIONS = 4
RANGE = (("range", b"range-metadata"),)


class FakeStore:
    """The broker's append to ``__consumer_offsets``: records every write; calls back at
    once with ``error`` (0 = replicated), or, with ``hold``, when the test ``release``s.
    ``marker`` appends a transaction's COMMIT or ABORT marker to the log."""

    def __init__(self):
        self.writes = []  # (partition, [(key, value)])
        self.producers = []  # the (producer id, epoch) of each write, None if none
        self.entries = []  # (partition, (key, value, producer id) or a marker), as loaded
        self.held = []
        self.hold = False
        self.error = 0

    def __call__(self, partition, pairs, callback, producer=None):
        self.writes.append((partition, list(pairs)))
        self.producers.append(producer)
        producer_id = -1 if producer is None else producer[0]
        self.entries.extend((partition, (k, v, producer_id)) for k, v in pairs)
        if self.hold:
            self.held.append(callback)
        else:
            callback(self.error)

    def release(self, error=0):
        held, self.held = self.held, []
        for callback in held:
            callback(error)

    def marker(self, partition, producer_id, control_type):
        """A COMMIT or ABORT (``segments.record.control_record``) marker of ``producer_id``."""
        self.entries.append((partition, (None, control_type, producer_id)))

    def log(self, partition):
        """Every record and marker written to ``partition``, in order (what a reload
        replays, as ``CoordinatorLog`` reads it with ``transactional``)."""
        return [entry for p, entry in self.entries if p == partition]


class Env:
    def __init__(self, load=True, **config):
        settings = {"offsets.topic.num.partitions": PARTITIONS}
        settings.update({k.replace("_", "."): v for k, v in config.items()})
        self.config = BrokerConfig(settings)
        self.clock = FakeClock(100.0)
        self.wall = FakeClock(T0)
        self.store = FakeStore()
        self.coordinator = self.new_coordinator()
        if load:
            for partition in range(PARTITIONS):
                self.coordinator.begin_load(partition)
                self.coordinator.load(partition, [], self.clock.now)

    def new_coordinator(self):
        return GroupCoordinator(self.config, self.store, self.wall)

    @property
    def now(self):
        return self.clock.now

    def advance(self, seconds):
        """Move both clocks by ``seconds`` and run the coordinator's timers."""
        self.clock.now += seconds
        self.wall.now += round(seconds * 1000)
        self.coordinator.poll(self.clock.now)

    def join(self, group="g", member_id=UNKNOWN_MEMBER_ID, instance=None, protocols=RANGE,
             session_ms=10_000, rebalance_ms=30_000, require_known=True, client_id="client",
             protocol_type="consumer"):
        answers = []
        self.coordinator.join_group(self.now, group, member_id, instance, client_id, "/127.0.0.1",
                                    session_ms, rebalance_ms, protocol_type, list(protocols),
                                    require_known, answers.append)
        return answers

    def sync(self, group, generation, member_id, assignments=None, instance=None,
             protocol_type="consumer", protocol_name="range"):
        answers = []
        self.coordinator.sync_group(self.now, group, generation, member_id, instance,
                                    protocol_type, protocol_name, assignments or {},
                                    answers.append)
        return answers

    def heartbeat(self, group, generation, member_id, instance=None):
        return self.coordinator.heartbeat(self.now, group, generation, member_id, instance)

    def commit(self, group, offsets, generation=-1, member_id=UNKNOWN_MEMBER_ID,
               instance=None):
        answers = []
        self.coordinator.commit_offsets(self.now, group, generation, member_id, instance,
                                        offsets, answers.append)
        return answers

    def txn_commit(self, group, offsets, producer_id=7, producer_epoch=0, generation=-1,
                   member_id=UNKNOWN_MEMBER_ID, instance=None):
        answers = []
        self.coordinator.commit_transactional_offsets(
            self.now, group, producer_id, producer_epoch, offsets, answers.append,
            generation, member_id, instance)
        return answers

    def new_member(self, group="g", **join):
        """A member id from MEMBER_ID_REQUIRED, then the JoinGroup with it (parked)."""
        (first,) = self.join(group, **join)
        return first.member_id, self.join(group, member_id=first.member_id, **join)

    def complete_initial_delay(self, parked):
        """Advance by initial delays until ``parked`` (a JoinGroup's answers) is answered."""
        for _ in range(10):
            if parked:
                return
            self.advance(self.config["group.initial.rebalance.delay.ms"] / 1000)
        assert parked, "the rebalance did not complete"

    def stable_group(self, group="g", count=1, **join):
        """A group of ``count`` dynamic members, Stable in generation 1: [(member id,
        JoinResult)] in join order (the first is the leader)."""
        joined = [self.new_member(group, **join) for _ in range(count)]
        self.complete_initial_delay(joined[0][1])
        results = [answers[0] for _, answers in joined]
        leader = results[0].leader
        assignments = {r.member_id: f"assignment-{r.member_id}".encode() for r in results}
        unchecked = {"protocol_type": None, "protocol_name": None}
        assert self.sync(group, 1, leader, assignments, **unchecked)[0].error == 0
        for r in results:
            if r.member_id != leader:
                assert self.sync(group, 1, r.member_id, **unchecked)[0].error == 0
        return [(r.member_id, r) for r in results]
