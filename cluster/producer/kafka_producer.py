"""KafkaProducer: kafka-python's producer API over ringlog's rings.

::

    producer = KafkaProducer(bootstrap_servers=data_dir, linger_ms=5, acks=1)
    future = producer.send("app-logs", b"GET /index 200", key=b"host-1")
    metadata = future.get(timeout=10)        # RecordMetadata(topic, partition, offset, ...)
    producer.send_batch("app-logs", values)  # bulk: a list, or a 2-D uint8 numpy array
    producer.flush(); producer.close()

``send()`` serializes, picks the partition (murmur2 of the key over all partitions, as
Kafka; sticky without a key, rotating when a batch fills — or the configured partitioner),
appends to the ``RecordAccumulator`` and returns a light ``FutureRecordMetadata`` (a tuple
over the batch's one future: no per-record lock or callback list). Everything else — building
batches (one encode, one CRC-32C each), Produce requests, retries, completions — happens per
batch in the ``Sender`` thread. The configuration keys and defaults are kafka-python's
(``cluster.config.ProducerConfig``); ``bootstrap_servers`` is the cluster's data directory.

The fast path: a record with no key, headers or partition and a bytes value (after the
serializers) goes to its topic's *lane* — the open batch of the sticky partition that the
last general send appended to, remembered with the metadata version it was chosen under —
through ``RecordBatchBuilder.append_value`` under the accumulator's lock: no metadata
lookup, no partitioner call, one lock, three Python calls in all. A batch takes records
only while it is the last of its partition (the accumulator closes it for appends when it
refuses a record, when another batch is queued behind it, and when it leaves the queue),
so the lane appends exactly where the general path would. A record with no key, headers or
partition sent by a *plain* producer (open, not transactional, no serializers: a flag set
once, cleared by ``close()``) skips the API checks (closed, transaction, headers,
serializers), which have nothing to say about it; the lane's steps — bytes value, version
check, timestamp, append, the future — are one C call when the compiled record paths are
built (``cluster/producer/_lane_accel.pyx``, ``segments.record.accel``), the same steps
in Python otherwise. When the batch refuses (full, closed) or the metadata changed, the
record takes the general path, which asks the partitioner (rotating on a new batch, as
KIP-480 says), opens the batch and points the lane at it. A sticky partition changes only
when a batch is opened, so asking the partitioner once per batch instead of once per
record puts every record where it would have gone.

``send_batch(topic, values, keys=None, partition=None)`` is ringlog's bulk send: records
are encoded many at a time by ``segments.record.bulk.build_batches`` (vectorised with
numpy; fixed-size values take its fastest path) into batches of up to ``bulk_batch_size``
bytes, each queued behind the partition's open batch, one ``FutureBatchMetadata`` per
batch. numpy and ``segments.record.bulk`` are imported by the bulk send on its first call,
not with the producer: a process that only calls ``send()`` does not carry them
(perf/README.md, "Client RSS and GC").

A batch holds at most ``batch_size`` bytes, and never more than one request may carry
(``max_request_size`` less the request's own overhead), so a request always fits the ring.

Idempotence (``enable_idempotence``, on by default as in kafka-python; with it acks=all,
retries and at most 5 requests in flight per connection, ``cluster.config.client``): the
sender gets a producer id (InitProducerId) before the first batch goes out and every batch
carries the producer id, epoch and its partition's sequence, so a retried batch is written
once and a partition's records keep their order across retries (``transaction_manager``).
``enable_idempotence=False`` is Kafka's at-least-once producer, with none of that work.

Transactions (``transactional_id``, which implies idempotence; kafka-python's and Java's
API)::

    producer = KafkaProducer(bootstrap_servers=data_dir, transactional_id="copier-1")
    producer.init_transactions()       # fences an older producer with the same id
    producer.begin_transaction()
    producer.send("out", b"...")
    producer.send_offsets_to_transaction({tp: OffsetAndMetadata(42, "", -1)},
                                         consumer.group_metadata())
    producer.commit_transaction()      # or abort_transaction()

The sender talks to the transaction coordinator (``transaction_manager`` has the state
machine, ``txn_requests`` the requests and how their errors are handled); batches are
marked transactional and go out only once their partition is added to the transaction.
``send`` outside a transaction raises IllegalStateError, as kafka-python does.

Not implemented: splitting a batch the
broker rejects as too large (Kafka splits and retries).

Thread safety: any number of threads may call ``send``, ``send_batch``, ``flush``,
``partitions_for`` and ``metrics``; ``close`` once, from any thread but the sender's own
callbacks (which get a zero timeout, as in kafka-python).
"""
from __future__ import annotations

