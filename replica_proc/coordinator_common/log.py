"""The partitions of a coordinator's topic that this broker leads (``__consumer_offsets``
for the group coordinator, ``__transaction_state`` for the transaction coordinator): their
loading as leadership comes and goes, and the coordinator's appends to them.

**Leadership.** ``on_change(keys)`` (every image the broker applies): for each partition
of the topic this broker now leads (with its log online) and had not loaded, or leads in
a new leader epoch, its log is read from the log start to the log end offset and given to
``on_load(index, leader_epoch, [(key, value)])``; a partition it no longer leads is given
to ``on_unload(index)``. Loading reads up to the LEO, as Kafka's ``GroupMetadataManager``
and ``TransactionStateManager`` do, not the HW: the new leader's log is what every replica
converges to (followers truncate to it), so the records above its HW — written by the
previous leader, not yet acknowledged — are replicated by the new leader's followers and
become committed; leaving them out would make the loaded state disagree with the log the
coordinator goes on appending to. The read is synchronous, in the loop thread (``load
buffer`` bytes per read): the partition is loaded before any request sees it. An
``on_load`` that raises (a damaged log, or a bug) is logged, ``on_unload`` is called and
the partition stays unloaded until its leadership changes: the broker's loop goes on.
With ``transactional`` (the group coordinator's offsets of TxnOffsetCommit) each record
read is ``(key, value, producer id)`` — the producer id of a transactional batch, -1
otherwise — and each COMMIT or ABORT marker ``(None, control type, producer id)``
(``segments.record.control_record``'s COMMIT / ABORT / UNKNOWN), in offset order; without
it a record is ``(key, value)`` and markers are skipped.

**The store.** ``store(partition, [(key, value)], callback)`` builds one batch of those
records (``RecordBatchBuilder``, no compression, the log clock's time), appends it as
leader with acks=all semantics (NOT_ENOUGH_REPLICAS when the ISR is below
min.insync.replicas; KAFKA_STORAGE_ERROR, NOT_LEADER_OR_FOLLOWER: nothing appended) and
calls back once the HW has passed the batch — at once when it already has (a lone
replica), else from a produce purgatory of its own (``delayed_produce``) woken by the same
HW-move and metadata-change hooks as acks=all Produce requests: 0, or
NOT_ENOUGH_REPLICAS_AFTER_APPEND, or NOT_LEADER_OR_FOLLOWER when leadership is lost, or
REQUEST_TIMED_OUT after ``timeout_ms``. The coordinator maps these codes.
``store(..., producer=(producer id, epoch))`` writes a transactional batch of that
producer (Kafka's TxnOffsetCommit append: sequence 0, the coordinator's origin, so the
partition's producer state opens the producer's transaction and its marker ends it). Callbacks come
in append order per partition (the HW only grows; expiries share one timeout). Appends
wake followers' parked fetches and consumers' fetches as a Produce's do.

**Timers.** ``expire(now)`` answers writes whose time ran out; ``next_deadline()`` is the
earliest such time (the loop waits no longer).

Owner: the broker's loop thread, the only caller.
"""
from __future__ import annotations

import logging

from cluster.protocol.produce_response import PartitionResult
from replica_proc.delayed_produce import DelayedProduce, PendingPartition, ProducePurgatory
from replica_proc.responses import code_of
from segments.producer_state import ORIGIN_CLIENT, ORIGIN_COORDINATOR
from segments.record.batch_header import iter_batches
from segments.record.control_record import parse_control_key
from segments.record.records import RecordBatch, RecordBatchBuilder

log = logging.getLogger(__name__)

ACKS_ALL = -1
#: A batch as large as the records make it: a store is one batch, whatever its size
#: (max.message.bytes refuses one too large: RECORD_TOO_LARGE, mapped by the coordinator).
_UNBOUNDED_BATCH = 2**31 - 1


