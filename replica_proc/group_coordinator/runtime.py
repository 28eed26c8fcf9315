"""The group coordinator inside the broker: ``__consumer_offsets`` and the I/O around the
``GroupCoordinator`` state machine (``group_coordinator.coordinator``, whose module doc
is the contract this module fulfils).

**The topic.** ``coordinator_node(group_id)`` is FindCoordinator's answer: the leader of
``__consumer_offsets`` partition ``partition_for(group_id)`` (Kafka's
GroupMetadataManager.partitionFor). The first group request that finds no such topic creates it
through the controller as auto-created topics are
(``coordinator_common.topic.CoordinatorTopic.offsets``, which says how); COORDINATOR_NOT_AVAILABLE
until it exists and the group's partition has a leader.

**Leadership and the store** are ``coordinator_common.log.CoordinatorLog``'s (its module doc):
a ``__consumer_offsets`` partition this broker comes to lead is read up to its LEO and
``load``ed (``begin_load`` first), synchronously, so COORDINATOR_LOAD_IN_PROGRESS is
never answered here; one it no longer leads is ``unload``ed (its parked requests get
NOT_COORDINATOR); the coordinator's ``store`` appends with acks=all and calls
back once replicated, after ``offsets.commit.timeout.ms`` at the latest, reading
``offsets.load.buffer.size`` bytes at a time.

**Transactions.** The partitions are loaded with their transactional records and markers
(``CoordinatorLog``'s ``transactional``); ``on_marker`` is the WriteTxnMarkers handler's
hook: a COMMIT or ABORT marker appended to a ``__consumer_offsets`` partition completes
that producer's pending transactional offsets there.

**Timers.** ``expire(now)`` answers writes whose time ran out and runs the coordinator's
due timers; ``next_deadline()`` is the earliest of both (the loop waits no longer).

Owner: the broker's loop thread, the only caller.
"""
from __future__ import annotations

from cluster.metadata.model import GROUP_METADATA_TOPIC
from replica_proc.coordinator_common.log import CoordinatorLog
from replica_proc.coordinator_common.topic import CoordinatorTopic
from replica_proc.group_coordinator.coordinator import GroupCoordinator
from segments.clock import wall_clock_ms


class GroupRuntime:
    """The broker's group coordinator and its ``__consumer_offsets`` partitions (module doc).

    ``replicas``: the ReplicaManager; ``metadata``: the BrokerMetadata; ``create_topic``:
    ``AdminHandler.create_topic``; ``clock``: the loop's monotonic seconds;
    ``on_append(key, size)`` and ``on_high_watermark(partition, old_hw, size)``: the
    request handler's hooks an append must call, as a Produce's does.
    """

    def __init__(self, config, replicas, metadata, create_topic, clock, on_append,
                 on_high_watermark):
        self._metadata = metadata
        self._topic = CoordinatorTopic.offsets(config, metadata, create_topic)
        self._clock = clock
        clock_ms = replicas.clock or wall_clock_ms
        self.log = CoordinatorLog(
            GROUP_METADATA_TOPIC, replicas, clock, clock_ms, on_append, on_high_watermark,
            config["offsets.load.buffer.size"], config["offsets.commit.timeout.ms"],
            self._load, self._unload, transactional=True)
        self.coordinator = GroupCoordinator(config, self.log.store, clock_ms)

    # -- the topic --------------------------------------------------------------------------

    def topic(self):
        """``__consumer_offsets``'s TopicInfo, or None after asking the controller to create
        it."""
        return self._topic.info()

    def coordinator_node(self, group_id):
        """``(error code, message, node id)`` of ``group_id``'s coordinator: the leader of
        its ``__consumer_offsets`` partition (the topic is created on first use)."""
        return self._topic.coordinator_node(group_id)

    # -- leadership -------------------------------------------------------------------------

    def on_change(self, keys):
        """Partitions in ``keys`` changed: answer the writes that completes, then load the
        ``__consumer_offsets`` partitions this broker came to lead, unload the others."""
        info = self._metadata.image.topics.get(GROUP_METADATA_TOPIC)
        if info is not None:
            self.coordinator.partitions_count = len(info.partitions)
        self.log.on_change(keys)

    def _load(self, index, leader_epoch, stored):
        self.coordinator.begin_load(index)
        self.coordinator.load(index, stored, self._clock())

    def _unload(self, index):
        self.coordinator.unload(index)

    def on_marker(self, topic, index, producer_id, commit):
        """A COMMIT (``commit``) or ABORT marker of ``producer_id`` was appended to
        ``topic``-``index``: complete its transactional offsets there."""
        if topic == GROUP_METADATA_TOPIC:
            self.coordinator.complete_transaction(index, producer_id, commit)

    # -- appends and timers ------------------------------------------------------------------

    def on_high_watermark(self, key):
        """The HW of ``key`` moved: call back the writes it replicated."""
        self.log.on_high_watermark(key)

    def expire(self, now):
        """Answer the writes whose time ran out (REQUEST_TIMED_OUT); run the coordinator's
        due timers."""
        self.log.expire(now)
        self.coordinator.poll(now)

    def next_deadline(self):
        deadlines = [d for d in (self.log.next_deadline(),
                                 self.coordinator.next_deadline()) if d is not None]
        return min(deadlines) if deadlines else None