import atexit
import dataclasses
import itertools
import logging
import threading
import time
import weakref
from time import time_ns

from cluster.client.kafka_client import KafkaClient, ring_capacity_for
from cluster.config import ProducerConfig
from cluster.errors import (
    IllegalArgumentError,
    IllegalStateError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
)
from cluster.producer import producer_metrics, txn_requests
from cluster.producer.accumulator import RecordAccumulator
from cluster.producer.batch import FailedSend, FutureBatchMetadata, FutureRecordMetadata
from cluster.producer.partitioner import (
    DefaultPartitioner,
    partitions_for_keys,
    resolve_partitioner,
)
from cluster.producer.producer_stats import ProducerStatsSource
from cluster.producer.sender import Sender
from cluster.producer.transaction_manager import TransactionManager
from cluster.protocol.consumer_protocol import NO_GENERATION
from cluster.stats.publisher import process_stats
from cluster.structs import ConsumerGroupMetadata
from segments.record import accel
from segments.record.batch_header import BatchHeader

log = logging.getLogger(__name__)

#: Room a Produce request needs besides its batches (header, client id, topic names).
REQUEST_OVERHEAD = 1024

#: Largest batch the bulk send makes by default: Kafka's default max.message.bytes is
#: 1 MiB + 12; one bulk batch per partition per request.
BULK_BATCH_BYTES = 1 << 20

#: Records the bulk send encodes per build_batches call (bounds its temporary memory).
BULK_CHUNK_RECORDS = 1 << 17

#: The sender's rings park at once instead of spinning (unless ``ringlog_spin_iterations``
#: is given): a sender spinning on a response ring holds the GIL that the threads calling
#: send() need, and it often has other work (more batches) anyway.
SENDER_SPIN = 0

_PRODUCER_IDS = itertools.count(1)

#: The compiled lane (cluster/producer/_lane_accel.pyx: send()'s fast path in one C call),
#: or None: then send() runs the same steps in Python with ``_Lane`` (segments.record.accel).
_lane_module = accel.load("cluster.producer._lane_accel")  # imports the compiled builder core
_LANE = None if _lane_module is None else _lane_module.Lane


def _serializer(hook):
    """A ``(topic, headers, data) -> bytes`` callable for a kafka-python serializer hook:
    a plain callable takes the data only; a Serializer object's ``serialize`` takes
    (topic, headers, data), or (topic, data) in older code."""
    if hook is None:
        return None
    serialize = getattr(hook, "serialize", None)
    if serialize is None:
        return lambda topic, headers, data: hook(data)

    def call(topic, headers, data):
        try:
            return serialize(topic, headers, data)
        except TypeError:
            return serialize(topic, data)
    return call