class CoordinatorLog:
    """The led partitions of ``topic`` (module doc).

    ``replicas``: the ReplicaManager; ``clock``: the loop's monotonic seconds;
    ``clock_ms``: the wall clock of the records' timestamps; ``on_append(key, size)`` and
    ``on_high_watermark(partition, old_hw, size)``: the request handler's hooks an append
    must call, as a Produce's does; ``load_buffer``: bytes per read while loading;
    ``timeout_ms``: how long a store waits for replication; ``on_load`` / ``on_unload``:
    the coordinator's (module doc).
    """

    def __init__(self, topic, replicas, clock, clock_ms, on_append, on_high_watermark,
                 load_buffer, timeout_ms, on_load, on_unload, transactional=False):
        self.topic = topic
        self._transactional = transactional
        self._replicas = replicas
        self._clock = clock
        self._clock_ms = clock_ms
        self._on_append = on_append
        self._on_high_watermark = on_high_watermark
        self._load_buffer = load_buffer
        self._timeout_ms = timeout_ms
        self._on_load = on_load
        self._on_unload = on_unload
        self._purgatory = ProducePurgatory(lambda key: replicas.hosted(*key))
        self._loaded = {}  # partition index -> (Partition, leader epoch) loaded from

    # -- leadership -------------------------------------------------------------------------

    def on_change(self, keys):
        """Partitions in ``keys`` changed: call back the writes that completes, then load
        the topic's partitions this broker came to lead, unload the others."""
        self._call_back(self._purgatory.on_change(keys))
        for topic, index in sorted(keys):
            if topic == self.topic:
                self._follow_leadership(index)

    def _follow_leadership(self, index):
        partition = self._replicas.hosted(self.topic, index)
        leading = (partition is not None and partition.is_leader
                   and partition.log.offline is None)
        loaded = self._loaded.get(index)
        if loaded is not None and (not leading or loaded != (partition,
                                                             partition.leader_epoch)):
            log.info("unloading %s-%d", self.topic, index)
            del self._loaded[index]
            self._on_unload(index)
        if leading and index not in self._loaded:
            self._load(index, partition)

    def _load(self, index, partition):
        try:
            stored = self._read(partition)
            self._on_load(index, partition.leader_epoch, stored)
        except Exception:  # a damaged log (or a bug) must not stop the broker's loop
            log.exception("loading %s-%d failed; its keys stay unavailable "
                          "(NOT_COORDINATOR) until its leadership changes", self.topic, index)
            self._on_unload(index)
            return
        self._loaded[index] = (partition, partition.leader_epoch)
        log.info("loaded %s-%d: %d record(s) up to offset %d (leader epoch %d)", self.topic,
                 index, len(stored), partition.log.log_end_offset, partition.leader_epoch)

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
                    if not self._transactional:
                        stored.extend((r.key, r.value) for r in batch if r.key is not None)
                    else:
                        producer_id = header.producer_id if header.is_transactional else -1
                        stored.extend((r.key, r.value, producer_id) for r in batch
                                      if r.key is not None)
                elif self._transactional:
                    marker = next(iter(RecordBatch(data, header.position)), None)
                    if marker is not None:  # else the cleaner emptied it
                        stored.append((None, parse_control_key(marker.key),
                                       header.producer_id))
                offset = header.next_offset
        return stored

    # -- the store --------------------------------------------------------------------------

    def store(self, index, pairs, callback, producer=None):
        """Append ``pairs`` to partition ``index`` as one batch, transactional when
        ``producer`` is (producer id, epoch); ``callback`` (error code) once replicated or
        failed (module doc)."""
        key = (self.topic, index)
        now_ms = self._clock_ms()
        if producer is None:
            builder = RecordBatchBuilder(batch_size=_UNBOUNDED_BATCH)
            origin = ORIGIN_CLIENT
        else:
            builder = RecordBatchBuilder(batch_size=_UNBOUNDED_BATCH, producer_id=producer[0],
                                         producer_epoch=producer[1], base_sequence=0,
                                         is_transactional=True)
            origin = ORIGIN_COORDINATOR
        for record_key, value in pairs:
            builder.append(now_ms, record_key, value)
        records = bytearray(builder.build())
        try:
            partition = self._replicas.leader(*key)
            high_watermark = partition.high_watermark
            base_offset = partition.append_as_leader(records, ACKS_ALL, origin=origin)
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
            [(self.topic, results)], (callback, results)))

    def on_high_watermark(self, key):
        """The HW of ``key`` moved: call back the writes it replicated."""
        if key[0] == self.topic:
            self._call_back(self._purgatory.check(key))

    @staticmethod
    def _call_back(writes):
        """Call back the writes that left the purgatory, with their outcome."""
        for write in writes:
            callback, results = write.context
            callback(results[0].error_code)

    # -- timers -----------------------------------------------------------------------------

    def expire(self, now):
        """Answer the writes whose time ran out (REQUEST_TIMED_OUT)."""
        self._call_back(self._purgatory.expire(now))

    def next_deadline(self):
        return self._purgatory.next_deadline()
