"""The controller: one broker at a time owns the cluster's metadata and publishes it.

Every broker makes a ``Controller`` and calls ``poll(now)`` from its loop (every iteration
is fine: it does nothing until ``poll_interval`` has passed). Election is an exclusive
flock on ``D/controller.lock`` (the kernel drops it when the holder dies, like ZooKeeper's
ephemeral ``/controller`` node): a broker that is not the controller tries it at every
poll. The one that gets it becomes *active*:

1. it opens the metadata log (``metadata_log.MetadataLog``: recovery, then replay of
   every record into the image the last controller published);
2. it appends a ``controller`` record (controller epoch + 1) and whatever the liveness of
   the brokers now says (below), and publishes the image on the metadata page.

While active, each poll checks broker liveness: broker ``b`` is alive while some process
holds ``D/broker-<b>/broker.lock`` (``broker_lock``) and its ``broker.json`` says
``serving``. When that changes the controller appends ``broker`` records and, for every
partition, ``placement.elect`` (leaders from the live ISR, ``unclean.leader.election.
enable`` per topic, leader epoch + 1 on every leader change), then publishes.

The broker's request handler calls, on the active controller only (others raise
NotControllerError, which the handler turns into the NOT_CONTROLLER error code):

- ``create_topics([{"name", "num_partitions", "replication_factor", "assignments",
  "configs"}], validate_only)`` (CreateTopics),
- ``delete_topics([names])`` (DeleteTopics),
- ``create_partitions({name: (count, assignments)}, validate_only)`` (CreatePartitions),
- ``alter_configs([(resource_type, name, ops)], validate_only, replace)`` (AlterConfigs
  with ``replace``, IncrementalAlterConfigs without; ``cluster.config.dynamic``), keyed
  by ``(resource_type, name)``,

each returning ``{topic: (error_code, error_message)}`` — ``(0, None)`` on success, else
Kafka's code and a message naming the bad value — as the responses carry them. All
accepted changes of one call go to the log as one batch, fsynced, before the new image is
published: once a caller has a success, the change survives a crash of any process.

Ownership: a Controller belongs to one broker's loop thread; every method is called from
it. ``close()`` (at broker shutdown) releases the controllership and is safe to call twice.
"""
from __future__ import annotations

import dataclasses
import fcntl
import functools
import logging
import os
import time

from cluster.config import dynamic
from cluster.errors import (
    BrokerResponseError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    NotControllerError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    TopicDeletionDisabledError,
    UnknownTopicOrPartitionError,
)
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import broker_is_alive
from cluster.metadata.model import BrokerInfo, PartitionState, validate_topic_name
from replica_proc.controller import metadata_log as mr
from replica_proc.controller.placement import assign_replicas, elect

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.05
"""Seconds between two election attempts or liveness checks."""

NO_ERROR = (0, None)


def _wall_clock_ms():
    return time.time_ns() // 1_000_000


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
        self.clock = clock or _wall_clock_ms
        self.poll_interval = poll_interval
        #: The controller epoch (0 until this broker first becomes active).
        self.epoch = 0
        self._lock_fd = None
        self._log = None
        self._image = None
        self._broker_ids = []
        self._dir_stamp = None  # mtime of the data directory when _broker_ids was read
        self._states = {}  # broker id -> (stat of broker.json, its contents)
        self._next_poll = float("-inf")
        self._start_index = 0

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
        if self.active:
            self._check_liveness()
        elif self._try_lock():
            self._become_active()
        return self.active

    def _try_lock(self):
        if self._lock_fd is None:
            os.makedirs(self.data_dir, exist_ok=True)
            self._lock_fd = os.open(os.path.join(self.data_dir, dd.CONTROLLER_LOCK),
                                    os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _become_active(self):
        try:
            metadata_log = mr.MetadataLog(self.data_dir, clock=self.clock)
            image, epoch = metadata_log.replay(self.cluster_id)
        except BaseException:
            self._release_lock()
            raise
        self._log, self._image = metadata_log, image
        self.epoch = epoch + 1
        self._start_index = len(image.topics)
        log.info("broker %d is the active controller (epoch %d); metadata log replayed to "
                 "version %d: %d topics, %d brokers", self.broker_id, self.epoch,
                 image.version, len(image.topics), len(image.brokers))
        records = [mr.controller_record(self.broker_id, self.epoch)]
        records += self._liveness_records(force=True)
        self._commit(records)

    # -- liveness -----------------------------------------------------------------------------

    def _check_liveness(self):
        records = self._liveness_records()
        if records:
            self._commit(records)

    def _liveness_records(self, force=False):
        """Records for brokers whose liveness changed and the partitions that follow; with
        ``force``, partitions are re-elected even if no broker changed (a new controller)."""
        brokers = dict(self._image.brokers)
        records = []
        for broker_id in sorted(set(self._scan_broker_ids()) | brokers.keys()):
            info = self._observe(broker_id, brokers.get(broker_id))
            if info is not None and info != brokers.get(broker_id):
                brokers[broker_id] = info
                records.append(mr.broker_record(info))
                log.info("broker %d is %s (pid %d)", broker_id,
                         "alive" if info.alive else "not alive", info.pid)
        if records or force:
            live = {b.id for b in brokers.values() if b.alive}
            records += self._election_records(live)
        return records

    def _scan_broker_ids(self):
        try:
            stamp = os.stat(self.data_dir).st_mtime_ns
        except FileNotFoundError:
            stamp = None
        if stamp != self._dir_stamp:
            self._dir_stamp = stamp
            self._broker_ids = dd.broker_ids(self.data_dir)
        return self._broker_ids

    def _observe(self, broker_id, known):
        """BrokerInfo for what broker ``broker_id`` looks like now; None while it has never
        been alive (the image lists a broker from its first ``serving``)."""
        if broker_is_alive(self.data_dir, broker_id):
            state = self._broker_state(broker_id)
            if state.get("state") == dd.STATE_SERVING:
                pid = state.get("pid")
                return BrokerInfo(broker_id, pid if isinstance(pid, int) else 0, True)
        if known is None:
            return None
        return dataclasses.replace(known, alive=False)

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
            unclean = config.topic_config(topic.configs)["unclean.leader.election.enable"]
            for state in topic.partitions:
                new = elect(state, live, unclean)
                if new is not state:
                    records.append(mr.partition_record(new))
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
        records = [mr.topic_record(name, dd.new_uuid(), configs)]
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
        the ISR is every live replica, in replica order (Kafka's rule, R11: all of them
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

    # -- committing -----------------------------------------------------------------------------

    def _commit(self, records):
        """Append ``records`` as one batch (fsynced), apply them, publish the new image."""
        version = self._log.append(records)
        self._image = mr.apply(self._image, records, version)
        self.page.publish(self._image)

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
            metadata_log, self._log, self._image = self._log, None, None
            metadata_log.close()
            log.info("broker %d resigned as controller (epoch %d)", self.broker_id,
                     self.epoch)
        self._release_lock()

    def _release_lock(self):
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            os.close(fd)


def _replicas_per_broker(image):
    """Broker id -> the partition replicas ``image`` places on it."""
    counts = {}
    for topic in image.topics.values():
        for state in topic.partitions:
            for broker in state.replicas:
                counts[broker] = counts.get(broker, 0) + 1
    return counts


def _error(exc):
    """(error code, message) of a caught BrokerResponseError."""
    return exc.errno, (exc.args[0] if exc.args else exc.message)
