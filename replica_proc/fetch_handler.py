"""Fetch v4-11: whole batches from the logs, long-polled, written straight into the ring.

For each partition, in request order (Kafka's ReplicaManager.readFromLog rules):

- the partition must exist and be led here (UNKNOWN_TOPIC_OR_PARTITION,
  NOT_LEADER_OR_FOLLOWER; FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for a
  ``current_leader_epoch`` (v9+) that is not the leader's);
- the read starts at the batch holding ``fetch_offset`` (the whole batch, even if the
  offset is in its middle) and holds whole batches only, none with an offset at or past the
  high watermark (consumers at read_uncommitted; a follower — ``replica_id`` >= 0 — reads
  to the log end) or the last stable offset (``isolation_level`` 1, read_committed:
  ``Partition.last_stable_offset``, Kafka's min(first unstable offset, high watermark));
- every answer carries the last stable offset; a read_committed one also the aborted
  transactions that overlap what it returns (``PartitionLog.collect_aborted_transactions``
  from the fetch offset to ``fetch_upper_bound``), which the consumer drops;
- at most ``partition_max_bytes`` from a partition and ``max_bytes`` in all, except that
  the first partition with data returns at least one batch even if it is larger (KIP-74);
- an offset outside the log gives OFFSET_OUT_OF_RANGE, with the high watermark (the log
  end, for consumers) and the log start offset filled in so the client can reset;
- a log the read finds corrupt (the batch headers it walks frame wrongly, or their
  offsets do not increase) gives KAFKA_STORAGE_ERROR for that partition alone, logged
  with the file and offsets; the connection and the other partitions are served.

The client's response ring sets no limit: a response longer than its largest frame goes
as fragments (``shm_ring``), so a batch the leader accepted is served to every follower and
consumer whatever their rings' size, as Kafka serves any batch (``replica.fetch.max.bytes``
and ``fetch.max.bytes`` are soft: at least one batch).

A Fetch from a follower (``replica_id`` = a broker id) is refused per partition with
NOT_LEADER_OR_FOLLOWER unless that broker is one of the partition's replicas (Kafka's
followerReplicaOrThrow); after the read, its ``fetch_offset`` is recorded as the
follower's position (``Partition.update_follower``: the caught-up time, ISR expansion, the high
watermark), and its answer carries the high watermark as it is after that.

Long poll: with no error, fewer than ``min_bytes`` found and ``max_wait`` > 0, the fetch is
parked in the purgatory (its channel muted) and answered — read again, without recording
a follower's position again, as Kafka — once what it may read grows by ``min_bytes``
(appends for a follower's fetch, high-watermark advances for a read_uncommitted
consumer's, last-stable-offset advances for a read_committed one's, as Kafka's
DelayedFetch with FetchIsolation.TXN_COMMITTED), a watched partition changes, or
``max_wait`` passes. A follower's fetch whose recorded positions set off an append to one
of its partitions already read (a write waiting on the high watermark: a coordinator's
record, a transaction's marker) is read again at once instead of parked, since that append
woke nothing (Kafka's ``tryCompleteElseWatch``).

The answer is a ``FetchResponseFrame``: the channel claims a slot of its exact size in the
response ring and the batches are copied from the segment files into it.

Owner: the broker's loop thread.
"""
from __future__ import annotations

import logging

from cluster.errors import KafkaStorageError, OffsetOutOfRangeError
from cluster.protocol import frames
from cluster.protocol.fetch_response import FetchResponseFrame, PartitionData
from cluster.protocol.frames import ApiKey
from replica_proc.delayed_fetch import FOLLOWER, HIGH_WATERMARK, STABLE, DelayedFetch
from replica_proc.responses import code_of

log = logging.getLogger(__name__)

frames.load_codecs(ApiKey.FETCH)  # with the broker's imports, not at its first Fetch

#: Fetch's isolation_level for read_committed.
READ_COMMITTED = 1
#: More bytes than any fetch asks for.
_UNBOUNDED = 1 << 62


