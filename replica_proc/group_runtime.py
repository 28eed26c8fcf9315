"""The group coordinator inside the broker: ``__consumer_offsets`` and the I/O around the
``GroupCoordinator`` state machine (``group_coordinator.coordinator``, whose module doc
is the contract this module fulfils).

**The topic.** ``coordinator_node(group_id)`` is FindCoordinator's answer: the leader of
``__consumer_offsets`` partition ``partition_for(group_id)`` (G1). The first group request
that finds no such topic creates it — ``offsets.topic.num.partitions`` partitions,
replication factor ``min(offsets.topic.replication.factor, live brokers)`` (so a cluster
of fewer brokers than the factor still gets its coordinators; Kafka refuses with
COORDINATOR_NOT_AVAILABLE instead), ``cleanup.policy=compact``, ``segment.bytes`` =
``offsets.topic.segment.bytes``, internal — through the controller as auto-created topics
are (``AdminHandler.create_topic``); COORDINATOR_NOT_AVAILABLE until it exists and the
group's partition has a leader.

**Leadership.** ``on_change(keys)`` (every image the broker applies): for each
``__consumer_offsets`` partition this broker now leads (with its log online) and had not
loaded, or leads in a new leader epoch, the coordinator ``begin_load``s it, its log is read
from the log start to the log end offset and ``load``ed; a partition it no longer leads is
``unload``ed (its parked requests get NOT_COORDINATOR). Loading reads up to the LEO, as
Kafka's ``GroupMetadataManager`` does, not the HW: the new leader's log is what every
replica converges to (followers truncate to it), so the records above its HW — written by
the previous leader, not yet acknowledged — are replicated by the new leader's followers
and become committed; leaving them out would make the loaded state disagree with the
log the coordinator goes on appending to. The read is synchronous, in the loop thread
(``offsets.load.buffer.size`` bytes per read): the partition is loaded before any request
sees it, so COORDINATOR_LOAD_IN_PROGRESS is never answered here.

**The store.** ``store(partition, [(key, value)], callback)`` builds one batch of those
records (``RecordBatchBuilder``, no compression, the log clock's time), appends it as
leader with acks=all semantics (NOT_ENOUGH_REPLICAS when the ISR is below
min.insync.replicas; KAFKA_STORAGE_ERROR, NOT_LEADER_OR_FOLLOWER: nothing appended) and
calls back once the HW has passed the batch — at once when it already has (a lone
replica), else from a produce purgatory of its own (``delayed_produce``) woken by the same
HW-move and metadata-change hooks as acks=all Produce requests: 0, or
NOT_ENOUGH_REPLICAS_AFTER_APPEND, or NOT_LEADER_OR_FOLLOWER when leadership is lost, or
REQUEST_TIMED_OUT after ``offsets.commit.timeout.ms``. The coordinator maps these codes.
Callbacks come in append order per partition (the HW only grows; expiries share one
timeout). Appends wake followers' parked fetches and consumers' fetches as a Produce's do.

**Timers.** ``expire(now)`` answers writes whose time ran out and runs the coordinator's
due timers; ``next_deadline()`` is the earliest of both (the loop waits no longer).

Owner: the broker's loop thread, the only caller.
"""
from __future__ import annotations

import logging
import time

from cluster.errors import CoordinatorNotAvailableError
from cluster.metadata.model import GROUP_METADATA_TOPIC
from cluster.protocol.produce_response import PartitionResult
from replica_proc.coordinator_partitioning import partition_for
from replica_proc.delayed_produce import DelayedProduce, PendingPartition, ProducePurgatory
from replica_proc.group_coordinator.coordinator import GroupCoordinator
from replica_proc.responses import code_of
from segments.batch_header import iter_batches
from segments.records import RecordBatch, RecordBatchBuilder

log = logging.getLogger(__name__)

