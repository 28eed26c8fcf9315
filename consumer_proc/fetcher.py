"""Fetch requests to partition leaders, and the records they bring back.

The fetcher keeps at most **one Fetch in flight per broker**, carrying every fetchable
partition that broker leads (assigned, positioned, not paused), in the order of
``SubscriptionState.assignment`` — a partition that just got data moves to the end, so a
response capped by ``fetch_max_bytes`` (or by the ring frame) cannot starve the others.

**Pipelining.** A response is kept as bytes (``PartitionRecords``: only its batch headers
are read on arrival), which tells at once where the partition's next fetch starts (the
offset after its last batch). So the next Fetch goes out while the application still
works through the records of the previous one — the consumer calls ``send_fetches``
as soon as a response arrived, before its records are parsed and handed over — and up to
``MAX_BUFFERED_RESPONSES`` responses per partition wait, parsed only as they are taken.
The broker meanwhile long-polls (``fetch_max_wait_ms``, ``fetch_min_bytes``) and copies
the next batches into this consumer's response ring. The request itself is kept encoded
(``cluster.protocol.fetch_frame.FetchFrame``): per fetch only the offsets, leader epochs
and correlation id are written into it. The Fetch codecs are loaded when the fetcher is
made (``frames.load_codecs``): kio imports an API's schema modules at their first use,
10-15 ms for Fetch, and with no kio request built here the first response would pay that
while records flow in (it was workload 9's worst latency: perf/README.md, "The consumer's
cost per fetch").

**Positions.** Records are handed out only in order: the first buffered response of a
partition must start at its position (``next_offset`` of the PartitionRecords), and each
buffered response where the previous one ends. A seek, reset or reassignment breaks that
chain; the stale responses are dropped when next looked at, and a response that arrives
for an offset no longer expected is ignored (the same bytes at the same offset would be
identical, so matching offsets are always safe to use).

**Errors per partition** (Kafka's and kafka-python's handling):

* NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
  REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH and
  any other invalid-metadata error: refresh the metadata, fetch again from the leader it
  names;
* OFFSET_OUT_OF_RANGE: reset the position by ``auto_offset_reset`` (earliest / latest),
  or with 'none' raise OffsetOutOfRangeError from the next poll;
* anything else retriable: retry; not retriable: raised from the next poll. An error for
  the whole response (its top-level error code, v7+) is handled the same way.

**A broker that dies** fails its request in flight (KafkaConnectionError from the client):
logged once per outage, counted in ``fetch-error-total``, and the partitions it led are
fetched again once the metadata names a leader for them — the same broker restarted, when
the controller publishes it. Records of other brokers keep flowing meanwhile.

**A leader change** (Kafka's rules; tested against fake brokers in
tests/consumer_proc/test_failover.py): the errors above send the partition's next fetch,
from the same position, to the leader named by refreshed metadata — the position moves only
as records are handed out, so nothing is lost or read twice; a request that hangs fails
after ``request_timeout_ms`` (the client drops the connection and refreshes the metadata).
Every Fetch (and ListOffsets) carries the partition's ``current_leader_epoch`` from the
metadata cache (KIP-320): a broker that knows a newer epoch answers FENCED_LEADER_EPOCH
(this consumer's metadata is stale) and one that has not learnt this epoch yet
UNKNOWN_LEADER_EPOCH, instead of serving records of a log that may have diverged.

*Not done: validating the position after a leader change* (KIP-320's OffsetsForLeaderEpoch,
api key 23, which ``cluster.protocol.frames`` does not speak in this branch). The hook is
``send_fetches``, where ``leader(tp)`` gives the epoch each fetch carries: remember per
partition the epoch of its last fetch and of the last batch handed out (the
``partition_leader_epoch`` that ``ConsumerRecord.leader_epoch`` shows); when the metadata
names a new epoch, hold the partition out of fetches, ask the new leader for the end offset
of the last consumed batch's epoch and, if it is below the position (the log was truncated
under it), seek there with a reset policy or raise LogTruncationException with 'none'.
Against a broker without the API Kafka skips the validation, which is what happens here.
Meanwhile a truncation that leaves the position past the new leader's log end is caught as
OFFSET_OUT_OF_RANGE.

Errors found while handling a response (which happens inside ``KafkaClient.poll``) are
queued and raised by the next ``fetched_records`` / ``fetched_columns``; an error met while
draining, after some records were already drained, is raised by the next call instead,
so no record is lost (kafka-python's rule).

Owner: the consumer's thread, the only caller (the client's callbacks run in its poll).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import time

from cluster.client.kafka_client import API_VERSIONS
from cluster.errors import KafkaError, OffsetOutOfRangeError, RecordTooLargeError, for_code
from cluster.protocol import frames as protocol
from cluster.protocol.fetch_frame import FetchFrame
from cluster.protocol.frames import ApiKey
from cluster.structs import TopicPartition
from consumer_proc.partition_records import PartitionRecords
from segments.errors import CorruptRecordError

log = logging.getLogger(__name__)

#: Responses per partition that may wait, parsed or not, to be taken by the application;
#: a partition with that many is left out of the next Fetch.
MAX_BUFFERED_RESPONSES = 2

#: Fetch's isolation_level values.
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}

#: The Fetch version this consumer sends (``FetchFrame`` writes it).
_FETCH_VERSION = API_VERSIONS[ApiKey.FETCH]
_NO_ERROR = 0
_OFFSET_OUT_OF_RANGE = OffsetOutOfRangeError.errno


@functools.cache
def _field_names(cls):
    """The field names of the kio class ``cls`` (looked up once: ``dataclasses.fields`` costs
    microseconds, and the requests built here are built again and again)."""
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls, **fields):
    """An instance of the kio class ``cls`` from the ``fields`` it has (others dropped), so
    one call site serves every version of a request."""
    names = _field_names(cls)
    return cls(**{name: value for name, value in fields.items() if name in names})


class Fetcher:
    """Fetches for one consumer (module doc).

    ``client``: the consumer's KafkaClient; ``subscriptions``: its SubscriptionState;
    ``config``: its ConsumerConfig; ``metrics``: a FetchMetrics; ``key_deserializer`` /
    ``value_deserializer``: ``(topic, headers, data) -> object`` callables or None;
    """

    def __init__(self, client, subscriptions, config, metrics, *, key_deserializer=None,
                 value_deserializer=None, clock=time.monotonic):
        self._client = client
        self._subscriptions = subscriptions
        self._metrics = metrics
        self._clock = clock
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._check_crcs = config["check_crcs"]
        self._read_committed = config["isolation_level"] == "read_committed"
        self._partition_max_bytes = config["max_partition_fetch_bytes"]
        protocol.load_codecs(ApiKey.FETCH)  # not at the first response (module doc)
        # The Fetch request kept encoded: per fetch only offsets and epochs change.
        self._frame = FetchFrame(
            _FETCH_VERSION, client.client_id, max_wait_ms=config["fetch_max_wait_ms"],
            min_bytes=config["fetch_min_bytes"], max_bytes=config["fetch_max_bytes"],
            isolation_level=ISOLATION_LEVELS[config["isolation_level"]],
            partition_max_bytes=self._partition_max_bytes)
        self._buffers = {}     # TopicPartition -> deque of PartitionRecords, in offset order
        self._in_flight = {}   # node id -> {TopicPartition: fetch offset} of its one Fetch
        self._handed_out = {}  # TopicPartition -> position before an update_offsets=False drain
        # (TopicPartition or None, fetch offset, error): raised by the next drain, unless the
        # partition was sought or reset since (``_raise_errors``)
        self._errors = collections.deque()
        self._closed = False
        self._failed_nodes = set()  # nodes whose failure was logged and not yet recovered

    # -- sending ------------------------------------------------------------------------------

    def in_flight(self):
        """True while a Fetch is out."""
        return bool(self._in_flight)

    def has_buffered(self):
        """True if records (possibly paused) wait to be taken."""
        return bool(self._buffers)

    def _chain(self, tp, state):
        """The buffered responses of ``tp`` if they continue its position, else drop them
        (stale after a seek or reset) and return None. Records drained without updating the
        position (``update_offsets`` False) still count as continuing while the caller's
        position lies within them."""
        queue = self._buffers.get(tp)
        if queue is None:
            return None
        position = None if state is None else state.position
        start = queue[0].next_offset
        if position != start:
            handed_out = self._handed_out.get(tp)
            if position is None or handed_out is None or not handed_out <= position <= start:
                self._drop(tp)
                return None
        return queue

    @staticmethod
    def _expected(state, queue):
        """The offset the next fetch of a partition must start at to continue its position
        and its buffered responses ``queue`` (``_chain``); None once it is unassigned."""
        if queue:
            return queue[-1].end_offset
        return None if state is None else state.position

    def _drop(self, tp):
        self._buffers.pop(tp, None)
        self._handed_out.pop(tp, None)

    def leader(self, tp):
        """``(leader id, leader epoch)`` of ``tp`` from the metadata cache; leader -1 if
        unknown or offline."""
        info = self._client.cluster.topics.get(tp.topic)
        if info is None:
            return -1, -1
        partitions = info.partitions
        index = tp.partition
        if 0 <= index < len(partitions) and partitions[index].partition == index:
            found = partitions[index]
        else:
            found = next((p for p in partitions if p.partition == index), None)
            if found is None:
                return -1, -1
        return found.leader, found.leader_epoch

    def send_fetches(self):
        """Send a Fetch to every broker that leads a fetchable partition and has none in
        flight; returns how many were sent."""
        assignment = self._subscriptions.assignment
        wanted = {}  # node -> {tp: (fetch offset, leader epoch)}
        need_metadata = False
        for tp in self._subscriptions.fetchable_partitions():
            state = assignment[tp]
            queue = self._chain(tp, state)
            if queue is not None and len(queue) >= MAX_BUFFERED_RESPONSES:
                continue
            node, epoch = self.leader(tp)
            if node < 0:
                need_metadata = True
                continue
            if node in self._in_flight or self._client.connection_delay(node) > 0:
                continue
            offset = queue[-1].end_offset if queue else state.position
            wanted.setdefault(node, {})[tp] = (offset, epoch, -1)
        if need_metadata:
            self._client.cluster.request_update()
        for node, partitions in wanted.items():
            self._send(node, partitions)
        return len(wanted)

    def _send(self, node, partitions):
        frame = self._frame.frame(node, partitions)
        offsets = {tp: offset for tp, (offset, _, _) in partitions.items()}
        self._in_flight[node] = offsets
        log.debug("fetch from broker %d: %s", node, offsets)
        future = self._client.send_frame(
            node, ApiKey.FETCH, _FETCH_VERSION, len(frame),
            functools.partial(FetchFrame.write, frame))
        future.add_callback(self._handle_response, node, offsets, self._clock())
        future.add_errback(self._handle_failure, node, offsets)

    # -- receiving ----------------------------------------------------------------------------

    def _handle_failure(self, node, offsets, exception):
        if self._in_flight.get(node) is offsets:
            del self._in_flight[node]
        if self._closed:
            return
        self._metrics.fetch_failed()
        if node not in self._failed_nodes:
            self._failed_nodes.add(node)
            log.info("fetch from broker %d failed (%s); fetching %s again once the "
                     "metadata names their leaders", node, exception, sorted(offsets))
        if isinstance(exception, KafkaError) and exception.invalid_metadata:
            self._client.cluster.request_update()

    def _handle_response(self, node, offsets, sent_at, response):
        if self._in_flight.get(node) is offsets:
            del self._in_flight[node]
        if node in self._failed_nodes:
            self._failed_nodes.discard(node)
            log.info("fetching from broker %d again", node)
        code = int(getattr(response, "error_code", _NO_ERROR))  # v7+: the whole fetch failed
        if code != _NO_ERROR:
            error = for_code(code)
            log.debug("fetch from broker %d: %s", node, error.message)
            if error.invalid_metadata:
                self._client.cluster.request_update()
            elif not error.retriable:
                self._errors.append((None, None, error(
                    f"fetch from broker {node} of {sorted(offsets)}")))
            return
        size = records = 0
        for topic in response.responses:
            for data in topic.partitions:
                tp = TopicPartition(topic.topic, data.partition_index)
                offset = offsets.get(tp)
                if offset is None:
                    continue
                part = self._handle_partition(tp, offset, data)
                if part is not None:
                    size += part.size_in_bytes
                    records += part.record_count
        self._metrics.fetch_received(self._clock() - sent_at, size, records)

    def _handle_partition(self, tp, offset, data):
        """One partition's answer to a fetch at ``offset``; the PartitionRecords buffered,
        if any."""
        subscriptions = self._subscriptions
        state = subscriptions.assignment.get(tp)
        queue = self._chain(tp, state)
        expected = self._expected(state, queue)
        if offset != expected:
            log.debug("ignoring the fetch of %s at %d: expected %s", tp, offset, expected)
            return None
        code = int(data.error_code)
        if code == _NO_ERROR:
            state.highwater = data.high_watermark
            state.last_stable_offset = data.last_stable_offset
            if data.log_start_offset >= 0:
                state.log_start_offset = data.log_start_offset
            if not data.records:
                return None
            try:
                part = PartitionRecords(
                    tp, offset, data.records, self._check_crcs,
                    data.aborted_transactions if self._read_committed else None)
            except CorruptRecordError as exc:
                self._errors.append((tp, offset, exc))
                return None
            if not part.batch_count:
                self._errors.append((tp, offset, RecordTooLargeError(
                    f"{tp.topic}-{tp.partition} at offset {offset}: the {len(data.records)} "
                    f"bytes fetched hold no whole batch (a batch larger than "
                    f"max_partition_fetch_bytes {self._partition_max_bytes}?)")))
                return None
            if queue is None:
                queue = self._buffers[tp] = collections.deque()
            queue.append(part)
            subscriptions.move_to_end(tp)
            return part
        error = for_code(code)
        where = f"{tp.topic}-{tp.partition} at offset {offset}"
        if code == _OFFSET_OUT_OF_RANGE:
            if subscriptions.has_default_reset_policy():
                log.info("fetch offset %d of %s is out of range (log start %d, high watermark "
                         "%d): resetting", offset, tp, data.log_start_offset,
                         data.high_watermark)
                subscriptions.request_offset_reset(tp)
                self._drop(tp)
            else:
                self._errors.append((tp, offset, OffsetOutOfRangeError(
                    f"fetch offset {offset} of {tp.topic}-{tp.partition} is out of range (log "
                    f"start {data.log_start_offset}, high watermark {data.high_watermark}) "
                    f"and auto_offset_reset is 'none'")))
        elif error.invalid_metadata:
            log.debug("fetch of %s: %s; refreshing metadata", where, error.message)
            self._client.cluster.request_update()
        elif not error.retriable:
            self._errors.append((tp, offset, error(f"fetch of {where}")))
        return None

    # -- draining -----------------------------------------------------------------------------

    def fetched_records(self, max_records, update_offsets=True):
        """Up to ``max_records`` buffered records as ``{TopicPartition: [ConsumerRecord]}``,
        advancing the positions (unless ``update_offsets`` is False: the caller advances
        them record by record). Raises a queued error first (module doc)."""
        return self._drain(max_records, update_offsets, columns=False)

    def fetched_columns(self, max_records):
        """Up to ``max_records`` buffered records as ``{TopicPartition: [RecordColumns]}``,
        advancing the positions."""
        return self._drain(max_records, True, columns=True)

    def _raise_errors(self):
        """Raise the first error still current. A partition's error is stale once its
        position and buffered responses no longer lead to the offset the failed fetch
        asked for (sought or reset since, e.g. by the caller handling the same error from
        an earlier fetch): dropped."""
        assignment = self._subscriptions.assignment
        while self._errors:
            tp, offset, error = self._errors.popleft()
            if tp is None:
                raise error
            state = assignment.get(tp)
            if self._expected(state, self._chain(tp, state)) == offset:
                raise error
            log.debug("dropping a stale error of %s at offset %d: %s", tp, offset, error)

    def _drain(self, max_records, update_offsets, columns):
        self._raise_errors()
        assignment = self._subscriptions.assignment
        drained = {}
        remaining = max_records
        taken = 0
        for tp in list(self._buffers):
            if remaining <= 0:
                break
            state = assignment.get(tp)
            queue = self._buffers[tp]
            if state is None or queue[0].next_offset != state.position:
                self._drop(tp)  # stale: reassigned, sought, reset, or left mid-way
                continue
            if state.paused:
                continue
            position = state.position
            if update_offsets:
                self._handed_out.pop(tp, None)
            else:
                self._handed_out[tp] = position
            while queue and remaining > 0:
                part = queue[0]
                try:
                    if columns:
                        got = part.take_columns(remaining)
                        count = sum(map(len, got))
                    else:
                        got = part.take(remaining, self._key_deserializer,
                                        self._value_deserializer)
                        count = len(got)
                except KafkaError as exc:
                    self._drop(tp)
                    if not drained:
                        raise
                    self._errors.append((None, None, exc))
                    return drained
                if count:
                    drained.setdefault(tp, []).extend(got)
                    remaining -= count
                    taken += count
                position = part.next_offset
                if update_offsets or not count:
                    state.position = position
                if not part:
                    queue.popleft()
            if not queue:
                del self._buffers[tp]
            if state.highwater is not None:
                self._metrics.lag(max(0, state.highwater - position))
        if taken:
            self._metrics.consumed(taken)
        return drained

    def discard(self):
        """Drop every buffered record (the assignment is gone)."""
        self._buffers.clear()
        self._handed_out.clear()

    def close(self):
        """The consumer is closing: drop what is buffered; fetches failing from now on (the
        client closing fails them) are not reported."""
        self._closed = True
        self.discard()