class FetchHandler:
    """Handles Fetch requests against ``replicas``, parking them in ``purgatory``.

    ``clock``: the loop's monotonic clock in seconds (deadlines of parked fetches).
    """

    def __init__(self, replicas, purgatory, clock):
        self._replicas = replicas
        self._purgatory = purgatory
        self._clock = clock
        self.bytes_out = 0  # record bytes answered to consumers (the stats page's)
        self.replication_bytes_out = 0  # ... and to followers
        #: While a follower's fetch is read for the first time: the partitions appended to
        #: meanwhile (by what recording its positions set off), else None.
        self._appended_now = None

    def __call__(self, channel, header, request):
        self._answer(channel, header, request, may_park=True)

    # -- completing parked fetches ----------------------------------------------------------

    def on_append(self, key, size):
        """``size`` bytes were appended to ``key``: answer the followers' fetches that
        have enough."""
        if self._appended_now is not None:
            self._appended_now.add(key)
        for fetch in self._purgatory.on_append(key, size):
            self._complete(fetch)

    def on_high_watermark(self, key, partition, old_high_watermark, size=None):
        """The HW of ``partition`` (``key``) moved up from ``old_high_watermark``: answer
        the consumers' fetches that have enough. ``size``: the bytes that came below it,
        if the caller knows them; else they are measured (only when a read_uncommitted
        consumer waits). A read_committed consumer's fetch counts the bytes that came
        below the last stable offset instead, measured (only when one waits) from the
        LSO the purgatory last saw."""
        purgatory = self._purgatory
        if not purgatory.has_consumers(key):
            return
        if purgatory.has_uncommitted_consumers(key):
            if size is None:
                size = _bytes_between(partition, old_high_watermark, partition.high_watermark)
            for fetch in purgatory.on_high_watermark(key, size):
                self._complete(fetch)
        old_stable = purgatory.stable_offset(key)
        if old_stable is not None:
            stable = partition.last_stable_offset
            if stable > old_stable:
                for fetch in purgatory.on_stable_offset(
                        key, stable, _bytes_between(partition, old_stable, stable)):
                    self._complete(fetch)

    def on_change(self, keys):
        """Partitions in ``keys`` changed (leader, epoch, deleted): answer their fetches."""
        for fetch in self._purgatory.on_change(keys):
            self._complete(fetch)

    def expire(self, now):
        """Answer the fetches whose max wait ran out by ``now``."""
        for fetch in self._purgatory.expire(now):
            self._complete(fetch)

    def next_deadline(self):
        return self._purgatory.next_deadline()

    def cancel(self, fetch):
        """Its client went away: forget ``fetch``."""
        self._purgatory.cancel(fetch)

    def _complete(self, fetch):
        """Answer a fetch leaving the purgatory. This runs while another request (the
        append, the metadata change) is being served, so a failure here is not allowed to
        escape into that one: it marks the fetch's own channel for closing instead."""
        channel, header, request = fetch.context
        channel.parked = None
        try:
            self._answer(channel, header, request, may_park=False)
        except Exception as exc:
            log.exception("%s: answering a parked fetch failed", channel.name)
            channel.closing = f"answering a parked fetch failed: {exc!r}"

    # -- reading ----------------------------------------------------------------------------

    def _answer(self, channel, header, request, may_park):
        version = header.request_api_version
        # A follower's id, recorded on the first read only (may_park), or None.
        follower = request.replica_id if request.replica_id >= 0 else None
        record = follower if may_park else None
        limit = max(0, request.max_bytes)
        committed = request.isolation_level == READ_COMMITTED and follower is None
        min_one = True
        total = 0
        failed = False
        topics = []
        read = self._read
        if record is not None:
            self._appended_now = appended = set()
        try:
            for topic in request.topics:
                name = topic.topic
                partitions = []
                for p in topic.partitions:
                    data = read(name, p, max(0, min(p.partition_max_bytes, limit)), min_one,
                                follower, record, committed)
                    size = data.records_size
                    if size:
                        min_one = False
                        total += size + (data.aborted_size if committed else 0)
                        limit = max(0, limit - size)
                    elif data.error_code:
                        failed = True
                    partitions.append(data)
                topics.append((name, partitions))
        finally:
            if record is not None:
                self._appended_now = None
        if (may_park and total < request.min_bytes and not failed and topics
                and request.max_wait.total_seconds() > 0):
            keys = [(t.topic, p.partition) for t in request.topics for p in t.partitions]
            if record is not None and not appended.isdisjoint(keys):
                # Recording the follower's positions moved a high watermark, and what
                # waited on it appended to a partition read before (a coordinator's
                # write, a transaction's marker): that append woke no parked fetch, so
                # read again now instead of parking (Kafka's tryCompleteElseWatch).
                self._answer(channel, header, request, may_park=False)
                return
            stable = None
            if follower is not None:
                isolation = FOLLOWER
            elif committed:
                isolation = STABLE
                stable = {(name, data.index): data.last_stable_offset
                          for name, partitions in topics for data in partitions}
            else:
                isolation = HIGH_WATERMARK
            fetch = DelayedFetch(self._clock() + request.max_wait.total_seconds(),
                                 request.min_bytes, total, keys, (channel, header, request),
                                 isolation)
            self._purgatory.park(fetch, stable)
            channel.parked = fetch
            return
        if follower is None:
            self.bytes_out += total
        else:
            self.replication_bytes_out += total
        channel.send_fetch(FetchResponseFrame(
            version, header.correlation_id, topics,
            read_committed=request.isolation_level == READ_COMMITTED))

    def _read(self, topic, p, max_bytes, min_one, follower, record, committed=False):
        """The PartitionData of one partition of the request (see the module doc).
        ``follower``: the follower's id, or None for a consumer; ``record``: the follower
        whose position this read records, or None; ``committed``: a consumer's
        read_committed fetch."""
        index = p.partition
        try:
            partition = self._replicas.leader(topic, index,
                                              getattr(p, "current_leader_epoch", -1))
            if follower is not None:
                partition.check_follower(follower)
        except Exception as exc:
            return PartitionData(index, code_of(exc, f"fetch from {topic}-{index}"))
        high_watermark = partition.high_watermark
        stable = partition.last_stable_offset
        log_start = partition.log.log_start_offset
        log_end = partition.log.log_end_offset
        aborted = ()
        try:
            if committed:
                found, aborted = partition.read_committed(p.fetch_offset, max_bytes, min_one)
            else:
                found = partition.read_slice(p.fetch_offset, max_bytes, min_one,
                                             follower is not None)
        except OffsetOutOfRangeError as exc:
            return PartitionData(index, exc.errno, high_watermark, stable, log_start)
        except KafkaStorageError as exc:
            log.error("%s-%d: fetch at offset %d: %s", topic, index, p.fetch_offset, exc)
            return PartitionData(index, exc.errno, high_watermark, stable, log_start)
        if record is not None:
            partition.update_follower(record, p.fetch_offset, log_end)
            high_watermark = partition.high_watermark
            stable = partition.last_stable_offset
        return PartitionData(index, 0, high_watermark, stable, log_start, found, aborted)


def _bytes_between(partition, start, end):
    """Bytes of the batches of ``partition``'s log from the one holding ``start`` to
    ``end`` (all of them when the log no longer holds ``start``: wake every waiter)."""
    try:
        return partition.log.read_slice(start, _UNBOUNDED, end, False).size
    except (OffsetOutOfRangeError, KafkaStorageError):
        return _UNBOUNDED  # not measurable (the log start moved past it): wake them