ACKS_ALL = -1
#: A batch as large as the records make it: a store is one batch, whatever its size
#: (max.message.bytes refuses one too large: RECORD_TOO_LARGE, mapped by the coordinator).
_UNBOUNDED_BATCH = 2**31 - 1


def _system_clock_ms():
    return int(time.time() * 1000)


class GroupRuntime:
    """The broker's group coordinator and its ``__consumer_offsets`` partitions (module doc).

    ``replicas``: the ReplicaManager; ``metadata``: the BrokerMetadata; ``create_topic``:
    ``AdminHandler.create_topic``; ``clock``: the loop's monotonic seconds;
    ``on_append(key, size)`` and ``on_high_watermark(partition, old_hw, size)``: the
    request handler's hooks an append must call, as a Produce's does.
    """

    def __init__(self, config, replicas, metadata, create_topic, clock, on_append,
                 on_high_watermark):
        self._config = config
        self._replicas = replicas
        self._metadata = metadata
        self._create_topic = create_topic
        self._clock = clock
        self._clock_ms = replicas.clock or _system_clock_ms
        self._on_append = on_append
        self._on_high_watermark = on_high_watermark
        self._timeout_ms = config["offsets.commit.timeout.ms"]
        self._load_buffer = config["offsets.load.buffer.size"]
        self.coordinator = GroupCoordinator(config, self.store, self._clock_ms)
        self._purgatory = ProducePurgatory(lambda key: replicas.hosted(*key))
        self._loaded = {}  # partition index -> (Partition, leader epoch) loaded from

    # -- the topic --------------------------------------------------------------------------

    def topic(self):
        """``__consumer_offsets``'s TopicInfo, or None after asking the controller to create
        it."""
        image = self._metadata.image
        info = image.topics.get(GROUP_METADATA_TOPIC)
        if info is not None:
            return info
        live = image.live_brokers()
        if not live:
            return None
        factor = min(self._config["offsets.topic.replication.factor"], len(live))
        self._create_topic(GROUP_METADATA_TOPIC, self._config["offsets.topic.num.partitions"],
                           factor, {"cleanup.policy": "compact",
                                    "segment.bytes": str(self._config[
                                        "offsets.topic.segment.bytes"])})
        return None

    def coordinator_node(self, group_id):
        """``(error code, message, node id)`` of ``group_id``'s coordinator: the leader of
        its ``__consumer_offsets`` partition (the topic is created on first use)."""
        info = self.topic()
        if info is None:
            return (CoordinatorNotAvailableError.errno,
                    f"{GROUP_METADATA_TOPIC} does not exist yet; it is being created", -1)
        state = info.partitions[partition_for(group_id, len(info.partitions))]
        broker = self._metadata.image.brokers.get(state.leader)
        if not state.online or broker is None or not broker.alive:
            return (CoordinatorNotAvailableError.errno,
                    f"{GROUP_METADATA_TOPIC}-{state.partition} has no live leader", -1)
        return 0, None, state.leader

    # -- leadership -------------------------------------------------------------------------

    def on_change(self, keys):
        """Partitions in ``keys`` changed: answer the writes that completes, then load the
        ``__consumer_offsets`` partitions this broker came to lead, unload the others."""
        self._call_back(self._purgatory.on_change(keys))
        info = self._metadata.image.topics.get(GROUP_METADATA_TOPIC)
        if info is not None:
            self.coordinator.partitions_count = len(info.partitions)
        for topic, index in sorted(keys):
            if topic == GROUP_METADATA_TOPIC:
                self._follow_leadership(index)

    def _follow_leadership(self, index):
        partition = self._replicas.hosted(GROUP_METADATA_TOPIC, index)
        leading = (partition is not None and partition.is_leader
                   and partition.log.offline is None)
        loaded = self._loaded.get(index)
        if loaded is not None and (not leading or loaded != (partition,
                                                             partition.leader_epoch)):
            log.info("unloading %s-%d", GROUP_METADATA_TOPIC, index)
            del self._loaded[index]
            self.coordinator.unload(index)
        if leading and index not in self._loaded:
            self._load(index, partition)

    def _load(self, index, partition):
        coordinator = self.coordinator
        coordinator.begin_load(index)
        try:
            stored = self._read(partition)
            coordinator.load(index, stored, self._clock())
        except Exception:  # a damaged log (or a bug) must not stop the broker's loop
            log.exception("loading %s-%d failed; its groups stay unavailable "
                          "(NOT_COORDINATOR) until its leadership changes",
                          GROUP_METADATA_TOPIC, index)
            coordinator.unload(index)
            return
        self._loaded[index] = (partition, partition.leader_epoch)
        log.info("loaded %s-%d: %d record(s) up to offset %d (leader epoch %d)",
                 GROUP_METADATA_TOPIC, index, len(stored), partition.log.log_end_offset,
                 partition.leader_epoch)

    def _read(self, partition):
        """``[(key, value)]`` of every keyed record of ``partition``'s log, log start to
        log end, in offset order."""
        partition_log = partition.log
        offset = partition_log.log_start_offset
        end = partition_log.log_end_offset
        stored = []
        while offset < end:
            data = partition_log.read(offset, self._load_buffer)
            if not data:
                break
            for header in iter_batches(data):
                if not header.is_control_batch:
                    batch = RecordBatch(data, header.position)
                    batch.validate()
                    stored.extend((r.key, r.value) for r in batch if r.key is not None)
                offset = header.next_offset
        return stored

    # -- the store --------------------------------------------------------------------------

    def store(self, index, pairs, callback):
        """Append ``pairs`` to ``__consumer_offsets``-``index`` as one batch; ``callback``
        (error code) once replicated or failed (module doc)."""
        key = (GROUP_METADATA_TOPIC, index)
        now_ms = self._clock_ms()
        builder = RecordBatchBuilder(batch_size=_UNBOUNDED_BATCH)
        for record_key, value in pairs:
            builder.append(now_ms, record_key, value)
        records = bytearray(builder.build())
        try:
            partition = self._replicas.leader(*key)
            high_watermark = partition.high_watermark
            base_offset = partition.append_as_leader(records, ACKS_ALL)
        except Exception as exc:
            callback(code_of(exc, f"append to {key[0]}-{index}"))
            return
        size = len(records)
        if partition.followers:
            self._on_append(key, size)
        if partition.high_watermark > high_watermark:
            self._on_high_watermark(partition, high_watermark,
                                    size if high_watermark == base_offset else None)
        required = base_offset + len(pairs)
        done, error = partition.check_enough_replicas(required)
        if done:
            callback(0 if error is None else error.errno)
            return
        results = [PartitionResult(index, 0, base_offset, -1, -1, None)]
        self._purgatory.park(DelayedProduce(
            self._clock() + self._timeout_ms / 1000, self._timeout_ms,
            [PendingPartition(key, partition, required, results, 0)],
            [(GROUP_METADATA_TOPIC, results)], (callback, results)))

    def on_high_watermark(self, key):
        """The HW of ``key`` moved: call back the writes it replicated."""
        if key[0] == GROUP_METADATA_TOPIC:
            self._call_back(self._purgatory.check(key))

    @staticmethod
    def _call_back(writes):
        """Call back the writes that left the purgatory, with their outcome."""
        for write in writes:
            callback, results = write.context
            callback(results[0].error_code)

    # -- timers -----------------------------------------------------------------------------

    def expire(self, now):
        """Answer the writes whose time ran out (REQUEST_TIMED_OUT); run the coordinator's
        due timers."""
        self._call_back(self._purgatory.expire(now))
        self.coordinator.poll(now)

    def next_deadline(self):
        deadlines = [d for d in (self._purgatory.next_deadline(),
                                 self.coordinator.next_deadline()) if d is not None]
        return min(deadlines) if deadlines else None
