"""The controller: one broker at a time owns the cluster's metadata and publishes it.

Every broker makes a ``Controller`` and calls ``poll(now)`` from its loop (every iteration
is fine: it does nothing until ``poll_interval`` has passed). Election is an exclusive
flock on ``D/controller.lock`` (the kernel drops it when the holder dies, like ZooKeeper's
ephemeral ``/controller`` node), in generations (``controller_lock``): a broker that is
not the controller looks at every poll whether the lock is free, or held by a controller
whose heartbeat is older than ``broker.session.timeout.ms`` (stopped or hung: KRaft's
election timeout). The one that may take it becomes *active*:

1. it opens the metadata log (``metadata_log.MetadataLog``: recovery, then replay of
   every record into the image the last controller published) and installs its
   generation of the lock, naming its controller epoch (one past the log's newest and
   the replaced generation's);
2. it appends a ``controller`` record (that epoch) and whatever the liveness of the
   brokers now says (below), and publishes the image on the metadata page.

An active controller checks at every poll, and before every append and publish, that the
lock is still its generation and the log still ends where it left it; a controller that
finds it was replaced (it was stopped for longer than the session timeout) resigns
without writing and goes on as a standby (``controller_lock`` has the races).

While active, each poll checks broker liveness: broker ``b`` is alive while some process
holds ``D/broker-<b>/broker.lock`` (``broker_lock``), its ``broker.json`` says
``serving``, and its heartbeat (``replica_proc.heartbeat``) is at most
``broker.session.timeout.ms`` old — a broker whose heartbeat is older is *fenced* (a
SIGSTOPped or hung process) until its heartbeats resume; one that never wrote a heartbeat
(a stand-in of the tests) is judged by its lock and state alone. ``poll``'s ``now`` is
the host's monotonic clock, the heartbeats' clock. When liveness changes the controller
appends ``broker`` records and, for every partition, ``placement.elect`` (leaders from
the live ISR, ``unclean.leader.election.enable`` per topic, leader epoch + 1 on every
leader change), then publishes.

The broker's request handler calls, on the active controller only (others raise
NotControllerError, which the handler turns into the NOT_CONTROLLER error code):

- ``create_topics([{"name", "num_partitions", "replication_factor", "assignments",
  "configs"}], validate_only)`` (CreateTopics),
- ``delete_topics([names])`` (DeleteTopics),
- ``create_partitions({name: (count, assignments)}, validate_only)`` (CreatePartitions),
- ``alter_configs([(resource_type, name, ops)], validate_only, replace)`` (AlterConfigs
  with ``replace``, IncrementalAlterConfigs without; ``cluster.config.dynamic``), keyed
  by ``(resource_type, name)``,
- ``elect_leaders(election_type, {topic: [partitions]} or None)`` (ElectLeaders, KIP-460),
  keyed by ``(topic, partition)``,

each returning ``{topic: (error_code, error_message)}`` — ``(0, None)`` on success, else
Kafka's code and a message naming the bad value — as the responses carry them; and

- ``alter_partition(broker_id, changes)`` (AlterPartition, KIP-497: a leader's ISR
  change), returning ``{(topic, partition): (error_code, PartitionState or None)}``;
- ``allocate_producer_ids(broker_id, broker_epoch)`` (AllocateProducerIds, KIP-730),
  returning the next ``producer_ids.ProducerIdsBlock`` for that broker.

All accepted changes of one call go to the log as one batch, fsynced, before the new image
is published: once a caller has a success, the change survives a crash of any process.

Leader rebalance (``auto.leader.rebalance.enable``): every ``leader.imbalance.check.
interval.seconds`` of the poll's clock, the active controller runs a preferred-replica
election for the partitions ``placement.imbalanced_partitions`` picks (brokers leading
less than ``100 - leader.imbalance.per.broker.percentage`` % of the partitions they are
the preferred replica of).

Ownership: a Controller belongs to one broker's loop thread; every method is called from
it. ``close()`` (at broker shutdown) releases the controllership and is safe to call twice.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
from typing import NamedTuple

from cluster.config import dynamic
from cluster.errors import (
    BrokerResponseError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidUpdateVersionError,
    NotControllerError,
    NotLeaderForPartitionError,
    PolicyViolationError,
    PreferredLeaderNotAvailableError,
    TopicAlreadyExistsError,
    TopicDeletionDisabledError,
    UnknownTopicOrPartitionError,
)
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import HeartbeatReader, broker_is_alive
from cluster.metadata.model import (
    INTERNAL_TOPICS,
    NO_LEADER,
    BrokerInfo,
    PartitionState,
    validate_topic_name,
)
from cluster.protocol.frames import ElectionType
from replica_proc.controller import metadata_log as mr, producer_ids
from replica_proc.controller.controller_lock import ControllerLock, read_holder
from replica_proc.controller.placement import (
    assign_replicas,
    elect,
    elect_preferred,
    imbalanced_partitions,
)
from replica_proc.damaged_replicas import read_reports, report_path
from segments.clock import wall_clock_ms

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.05
"""Seconds between two election attempts or liveness checks."""

NO_ERROR = (0, None)


class IsrChange(NamedTuple):
    """One partition of an AlterPartition: the ISR its leader wants, and the leader epoch
    and partition epoch of the state the leader bases it on."""

    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple


class Controller:
    """This broker's part in controller election, and the controller when it is active.

    ``broker_config`` is the broker's ``BrokerConfig`` (num.partitions,
    default.replication.factor, delete.topic.enable, topic config defaults and checks);
    ``page`` the ``MetadataPage`` to publish on; ``clock`` returns wall-clock milliseconds
    (the metadata log's timestamps). ``poll(now)`` takes the loop's monotonic seconds.
    """

    def __init__(self, data_dir, cluster_id, broker_id, broker_config, page, clock=None,
                 poll_interval=POLL_INTERVAL):
        self.data_dir = os.fspath(data_dir)
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self.broker_config = broker_config
        self.page = page
        self.clock = clock or wall_clock_ms
        self.poll_interval = poll_interval
        #: The controller epoch (0 until this broker first becomes active).
        self.epoch = 0
        self._log = None
        self._image = None
        self._broker_ids = []
        self._dir_stamp = None  # mtime of the data directory when _broker_ids was read
        self._states = {}  # broker id -> (stat of broker.json, its contents)
        #: broker id -> (stat of damaged-replicas.json, {(topic, partition): topic id})
        self._damage = {}
        self._heartbeats = HeartbeatReader(self.data_dir)
        self._session_timeout_ns = broker_config["broker.session.timeout.ms"] * 1_000_000
        self._lock = ControllerLock(self.data_dir, broker_id, self._heartbeats,
                                    self._session_timeout_ns)
        self._published = None  # the page's sequence after this controller's last publish
        self._next_poll = float("-inf")
        self._start_index = 0
        self._next_rebalance = None  # (controller epoch, poll time of the next check)
        self._next_producer_id = 0  # the first producer id no block has taken (when active)

    # -- state ------------------------------------------------------------------------------

    @property
    def active(self):
        """Whether this broker is the active controller."""
        return self._log is not None

    @property
    def image(self):
        """The newest image this controller published (None unless active)."""
        return self._image

    def __repr__(self):
        return (f"Controller(broker={self.broker_id}, active={self.active}, "
                f"epoch={self.epoch})")

    # -- the loop's entry point ---------------------------------------------------------------

    def poll(self, now):
        """Try for the controllership, or check liveness when active; return ``active``.

        Cheap until ``poll_interval`` seconds have passed since the last real poll.
        """
        if now < self._next_poll:
            return self.active
        self._next_poll = now + self.poll_interval
        if self.active and not self._lock.still_held():
            self._resign_replaced()
        if self.active:
            if self.page.version != self._published:
                self._republish()
            self._check_liveness(now)
        else:
            claim = self._lock.claim(int(now * 1e9))
            if claim is not None:
                self._become_active(now, claim)
        if self.active:
            self._check_leader_imbalance(now)
        return self.active

    def poll_now(self):
        """Make the next ``poll`` a real one, whatever ``poll_interval`` says (the broker, the
        moment it serves: its controller counts it alive without waiting)."""
        self._next_poll = float("-inf")

    def _become_active(self, now, claim):
        with claim:
            metadata_log = mr.MetadataLog(self.data_dir, clock=self.clock)
            try:
                image, epoch = metadata_log.replay(self.cluster_id)
                epoch = claim.next_epoch(epoch)
                if claim.displaced is not None:
                    metadata_log.start_segment()
                claim.install(epoch)
            except BaseException:
                metadata_log.abandon()
                raise
        self._log, self._image = metadata_log, image
        self._next_producer_id = metadata_log.next_producer_id
        self.epoch = epoch
        self._start_index = len(image.topics)
        if claim.displaced is not None:
            log.warning("broker %d takes over as controller from broker %d (epoch %d), "
                        "whose heartbeat is older than broker.session.timeout.ms (%d ms)",
                        self.broker_id, claim.displaced.broker_id, claim.displaced.epoch,
                        self._session_timeout_ns // 1_000_000)
        log.info("broker %d is the active controller (epoch %d); metadata log replayed to "
                 "version %d: %d topics, %d brokers", self.broker_id, self.epoch,
                 image.version, len(image.topics), len(image.brokers))
        records = [mr.controller_record(self.broker_id, self.epoch)]
        records += self._liveness_records(now, force=True)
        self._commit(records)

    def _resign_replaced(self):
        """Stop being the controller without writing anything: another broker installed
        a newer generation of the lock while this one was stopped (``controller_lock``)."""
        metadata_log, self._log, self._image = self._log, None, None
        metadata_log.abandon()
        self._lock.release()
        holder = read_holder(self.data_dir)
        successor = (f"broker {holder.broker_id} took over at epoch {holder.epoch}"
                     if holder is not None else "another broker took over")
        log.warning("broker %d is no longer the controller (epoch %d): %s; resigning "
                    "without writing", self.broker_id, self.epoch, successor)

    def _republish(self):
        """Publish this controller's image again: the page's sequence is not the one its
        last publish left (a deposed controller finished a publish it began before it
        was stopped, see ``controller_lock``)."""
        log.warning("broker %d: the metadata page was written by another process since "
                    "this controller's last publish; publishing version %d again",
                    self.broker_id, self._image.version)
        self._publish()

    # -- liveness -----------------------------------------------------------------------------

    def _check_liveness(self, now):
        records = self._liveness_records(now)
        if records:
            self._commit(records)

    def _liveness_records(self, now, force=False):
        """Records for brokers whose liveness changed and the partitions that follow; with
        ``force``, partitions are re-elected even if no broker changed (a new controller)."""
        brokers = dict(self._image.brokers)
        records = []
        for broker_id in sorted(set(self._scan_broker_ids()) | brokers.keys()):
            info, why = self._observe(broker_id, brokers.get(broker_id), now)
            if info is not None and info != brokers.get(broker_id):
                brokers[broker_id] = info
                records.append(mr.broker_record(info))
                log.info("broker %d is %s (pid %d)", broker_id,
                         "alive" if info.alive else f"not alive: {why}", info.pid)
        damage_changed = self._read_damage(brokers)
        if records or force or damage_changed:
            live = {b.id for b in brokers.values() if b.alive}
            records += self._election_records(live)
        return records

    def _read_damage(self, brokers):
        """Re-read the damaged-replicas reports that changed (``damaged_replicas``);
        True if any did."""
        changed = False
        for broker_id in brokers:
            path = report_path(dd.broker_dir(self.data_dir, broker_id))
            try:
                st = os.stat(path)
                stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            except FileNotFoundError:
                stamp = None
            cached = self._damage.get(broker_id)
            if cached is not None and cached[0] == stamp:
                continue
            try:
                reports = read_reports(os.path.dirname(path)) if stamp else []
            except ValueError as exc:
                log.warning("broker %d's damaged replicas cannot be read (%s): taken as "
                            "none", broker_id, exc)
                reports = []
            damaged = {r.key: r.topic_id for r in reports}
            if cached is None or cached[1] != damaged:
                changed = True
                if damaged:
                    log.warning("broker %d reports damaged replicas: %s", broker_id,
                                ", ".join(f"{r.topic}-{r.partition} ("
                                          f"{'offline' if r.offline else 'lost records'}: "
                                          f"log end {r.log_end_before} -> "
                                          f"{r.log_end_after})" for r in reports))
            self._damage[broker_id] = (stamp, damaged)
        return changed

    def _damaged(self, state, topic_id):
        """The replicas of ``state`` whose brokers report them damaged."""
        return tuple(b for b in state.replicas
                     if self._damage.get(b, (None, {}))[1].get(
                         (state.topic, state.partition)) == topic_id)

    def _scan_broker_ids(self):
        try:
            stamp = os.stat(self.data_dir).st_mtime_ns
        except FileNotFoundError:
            stamp = None
        if stamp != self._dir_stamp:
            self._dir_stamp = stamp
            self._broker_ids = dd.broker_ids(self.data_dir)
        return self._broker_ids

    def _observe(self, broker_id, known, now):
        """(BrokerInfo for what broker ``broker_id`` looks like at ``now``, why it is not
        alive); the info is None while it has never been alive (the image lists a broker
        from its first ``serving``)."""
        if not broker_is_alive(self.data_dir, broker_id):
            self._heartbeats.forget(broker_id)
            why = "its process is gone"
        elif (state := self._broker_state(broker_id)).get("state") != dd.STATE_SERVING:
            why = f"it is {state.get('state', 'in no known state')}"
        elif self._heartbeats.older_than(broker_id, int(now * 1e9) - self._session_timeout_ns):
            why = (f"fenced, no heartbeat for more than broker.session.timeout.ms "
                   f"({self._session_timeout_ns // 1_000_000} ms)")
        else:
            pid = state.get("pid")
            return BrokerInfo(broker_id, pid if isinstance(pid, int) else 0, True), None
        if known is None:
            return None, why
        return dataclasses.replace(known, alive=False), why

    def _broker_state(self, broker_id):
        """broker.json of a broker, re-read only when the file changed."""
        path = os.path.join(dd.broker_dir(self.data_dir, broker_id), dd.BROKER_JSON)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return {}
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._states.get(broker_id)
        if cached is None or cached[0] != stamp:
            try:
                state = dd.read_json(path) or {}
            except ValueError:  # not JSON: a hand-edited or foreign file
                log.warning("broker %d: %s is not JSON; treating it as not serving",
                            broker_id, path)
                state = {}
            cached = self._states[broker_id] = (stamp, state)
        return cached[1]

    def _election_records(self, live):
        records = []
        config = dynamic.effective_broker_config(self.broker_config,
                                                 self._image.broker_configs, self.broker_id)
        for topic in self._image.topics.values():
            topic_config = config.topic_config(topic.configs)
            unclean = topic_config["unclean.leader.election.enable"]
            min_isr = topic_config["min.insync.replicas"]
            for state in topic.partitions:
                damaged = self._damaged(state, topic.topic_id)
                current = state if damaged == state.damaged else \
                    dataclasses.replace(state, damaged=damaged)
                new = elect(current, live, unclean, min_isr)
                if new is not state:
                    records.append(mr.partition_record(new))
                    if new.leader != state.leader and (state.leader in damaged
                                                       or new.leader in damaged):
                        log.warning("%s-%d: leader %d (epoch %d), damaged replicas %s",
                                    state.topic, state.partition, new.leader,
                                    new.leader_epoch, list(damaged))
        return records

    # -- CreateTopics ---------------------------------------------------------------------------

    def create_topics(self, topics, validate_only=False):
        """Create topics; ``{name: (error_code, message)}`` in request order (see the
        module doc). Each item of ``topics`` is a dict: ``name``; ``num_partitions`` and
        ``replication_factor`` (-1 or absent: the broker's num.partitions and
        default.replication.factor); ``assignments`` ({partition: [broker ids]}, partitions
        0..n-1, instead of the two counts); ``configs`` ({topic config: value}; None values
        are dropped, as Kafka does)."""
        self._require_active()
        names = [spec["name"] for spec in topics]
        results = {}

        def plans():
            for spec in topics:
                name = spec["name"]
                if names.count(name) > 1:
                    results[name] = (InvalidRequestError.errno,
                                     f"topic {name!r} appears {names.count(name)} times in "
                                     f"the request; each topic may be created once")
                    continue
                yield name, functools.partial(self._plan_topic, spec=spec)

        def next_start():  # each created topic starts its assignment one broker further
            self._start_index += 1

        return self._stage(plans(), validate_only, results, on_staged=next_start)

    def _plan_topic(self, image, spec):
        """The records that create the topic ``spec`` describes, or the error why not."""
        name = validate_topic_name(spec["name"])
        if name in image.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        folded = name.replace(".", "_")
        for other in image.topics:
            if other.replace(".", "_") == folded:
                raise InvalidTopicError(
                    f"topic {name!r} collides with existing topic {other!r}: topic names "
                    f"that differ only in '.' versus '_' collide in metric names")
        configs = {k: v for k, v in (spec.get("configs") or {}).items() if v is not None}
        self.broker_config.topic_config(configs)  # InvalidConfigurationError naming a bad one
        num_partitions = spec.get("num_partitions", -1)
        factor = spec.get("replication_factor", -1)
        assignments = spec.get("assignments")
        if assignments:
            if num_partitions != -1 or factor != -1:
                raise InvalidRequestError(
                    f"topic {name!r}: both num_partitions ({num_partitions}) or "
                    f"replication_factor ({factor}) and a replica assignment were given; "
                    f"give either the counts or the assignment (counts -1)")
            if sorted(assignments) != list(range(len(assignments))):
                raise InvalidReplicationAssignmentError(
                    f"topic {name!r}: the partitions of the replica assignment are "
                    f"{sorted(assignments)}, expected a consecutive 0-based sequence "
                    f"0..{len(assignments) - 1}")
            replica_lists = [list(assignments[p]) for p in range(len(assignments))]
            self._check_assignment(image, name, replica_lists, 0, len(replica_lists[0]))
        else:
            if num_partitions == -1:
                num_partitions = self.broker_config["num.partitions"]
            if factor == -1:
                factor = self.broker_config["default.replication.factor"]
            if num_partitions < 1:
                raise InvalidPartitionsError(
                    f"topic {name!r}: number of partitions {num_partitions} must be larger "
                    f"than 0 (or -1 for the broker's num.partitions)")
            if factor < 1:
                raise InvalidReplicationFactorError(
                    f"topic {name!r}: replication factor {factor} must be larger than 0 (or "
                    f"-1 for the broker's default.replication.factor)")
            live = image.live_brokers()
            self._check_factor(name, factor, live)
            replica_lists = assign_replicas(live, num_partitions, factor,
                                            self._start_index % len(live))
        records = [mr.topic_record(name, dd.new_uuid(), configs,
                                   internal=name in INTERNAL_TOPICS)]
        records += self._new_partitions(image, name, replica_lists, 0)
        return records

    @staticmethod
    def _check_factor(name, factor, live):
        if factor > len(live):
            raise InvalidReplicationFactorError(
                f"topic {name!r}: replication factor {factor} larger than available "
                f"brokers: {len(live)} (alive: {live})")

    @staticmethod
    def _check_assignment(image, name, replica_lists, first_partition, factor):
        """Kafka's checks of a manual replica assignment (INVALID_REPLICA_ASSIGNMENT)."""
        for n, replicas in enumerate(replica_lists, start=first_partition):
            where = f"topic {name!r} partition {n}"
            if not replicas:
                raise InvalidReplicationAssignmentError(
                    f"{where}: the manual replica assignment is an empty replica list")
            for broker in replicas:
                if replicas.count(broker) > 1:
                    raise InvalidReplicationAssignmentError(
                        f"{where}: the manual replica assignment {replicas} includes broker "
                        f"{broker} more than once")
                if broker not in image.brokers:
                    raise InvalidReplicationAssignmentError(
                        f"{where}: the manual replica assignment {replicas} includes broker "
                        f"{broker}, but no such broker is registered (known: "
                        f"{sorted(image.brokers)})")
            if len(replicas) != factor:
                raise InvalidReplicationAssignmentError(
                    f"{where}: the manual replica assignment {replicas} has "
                    f"{len(replicas)} replica(s), inconsistent with the topic's other "
                    f"partitions, which have {factor}")
            if not any(image.brokers[b].alive for b in replicas):
                raise InvalidReplicationAssignmentError(
                    f"{where}: none of the brokers of the manual replica assignment "
                    f"{replicas} is alive")

    @staticmethod
    def _new_partitions(image, name, replica_lists, first_partition):
        """Partition records for new partitions: the first live replica leads, epoch 0, and
        the ISR is every live replica, in replica order (Kafka's rule: all of them
        have the same, empty, log)."""
        live = set(image.live_brokers())
        records = []
        for n, replicas in enumerate(replica_lists, start=first_partition):
            leader = next(b for b in replicas if b in live)
            isr = tuple(b for b in replicas if b in live)
            records.append(mr.partition_record(
                PartitionState(name, n, leader, 0, tuple(replicas), isr)))
        return records

    def _check_fits(self, image, what):
        size = len(image.to_json())
        if size > self.page.capacity:
            raise InvalidPartitionsError(
                f"{what}: the metadata image would be {size} bytes, more than the "
                f"{self.page.capacity} the metadata page holds")

    def _check_partitions_per_broker(self, image, new, what):
        """POLICY_VIOLATION if ``new`` puts more partition replicas than
        ``ringlog.max.partitions.per.broker`` on a broker it adds replicas to: Kafka's
        proposed ``max.broker.partitions`` (KIP-578), checked before anything is created,
        as a policy of the cluster refuses a request that is otherwise valid."""
        limit, source = self.broker_config.max_partitions_per_broker()
        before, after = _replicas_per_broker(image), _replicas_per_broker(new)
        for broker, count in sorted(after.items()):
            if count > limit and count > before.get(broker, 0):
                raise PolicyViolationError(
                    f"{what}: broker {broker} would host {count} partition replicas, more "
                    f"than ringlog.max.partitions.per.broker {limit} ({source})")

    # -- DeleteTopics ---------------------------------------------------------------------------

    def delete_topics(self, names):
        """Delete topics; ``{name: (error_code, message)}`` in request order."""
        self._require_active()
        names = list(names)
        results = {}
        records = []
        for name in names:
            if names.count(name) > 1:
                results[name] = (InvalidRequestError.errno,
                                 f"topic {name!r} appears {names.count(name)} times in the "
                                 f"request; each topic may be deleted once")
            elif not self.broker_config["delete.topic.enable"]:
                results[name] = (TopicDeletionDisabledError.errno,
                                 f"topic {name!r} was not deleted: topic deletion is disabled "
                                 f"(delete.topic.enable=false)")
            elif name not in self._image.topics:
                results[name] = (UnknownTopicOrPartitionError.errno,
                                 f"topic {name!r} does not exist")
            else:
                results[name] = NO_ERROR
                records.append(mr.remove_topic_record(name))
        if records:
            self._commit(records)
        return results

    # -- CreatePartitions -----------------------------------------------------------------------

    def create_partitions(self, requests, validate_only=False):
        """Grow topics: ``requests`` is ``{name: (total count, assignments)}``, assignments
        None or one replica list per *new* partition (Kafka's CreatePartitions form).
        Returns ``{name: (error_code, message)}``."""
        self._require_active()
        plans = ((name, functools.partial(self._plan_partitions, name=name, count=count,
                                          assignments=assignments))
                 for name, (count, assignments) in requests.items())
        return self._stage(plans, validate_only, {})

    def _stage(self, plans, validate_only, results, on_staged=None):
        """Create topics or partitions: for each ``(name, plan)`` in turn, ``plan(image)``
        gives its metadata records against the image staged so far; applied, they must
        fit the page. ``results[name]`` is NO_ERROR or the error of that one; unless
        ``validate_only`` its records are staged (``on_staged()`` then called) and all
        are committed together at the end. Returns ``results``."""
        staged = self._image
        records = []
        for name, plan in plans:
            try:
                planned = plan(staged)
                new = mr.apply(staged, planned, staged.version)
                self._check_partitions_per_broker(staged, new, f"topic {name!r}")
                self._check_fits(new, f"topic {name!r}")
            except BrokerResponseError as exc:
                results[name] = _error(exc)
                continue
            results[name] = NO_ERROR
            if not validate_only:
                staged = new
                records += planned
                if on_staged is not None:
                    on_staged()
        if records:
            self._commit(records)
        return results

    def _plan_partitions(self, image, name, count, assignments):
        topic = image.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        current = len(topic.partitions)
        if count < current:
            raise InvalidPartitionsError(
                f"topic {name!r} currently has {current} partitions, which is higher than "
                f"the requested {count}")
        if count == current:
            raise InvalidPartitionsError(f"topic {name!r} already has {current} partitions")
        adding = count - current
        factor = len(topic.partitions[0].replicas)
        if assignments:
            replica_lists = [list(replicas) for replicas in assignments]
            if len(replica_lists) != adding:
                raise InvalidReplicationAssignmentError(
                    f"topic {name!r}: increasing the number of partitions by {adding} but "
                    f"{len(replica_lists)} assignment(s) were given")
            self._check_assignment(image, name, replica_lists, current, factor)
        else:
            live = image.live_brokers()
            self._check_factor(name, factor, live)
            head = topic.partitions[0].replicas[0]
            start = next((i for i, b in enumerate(live) if b >= head), 0)
            replica_lists = assign_replicas(live, adding, factor, start,
                                            start_partition=current)
        return self._new_partitions(image, name, replica_lists, current)

    # -- AlterPartition -------------------------------------------------------------------------

    def alter_partition(self, broker_id, changes):
        """Apply the ISR ``changes`` (IsrChange) broker ``broker_id`` asks for as leader, with
        the checks of Kafka's ReplicationControlManager, in this order:

        - no such topic or partition: UNKNOWN_TOPIC_OR_PARTITION;
        - a leader epoch other than the partition's: FENCED_LEADER_EPOCH (the requester
          missed a leader change);
        - a requester that is not the leader: NOT_LEADER_OR_FOLLOWER;
        - a partition epoch other than the partition's: INVALID_UPDATE_VERSION (it missed
          an ISR change, by the controller or an earlier request);
        - a new ISR without the leader, with a broker that holds no replica of the
          partition, or adding a broker that is not alive (fenced, shutting down, never
          registered) or whose replica is damaged (``damaged_replicas``): INELIGIBLE_REPLICA.

        An accepted change keeps the leader and its epoch, sets the ISR (and the ELR,
        KIP-966: the replicas that leave an ISR smaller than min.insync.replicas join it,
        the ones that join leave it, it empties once the ISR is large enough) and bumps
        the partition epoch; one equal to the current ISR changes nothing. Changes are checked
        in order against the state the earlier ones made (a second change of the same
        partition in one call names a stale partition epoch). Returns ``{(topic,
        partition): (error_code, state)}``: the partition's new state (or its unchanged
        state) with 0, or None with the error. The accepted ones are one batch in the log.
        """
        self._require_active()
        results = {}
        records = []
        staged = self._image
        for change in changes:
            key = (change.topic, change.partition)
            try:
                new = self._plan_isr(staged, broker_id, change)
            except BrokerResponseError as exc:
                results[key] = (exc.errno, None)
                log.info("AlterPartition of %s-%d by broker %d refused: %s", *key, broker_id,
                         exc)
                continue
            results[key] = (0, new)
            if new is not staged.partition(*key):
                record = mr.partition_record(new)
                staged = mr.apply(staged, [record], staged.version)
                records.append(record)
                log.info("broker %d changed the ISR of %s-%d to %s (partition epoch %d)",
                         broker_id, *key, list(new.isr), new.partition_epoch)
        if records:
            self._commit(records)
        return results

    def _plan_isr(self, image, broker_id, change):
        """The new state of ``change``'s partition, or the error why not (see
        ``alter_partition``)."""
        where = f"{change.topic}-{change.partition}"
        state = image.partition(change.topic, change.partition)
        if state is None:
            raise UnknownTopicOrPartitionError(f"partition {where} does not exist")
        if change.leader_epoch != state.leader_epoch:
            raise FencedLeaderEpochError(
                f"{where}: leader epoch {change.leader_epoch} in the request, the partition "
                f"is at {state.leader_epoch}")
        if broker_id != state.leader:
            raise NotLeaderForPartitionError(
                f"{where}: broker {broker_id} asked, the leader is {state.leader}")
        if change.partition_epoch != state.partition_epoch:
            raise InvalidUpdateVersionError(
                f"{where}: partition epoch {change.partition_epoch} in the request, the "
                f"partition is at {state.partition_epoch}")
        new_isr = tuple(change.new_isr)
        if state.leader not in new_isr:
            raise IneligibleReplicaError(
                f"{where}: the new ISR {list(new_isr)} lacks the leader {state.leader}")
        for broker in new_isr:
            if new_isr.count(broker) > 1 or broker not in state.replicas:
                raise IneligibleReplicaError(
                    f"{where}: the new ISR {list(new_isr)} names broker {broker} "
                    f"{'twice' if broker in state.replicas else 'which holds no replica'} "
                    f"(replicas {list(state.replicas)})")
            info = image.brokers.get(broker)
            if broker not in state.isr and (info is None or not info.alive):
                raise IneligibleReplicaError(
                    f"{where}: broker {broker} cannot join the ISR: it is not alive "
                    f"(fenced, shutting down or not registered)")
            if broker not in state.isr and broker in state.damaged:
                raise IneligibleReplicaError(
                    f"{where}: broker {broker} cannot join the ISR: it reports its replica "
                    f"damaged (it has not caught up with what it lost yet)")
        if new_isr == state.isr:
            return state
        topic = image.topics[change.topic]
        config = dynamic.effective_broker_config(self.broker_config, image.broker_configs,
                                                 self.broker_id)
        min_isr = config.topic_config(topic.configs)["min.insync.replicas"]
        if len(new_isr) >= min_isr:
            elr = ()
        else:  # KIP-966: who leaves an ISR below min.insync.replicas stays eligible
            elr = tuple(b for b in state.replicas if b not in new_isr and (
                b in state.elr or (b in state.isr and b not in state.damaged)))
        return dataclasses.replace(state, isr=new_isr, elr=elr,
                                   partition_epoch=state.partition_epoch + 1)

    # -- AllocateProducerIds ---------------------------------------------------------------------

    def allocate_producer_ids(self, broker_id, broker_epoch=-1):
        """The next block of ``producer_ids.BLOCK_SIZE`` producer ids for broker
        ``broker_id`` (Kafka's ``ProducerIdControlManager.generateNextProducerId``): the
        ``producer_ids`` record moving past it is in the log, fsynced, before the block is
        returned, so no controller ever hands its ids out again. ``broker_epoch`` is
        recorded, not checked (ringlog has no broker epochs). Raises UnknownError when
        the id space is used up, NotControllerError when not active."""
        self._require_active()
        block = producer_ids.next_block(self._next_producer_id, broker_id)
        self._commit([mr.producer_ids_record(broker_id, broker_epoch,
                                             block.next_block_first_id)])
        self._next_producer_id = block.next_block_first_id
        log.info("producer ids %d..%d go to broker %d", block.first_id, block.last_id,
                 broker_id)
        return block

    # -- AlterConfigs, IncrementalAlterConfigs --------------------------------------------------

    def alter_configs(self, resources, validate_only=False, replace=False):
        """Change dynamic configs: ``resources`` are ``(resource_type, name, ops)``, ops
        ``(key, AlterConfigOp, value)``; ``replace``: AlterConfigs (the configs given
        replace all the resource's), else IncrementalAlterConfigs. Returns ``{(resource_type,
        name): (error_code, message)}``; the accepted changes are committed as one batch."""
        self._require_active()
        keys = [(resource_type, name) for resource_type, name, _ in resources]
        results = {}
        records = []
        staged = self._image
        for resource_type, name, ops in resources:
            key = (resource_type, name)
            if keys.count(key) > 1:
                results[key] = (InvalidRequestError.errno,
                                f"resource {name!r} of type {resource_type} appears "
                                f"{keys.count(key)} times in the request")
                continue
            kind = (mr.TOPIC_RESOURCE if resource_type == dynamic.ConfigResourceType.TOPIC
                    else mr.BROKER_RESOURCE)
            try:
                changes = dynamic.plan_change(self.broker_config, staged, resource_type,
                                              name, ops, replace)
                record = mr.config_record(kind, name, changes)
                new = mr.apply(staged, [record], staged.version)
                if len(new.to_json()) > self.page.capacity:
                    raise InvalidConfigurationError(
                        f"{kind} {name!r}: with these configs the metadata image would be "
                        f"{len(new.to_json())} bytes, more than the {self.page.capacity} "
                        f"the metadata page holds")
            except BrokerResponseError as exc:
                results[key] = _error(exc)
                continue
            results[key] = NO_ERROR
            if changes and not validate_only:
                staged = new
                records.append(record)
        if records:
            self._commit(records)
        return results

    # -- ElectLeaders and the leader rebalance --------------------------------------------------

    def elect_leaders(self, election_type, partitions=None):
        """ElectLeaders (KIP-460) for ``partitions`` (``{topic: [partition ids]}``; None:
        every partition). Returns ``{(topic, partition): (error_code, message)}`` in request
        order; with None, partitions that need no election are left out (as Kafka does).

        PREFERRED: ``replicas[0]`` takes over if it is alive and in the ISR
        (PREFERRED_LEADER_NOT_AVAILABLE otherwise; ELECTION_NOT_NEEDED if it leads).
        UNCLEAN: only a partition without a leader: the first live ISR member, else the
        first live replica with an ISR of itself (ELIGIBLE_LEADERS_NOT_AVAILABLE if none
        is alive; ELECTION_NOT_NEEDED if it has a leader). Unknown topics and partitions:
        UNKNOWN_TOPIC_OR_PARTITION. Every change bumps the leader epoch; all of them are
        committed as one batch."""
        self._require_active()
        try:
            election_type = ElectionType(election_type)
        except ValueError:
            raise InvalidRequestError(
                f"election type {election_type} is neither PREFERRED (0) nor UNCLEAN "
                f"(1)") from None
        everything = partitions is None
        if everything:
            partitions = {name: [state.partition for state in topic.partitions]
                          for name, topic in self._image.topics.items()}
        live = set(self._image.live_brokers())
        results = {}
        records = []
        for topic, ids in partitions.items():
            for partition in ids:
                if (topic, partition) in results:
                    continue
                result, new = self._elect_leader(topic, partition, election_type, live)
                if new is not None:
                    records.append(mr.partition_record(new))
                    log.info("%s election for %s-%d: leader %d (epoch %d)",
                             election_type.name, topic, partition, new.leader,
                             new.leader_epoch)
                results[(topic, partition)] = result
        if records:
            self._commit(records)
        if everything:
            results = {key: result for key, result in results.items()
                       if result[0] != ElectionNotNeededError.errno}
        return results

    def _elect_leader(self, topic, partition, election_type, live):
        """``((error_code, message), new PartitionState or None)`` of one election."""
        info = self._image.topics.get(topic)
        if info is None or not 0 <= partition < len(info.partitions):
            what = (f"topic {topic!r} does not exist" if info is None else
                    f"topic {topic!r} has no partition {partition} (it has "
                    f"{len(info.partitions)})")
            return (UnknownTopicOrPartitionError.errno, what), None
        state = info.partitions[partition]
        name = f"{topic}-{partition}"
        if election_type == ElectionType.PREFERRED:
            preferred = state.replicas[0]
            if state.leader == preferred:
                return (ElectionNotNeededError.errno,
                        f"{name}: the preferred replica {preferred} leads already"), None
            new = elect_preferred(state, live)
            if new is None:
                why = ("not alive" if preferred not in live else
                       f"not in the ISR {_ids(state.isr)}")
                return (PreferredLeaderNotAvailableError.errno,
                        f"{name}: the preferred replica {preferred} is {why}"), None
            return NO_ERROR, new
        if state.leader != NO_LEADER:
            return (ElectionNotNeededError.errno,
                    f"{name}: broker {state.leader} leads it; unclean election is only "
                    f"for partitions without a leader"), None
        new = elect(state, live, unclean=True)
        if new.leader == NO_LEADER:
            return (EligibleLeadersNotAvailableError.errno,
                    f"{name}: none of its replicas {_ids(state.replicas)} is alive"), None
        return NO_ERROR, new

    def _check_leader_imbalance(self, now):
        """The automatic preferred-replica election (module doc), due every
        ``leader.imbalance.check.interval.seconds`` after this broker became active."""
        if not self.broker_config["auto.leader.rebalance.enable"]:
            return
        interval = self.broker_config["leader.imbalance.check.interval.seconds"]
        if self._next_rebalance is None or self._next_rebalance[0] != self.epoch:
            self._next_rebalance = (self.epoch, now + interval)
            return
        if now < self._next_rebalance[1]:
            return
        self._next_rebalance = (self.epoch, now + interval)
        states = [state for topic in self._image.topics.values() for state in topic.partitions]
        moving = imbalanced_partitions(
            states, set(self._image.live_brokers()),
            self.broker_config["leader.imbalance.per.broker.percentage"])
        if not moving:
            return
        partitions = {}
        for state in moving:
            partitions.setdefault(state.topic, []).append(state.partition)
        results = self.elect_leaders(ElectionType.PREFERRED, partitions)
        log.info("leader rebalance: preferred replicas lead %d partition(s) again",
                 sum(1 for code, _ in results.values() if code == 0))

    # -- committing -----------------------------------------------------------------------------

    def _commit(self, records):
        """Append ``records`` as one batch (fsynced), apply them, publish the new image;
        each write fenced (NotControllerError, after resigning, if this controller was
        replaced)."""
        self._fence()
        version = self._log.append(records, self.epoch)
        self._image = mr.apply(self._image, records, version)
        self._publish()

    def _publish(self):
        self._fence()
        self.page.publish(self._image)
        self._published = self.page.version

    def _fence(self):
        """Raise NotControllerError, after resigning, unless the lock is still this
        controller's generation and the metadata log ends where it left it."""
        if self._lock.still_held() and not self._log.written_elsewhere():
            return
        epoch = self.epoch
        self._resign_replaced()
        raise NotControllerError(
            f"broker {self.broker_id} is no longer the controller: another broker took "
            f"over while it was stopped (its epoch {epoch} is not the newest)")

    def _require_active(self):
        if not self.active:
            raise NotControllerError(
                f"broker {self.broker_id} is not the active controller; the metadata page "
                f"names the one that is")

    # -- shutdown -------------------------------------------------------------------------------

    def close(self):
        """Close the metadata log and release the controllership (another broker takes
        over at its next poll). Safe to call twice."""
        if self._log is not None:
            if not self._lock.still_held():
                self._resign_replaced()  # nothing of a deposed controller's is written
            else:
                metadata_log, self._log, self._image = self._log, None, None
                metadata_log.close()
                log.info("broker %d resigned as controller (epoch %d)", self.broker_id,
                         self.epoch)
        self._heartbeats.close()
        self._lock.close()


def _replicas_per_broker(image):
    """Broker id -> the partition replicas ``image`` places on it."""
    counts = {}
    for topic in image.topics.values():
        for state in topic.partitions:
            for broker in state.replicas:
                counts[broker] = counts.get(broker, 0) + 1
    return counts


def _ids(ids):
    return "[" + ",".join(map(str, ids)) + "]"


def _error(exc):
    """(error code, message) of a caught BrokerResponseError."""
    return exc.errno, (exc.args[0] if exc.args else exc.message)