class KafkaProducer:
    """Publish records to a ringlog cluster (module doc). ``configs``: kafka-python's
    keyword arguments; ``clock`` (monotonic seconds) is for tests."""

    DEFAULT_CONFIG = ProducerConfig.DEFAULT_CONFIG

    def __init__(self, *, clock=time.monotonic, **configs):
        config = ProducerConfig(**configs)
        self.config = config
        self.client_id = config["client_id"] or f"ringlog-producer-{next(_PRODUCER_IDS)}"
        self._clock = clock
        self._closed = False
        self._plain = False  # send() has no API checks to make: set below, cleared by close()
        self._key_serializer = _serializer(config["key_serializer"])
        self._value_serializer = _serializer(config["value_serializer"])
        self._serializing = (self._key_serializer is not None
                             or self._value_serializer is not None)
        self._partitioner = resolve_partitioner(config["partitioner"])
        self._sticky = isinstance(self._partitioner, DefaultPartitioner)
        # topic -> _Lane: where send()'s fast path appends records without a key; module
        # doc. Only with the built-in sticky choice (a subclass may choose otherwise per
        # record).
        self._lanes = {}
        self._laned = self._sticky and all(
            getattr(type(self._partitioner), name) is getattr(DefaultPartitioner, name)
            for name in ("partition", "on_new_batch"))
        self._max_block = config["max_block_ms"] / 1000
        self._largest_batch = max(1, config["max_request_size"] - REQUEST_OVERHEAD)
        self.bulk_batch_size = min(max(config["batch_size"], BULK_BATCH_BYTES),
                                   self._largest_batch)
        policy = config.wait_policy(clock)
        if "ringlog_spin_iterations" not in config.provided:
            policy = dataclasses.replace(policy, spin=SENDER_SPIN)
        self._client = KafkaClient(
            config, client_id=self.client_id, clock=clock, policy=policy,
            ring_capacity=ring_capacity_for(config["max_request_size"] + REQUEST_OVERHEAD),
            watch_publications=config["enable_idempotence"])  # sender.py: moved leaders
        self._cluster = self._client.cluster
        self._transaction_manager = (
            TransactionManager(config["transactional_id"], config["transaction_timeout_ms"])
            if config["enable_idempotence"] else None)
        # checked by send(): a transactional producer sends only inside a transaction
        self._transactional = (self._transaction_manager
                               if config["transactional_id"] is not None else None)
        self._accumulator = RecordAccumulator(
            batch_size=min(config["batch_size"], self._largest_batch),
            buffer_memory=config["buffer_memory"], compression_type=config["compression_type"],
            linger_ms=config["linger_ms"],
            max_block_ms=config["max_block_ms"], max_request_size=config["max_request_size"],
            clock=clock, transaction_manager=self._transaction_manager)
        self._append = self._accumulator.append
        self._append_lock = self._accumulator.append_lock
        try:
            self._client.wait_for_metadata(self._max_block)
        except BaseException:
            self._client.close()
            raise
        self._sender = Sender(self._client, self._accumulator, config, clock=clock,
                              transaction_manager=self._transaction_manager)
        self._accumulator.wakeup = self._sender.wakeup
        self._sender.start()
        self._stats = process_stats(self._client.namespace, "producer", self.client_id)
        self._stats.add_source(ProducerStatsSource(self._sender, self._accumulator.pool))
        self._at_exit = _close_at_exit(self)
        atexit.register(self._at_exit)
        self._plain = not self._serializing and self._transactional is None

    # -- sending ---------------------------------------------------------------------------------

    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        """Queue a record; return a FutureRecordMetadata resolving to its RecordMetadata.

        ``value`` and ``key``: bytes (or bytes-like), or anything the configured serializers
        turn into bytes; one may be None, not both. ``headers``: a list of (str, bytes).
        ``partition``: a partition id, or None to let the partitioner choose.
        ``timestamp_ms``: the record's CreateTime (default: now).

        Raises KafkaTimeoutError when the topic's metadata or buffer memory is not available
        within ``max_block_ms``; ValueError at once for a ``partition`` the topic does not
        have (naming its partitions), TypeError / ValueError for bad arguments; IllegalStateError
        after close(). A record too large for ``max_request_size`` or ``buffer_memory``
        gives a failed future (MessageSizeTooLargeError), as in kafka-python.
        """
        if not self._plain or key is not None or partition is not None or headers is not None:
            # The API checks; a plain producer (open, not transactional, no serializers)
            # has none to make for a record with no key, partition or headers.
            if self._closed:
                raise IllegalStateError("KafkaProducer already closed!")
            if self._transactional is not None:
                self._transactional.check_sendable()
            if headers:
                _check_headers(headers)
            if self._serializing:
                serialize = self._key_serializer
                if serialize is not None:
                    key = serialize(topic, headers, key)
                serialize = self._value_serializer
                if serialize is not None:
                    value = serialize(topic, headers, value)
            if key is not None or partition is not None or headers is not None:
                return self._send(topic, value, key, headers, partition, timestamp_ms)
        # The fast path (module doc): the open batch of the topic's sticky partition, from
        # an earlier send under the same metadata, if it still takes records.
        lane = self._lanes.get(topic)
        if lane is not None:
            if _LANE is not None:  # the compiled twin of what follows (_lane_accel.pyx)
                future = lane.send(value, timestamp_ms)
                if future is not None:
                    return future
            elif value.__class__ is bytes and lane.version == self._cluster.version:
                if timestamp_ms is None:
                    timestamp_ms = time_ns() // 1_000_000
                if timestamp_ms.__class__ is int:
                    index = lane.append_value(timestamp_ms, value, self._append_lock)
                    if index is not None:
                        return FutureRecordMetadata(
                            (lane.batch, index, timestamp_ms, -1, len(value), -1))
        return self._send(topic, value, key, headers, partition, timestamp_ms)

    if _lane_module is not None:
        # The compiled twin (_lane_accel.pyx): the fast path with no Python frame per
        # record; every call it does not take goes to the send above, unchanged.
        send = _lane_module.compiled_send(send)

    def _send(self, topic, value, key, headers, partition, timestamp_ms):
        """send() for any record (serialized): partitioner, metadata waits, new batches."""
        if value is None and key is None:
            raise ValueError("Need at least one: key or value")
        cluster = self._cluster
        version = cluster.version  # read before the topics: a lane never outlives its metadata
        info = cluster.topics.get(topic)
        if info is None or info.error_code or (partition is not None
                                               and partition not in info.leaders):
            info = self._wait_on_metadata(topic, partition)
        if timestamp_ms is None:
            timestamp_ms = time_ns() // 1_000_000
        try:
            if partition is None:
                partitioner = self._partitioner
                partition = partitioner.partition(topic, key, info.partition_ids, info.available)
                if key is None and self._sticky:
                    appended = self._append(topic, partition, timestamp_ms, key, value,
                                            headers, True)
                    if appended is None:
                        partitioner.on_new_batch(topic, partition, info.partition_ids,
                                                 info.available)
                        partition = partitioner.partition(topic, key, info.partition_ids,
                                                          info.available)
                        appended = self._append(topic, partition, timestamp_ms, key, value,
                                                headers)
                    batch = appended[0]
                    builder = batch.builder  # None if already sent and done
                    lane = self._lanes.get(topic)
                    if self._laned and builder is not None and (
                            lane is None or lane.batch is not batch or lane.version != version):
                        self._lanes[topic] = (
                            _Lane(version, batch, builder.append_value) if _LANE is None
                            else _LANE(version, batch, builder, FutureRecordMetadata,
                                       self._cluster, self._append_lock))
                else:
                    appended = self._append(topic, partition, timestamp_ms, key, value, headers)
            else:
                appended = self._append(topic, partition, timestamp_ms, key, value, headers)
        except MessageSizeTooLargeError as exc:
            return FutureRecordMetadata((FailedSend(topic, partition, exc), -1, timestamp_ms,
                                         *_sizes(key, value, headers)))
        batch, index = appended
        return FutureRecordMetadata((
            batch, index, timestamp_ms, -1 if key is None else len(key),
            -1 if value is None else len(value), -1 if not headers else _header_size(headers)))

    def send_batch(self, topic, values, keys=None, partition=None, timestamp_ms=None,
                   batch_size=None, headers=None):
        """Queue many records at once; return one FutureBatchMetadata per batch made.

        ``values``: a 2-D uint8 numpy array (one fixed-size value per row) or a sequence of
        bytes-like (None for a tombstone). ``keys``: None, or one key per value (a sequence
        of bytes, or a 2-D uint8 array). ``headers``: None, or one list of (str, bytes) per
        value (None or [] for a record without). ``partition``: all records to this partition; else
        keyed records go where ``send()`` would put them (murmur2), and unkeyed ones fill one
        batch per partition, the partitioner choosing each batch's partition. Every record
        gets ``timestamp_ms`` (default: now, read once). ``batch_size`` (default
        ``bulk_batch_size``: 1 MiB, or less to fit ``max_request_size``) bounds each batch.
        Each future's ``record_indices`` lists the positions in ``values`` its batch holds,
        in offset order.

        Blocks up to ``max_block_ms`` for metadata and buffer memory (KafkaTimeoutError);
        serializers are not applied: values and keys are bytes already.
        """
        import numpy as np  # the bulk send's alone: a producer that only send()s never loads it
        if self._closed:
            raise IllegalStateError("KafkaProducer already closed!")
        if self._transactional is not None:
            self._transactional.check_sendable()
        count = len(values)
        if keys is not None and len(keys) != count:
            raise ValueError(f"{len(keys)} keys for {count} values")
        if headers is not None and len(headers) != count:
            raise ValueError(f"{len(headers)} headers for {count} values")
        info = self._cluster.topics.get(topic)
        if info is None or info.error_code or (partition is not None
                                               and partition not in info.leaders):
            info = self._wait_on_metadata(topic, partition)
        if timestamp_ms is None:
            timestamp_ms = time_ns() // 1_000_000
        size = self.bulk_batch_size if batch_size is None else min(batch_size,
                                                                   self._largest_batch)
        futures = []
        if partition is not None:
            self._queue_bulk(topic, lambda _: partition, values, keys, headers, None,
                             timestamp_ms, size, futures)
        elif keys is not None:
            key_list = [row.tobytes() for row in keys] if isinstance(keys, np.ndarray) else keys
            if None in key_list:
                raise ValueError(f"send_batch to {topic!r}: keys must all be bytes (a null "
                                 f"key has no partition of its own); found None at index "
                                 f"{list(key_list).index(None)}")
            targets = partitions_for_keys(key_list, len(info.partition_ids))
            order = np.argsort(targets, kind="stable")
            bounds = np.flatnonzero(np.diff(targets[order])) + 1
            for group in np.split(order, bounds):
                chosen = info.partition_ids[int(targets[group[0]])]
                self._queue_bulk(topic, lambda _, p=chosen: p, values, keys, headers, group,
                                 timestamp_ms, size, futures)
        else:
            partitioner = self._partitioner

            def next_partition(previous):
                if previous is not None:
                    partitioner.on_new_batch(topic, previous, info.partition_ids,
                                             info.available)
                return partitioner.partition(topic, None, info.partition_ids, info.available)
            self._queue_bulk(topic, next_partition, values, None, headers, None, timestamp_ms,
                             size, futures)
        self._sender.wakeup()
        return futures

    def _queue_bulk(self, topic, choose, values, keys, headers, indices, timestamp_ms, size,
                    futures):
        """Encode ``values[indices]`` (all when None; their keys and headers with them) chunk
        by chunk and queue each batch on ``choose(previous partition)``."""
        import numpy as np

        from segments.record.bulk import generate_batches
        total = len(values) if indices is None else len(indices)
        accumulator = self._accumulator
        append_built = accumulator.append_built
        codec = self.config["compression_type"] or "none"
        partition = None
        lent = []  # the pool buffer a batch is being built into, until it is queued

        def allocate(size):
            buffer = accumulator.allocate_built(size, f"{topic} (send_batch)")
            lent.append(buffer)
            return buffer
        for start in range(0, total, BULK_CHUNK_RECORDS):
            stop = min(total, start + BULK_CHUNK_RECORDS)
            if indices is None:
                where = None  # positions start.. : each batch's made on its own (small)
                chunk_values = values[start:stop]
                chunk_keys = None if keys is None else keys[start:stop]
                chunk_headers = None if headers is None else headers[start:stop]
            else:
                where = indices[start:stop]
                chunk_values = _take(values, where)
                chunk_keys = None if keys is None else _take(keys, where)
                chunk_headers = None if headers is None else _take(headers, where)
            built = generate_batches(chunk_values, chunk_keys, timestamp_ms, chunk_headers,
                                     compression_type=codec, batch_size=size,
                                     allocate=allocate)
            first = 0
            try:
                for data in built:
                    records = BatchHeader(data).record_count
                    partition = choose(partition)
                    pooled = bool(lent) and data is lent[-1]  # built into a pool buffer
                    lent.clear()  # append_built owns it now, queued or given back
                    batch = append_built(topic, partition, data, records,
                                         np.arange(start + first, start + first + records)
                                         if where is None else where[first:first + records],
                                         pooled)
                    first += records
                    futures.append(FutureBatchMetadata((batch,)))
            finally:
                for buffer in lent:  # built into, never queued: the pool's again
                    accumulator.pool.deallocate(buffer)
                lent.clear()

    def _wait_on_metadata(self, topic, partition=None):
        """The topic's metadata once it lists the topic (and ``partition``), waiting up to
        ``max_block_ms`` (KafkaTimeoutError); a non-retriable topic error is raised.

        A ``partition`` the topic does not have raises ValueError at once, naming the
        topic's partitions, as kafka-python's ``send()`` does ("Unrecognized partition 7
        for topic t"): once metadata fetched after this call began still lacks it (so a
        partition just added by ``create_partitions`` is found, not refused)."""
        cluster = self._cluster
        cluster.add_topics((topic,))
        deadline = self._clock() + self._max_block
        refreshed = False
        while True:
            info = cluster.topics.get(topic)
            if info is not None and info.error_code and not info.error.retriable:
                raise info.error(f"topic {topic!r}: {info.error.description}")
            if info is not None and not info.error_code and info.partition_ids:
                if partition is None or partition in info.leaders:
                    return info
                if refreshed:
                    ids = info.partition_ids
                    raise ValueError(
                        f"Unrecognized partition {partition} for topic {topic}: it has "
                        f"{len(ids)} partition{'s' if len(ids) > 1 else ''}, "
                        + (f"{ids[0]}" if len(ids) == 1 else f"{ids[0]}..{ids[-1]}"))
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise KafkaTimeoutError(self._metadata_timeout_message(topic, partition, info))
            attempts = cluster.request_update()
            self._sender.wakeup()
            refreshed = (cluster.wait_for_update(attempts, remaining)
                         and cluster.last_error is None)

    def _metadata_timeout_message(self, topic, partition, info):
        wait = f"after {self._max_block * 1000:.0f} ms (max_block_ms)"
        if info is not None and partition is not None and not info.error_code:
            return (f"partition {partition} of topic {topic!r} with partition count "
                    f"{len(info.partition_ids)} is not present in metadata {wait}")
        reason = (info.error.message if info is not None and info.error_code else
                  str(self._cluster.last_error or "no answer"))
        return f"topic {topic!r} not present in metadata {wait}: {reason}"

    # -- transactions ----------------------------------------------------------------------------

    def _transaction_manager_or_raise(self, what):
        if self._transactional is None:
            raise IllegalStateError(f"{what}: the producer has no transactional_id")
        if self._closed:
            raise IllegalStateError("KafkaProducer already closed!")
        return self._transactional

    def _wait(self, result, timeout_ms, what):
        self._sender.wakeup()
        result.wait(self._max_block if timeout_ms is None else timeout_ms / 1000, what)

    def init_transactions(self, timeout_ms=None):
        """Register the ``transactional_id`` with its coordinator (InitProducerId): fences
        older producers with the same id and ends (aborts) their open transaction. Call
        once, before the first transaction. Waits up to ``timeout_ms`` (default
        ``max_block_ms``): KafkaTimeoutError, after which calling it again waits for the
        same request; ProducerFencedError and other fatal errors are raised."""
        txn = self._transaction_manager_or_raise("init_transactions")
        result = txn.begin_init()
        txn_requests.load_codecs()  # while the sender sends InitProducerId
        self._wait(result, timeout_ms, "init_transactions")

    def begin_transaction(self):
        """Start a transaction: records sent from now on are part of it until
        ``commit_transaction`` or ``abort_transaction``. IllegalStateError before
        ``init_transactions``, inside a transaction, or after a fatal error."""
        self._transaction_manager_or_raise("begin_transaction").begin_transaction()

    def send_offsets_to_transaction(self, offsets, consumer_group_metadata, timeout_ms=None):
        """Commit a consumer group's ``offsets`` (``{TopicPartition: OffsetAndMetadata}``)
        as part of the transaction (AddOffsetsToTxn to the transaction coordinator, then
        TxnOffsetCommit to the group's coordinator): they count only if the transaction
        commits. ``consumer_group_metadata``: the consumer's ``group_metadata()`` (a
        ConsumerGroupMetadata), whose generation, member id and group instance id the
        group coordinator checks (KIP-447): a consumer that lost its partitions in a
        rebalance fails with CommitFailedError (FencedInstanceIdError for a fenced static
        member), an abortable error — abort the transaction, the producer stays usable. A
        bare group id is sent without them (generation -1) and not checked."""
        txn = self._transaction_manager_or_raise("send_offsets_to_transaction")
        group = consumer_group_metadata
        if isinstance(group, str):
            group = ConsumerGroupMetadata(group, NO_GENERATION, "", None)
        if group is None:
            raise IllegalArgumentError("send_offsets_to_transaction: the consumer group "
                                       "metadata is None")
        if group.generation_id > 0 and not group.member_id:
            raise IllegalArgumentError(f"send_offsets_to_transaction: {group} has a "
                                       f"generation but no member id")  # as Java's
        self._wait(txn.begin_send_offsets(offsets, group), timeout_ms,
                   "send_offsets_to_transaction")

    def commit_transaction(self, timeout_ms=None):
        """Flush every record of the transaction and commit it (EndTxn). If a record of it
        failed, raises that error (the transaction must be aborted); fatal errors
        (ProducerFencedError) are raised and every later call raises."""
        txn = self._transaction_manager_or_raise("commit_transaction")
        result = txn.begin_commit()
        self.flush(None if timeout_ms is None else timeout_ms / 1000)
        self._wait(result, timeout_ms, "commit_transaction")

    def abort_transaction(self, timeout_ms=None):
        """Abort the transaction (EndTxn): records not yet sent fail, records written are
        never read by read_committed consumers. Works after an abortable error."""
        txn = self._transaction_manager_or_raise("abort_transaction")
        self._wait(txn.begin_abort(), timeout_ms, "abort_transaction")

    def prepare_transaction(self, timeout_ms=None):
        """ringlog's two-phase-commit step (Flink's ``FlinkKafkaProducer`` does it by
        reflection): flush the transaction's records and return ``(producer_id, epoch)``,
        with which another process ends the transaction
        (``KafkaAdminClient.end_transaction``) after this producer is closed with
        ``close(timeout=0)`` (a close that waits would abort it). Raises the error that
        makes the transaction abortable (a record failed), IllegalStateError outside a
        transaction or when nothing was sent in it."""
        txn = self._transaction_manager_or_raise("prepare_transaction")
        self.flush(None if timeout_ms is None else timeout_ms / 1000)
        return txn.prepared()

    # -- waiting and closing ---------------------------------------------------------------------

    def flush(self, timeout=None):
        """Send everything queued now (ignoring linger) and wait until every record sent
        before this call is acknowledged or failed; KafkaTimeoutError after ``timeout``
        seconds (None: no limit)."""
        accumulator = self._accumulator
        accumulator.begin_flush()
        try:
            self._sender.wakeup()
            deadline = None if timeout is None else self._clock() + timeout
            for batch in accumulator.incomplete():
                remaining = None if deadline is None else max(0.0, deadline - self._clock())
                if not batch.done.wait(remaining):
                    raise KafkaTimeoutError(
                        f"flush: {batch.topic}-{batch.partition} still has records "
                        f"unacknowledged after {timeout} s")
        finally:
            accumulator.end_flush()

    def close(self, timeout=None):
        """Send what is queued and stop: waits up to ``timeout`` seconds (None: no limit)
        for it to be acknowledged and for a transaction still open to be aborted (EndTxn,
        as Java's producer: its records are never read by read_committed consumers, and
        the transactional id is free for a new producer at once), then fails whatever is
        left (IllegalStateError) and closes the connections. ``timeout=0`` waits for
        nothing: an open transaction is left to the coordinator, which aborts it after
        ``transaction_timeout_ms``. Safe to call twice."""
        if self._closed:
            return
        self._plain = False  # send() checks again, and refuses
        self._closed = True
        atexit.unregister(self._at_exit)
        sender = self._sender
        if threading.current_thread() is sender:
            timeout = 0  # a callback cannot wait for its own thread
        if timeout == 0:
            sender.force_close()
        else:
            sender.initiate_close()
            sender.join(timeout)
        if sender.is_alive():
            sender.force_close()
            if threading.current_thread() is not sender:
                sender.join()
        self._stats.close()
        for hook in (self.config["key_serializer"], self.config["value_serializer"]):
            if hasattr(hook, "close"):
                hook.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    # -- information -------------------------------------------------------------------------------

    def partitions_for(self, topic):
        """The set of partition ids of ``topic`` (waits for its metadata up to max_block_ms)."""
        info = self._cluster.topics.get(topic)
        if info is None or info.error_code:
            info = self._wait_on_metadata(topic)
        return set(info.partition_ids)

    def bootstrap_connected(self):
        """True while the producer has a connection to at least one broker."""
        client = self._client
        return any(client.connected(node) for node in client.cluster.brokers)

    def metrics(self, raw=False):
        """kafka-python's producer metrics, ``{group: {name: value}}``
        (``cluster.producer.producer_metrics``); ``raw`` is accepted for kafka-python
        compatibility and changes nothing."""
        return producer_metrics.snapshot(self._sender.metrics, self._accumulator.pool,
                                         self._client.in_flight_count())

    def __repr__(self):
        return f"<KafkaProducer client_id={self.client_id} cluster={self._client.cluster_id}>"


class _Lane:
    """A topic's lane for ``send()``'s fast path (module doc): the open ProducerBatch of
    its sticky partition, the metadata ``version`` it was chosen under, and that batch's
    ``builder.append_value``. Made once per batch by the general path; read per record."""

    __slots__ = ("version", "batch", "append_value")

    def __init__(self, version, batch, append_value):
        self.version = version
        self.batch = batch
        self.append_value = append_value


def _close_at_exit(producer):
    """An atexit hook that closes ``producer`` (1 s grace) unless it is gone already, as
    kafka-python's, so an interpreter exit still sends what is queued and unlinks the
    rings."""
    proxy = weakref.proxy(producer)

    def close():
        try:
            proxy.close(timeout=1)
        except ReferenceError:
            pass
    return close


def _check_headers(headers):
    if not isinstance(headers, list):
        _bad_headers(headers)
    for item in headers:  # a loop, not all(<genexpr>): no generator per record
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                and (item[1] is None or isinstance(item[1], (bytes, bytearray, memoryview)))):
            _bad_headers(headers)


def _bad_headers(headers):
    raise TypeError(f"headers must be a list of (str, bytes) tuples, found {headers!r}")


def _header_size(headers):
    """kafka-python's serialized_header_size: UTF-8 keys plus values."""
    size = 0
    for key, value in headers:  # a loop, not sum(<genexpr>): no generator per record
        size += (len(key) if key.isascii() else len(key.encode())) + (
            0 if value is None else len(value))
    return size


def _sizes(key, value, headers):
    return (-1 if key is None else len(key), -1 if value is None else len(value),
            -1 if not headers else _header_size(headers))


def _take(items, where):
    import numpy as np
    if isinstance(items, np.ndarray):
        return items[where]
    return [items[i] for i in where.tolist()]


