"""One producer batch, and the light per-record futures ``send()`` hands out.

A ``ProducerBatch`` holds the records bound for one partition: appended through a
``RecordBatchBuilder`` over a ``BufferPool`` buffer, built once by the sender, sent (and
resent on retriable errors) as the same bytes, completed once. Its ``done`` future carries
``(base_offset, log_append_time_ms)``. An idempotent producer's batch carries the producer
id, epoch and base sequence it was stamped with when first drained
(``transaction_manager``); a retry sends the same bytes.

``send()`` returns a ``FutureRecordMetadata`` per record: not a future of its own but a
tuple ``(batch, index, timestamp, key size, value size, header size)`` — one small tuple,
no lock, no callback list — that reads the batch's future and turns its result into the
record's ``RecordMetadata`` (offset = base offset + index) on demand. It has
kafka-python's ``FutureRecordMetadata`` API: ``get(timeout)``, ``is_done``, ``value``,
``exception``, ``succeeded()``, ``failed()``, ``retriable()``, ``add_callback``,
``add_errback``, ``add_both``, ``chain``.

The bulk path (``KafkaProducer.send_batch``) hands out one ``FutureBatchMetadata`` per
batch instead, whose result is a ``BatchMetadata`` and which knows which input records the
batch holds (``record_indices``).

Thread safety: appenders fill a batch under the accumulator's lock; then the sender thread
owns it (builds, sends, completes). The futures may be read and waited on from any thread.
"""
from __future__ import annotations

import collections
import functools
import operator

from cluster.client.future import Future
from cluster.errors import KafkaTimeoutError, RetriableError
from cluster.structs import TopicPartition

RecordMetadata = collections.namedtuple(
    "RecordMetadata",
    ["topic", "partition", "topic_partition", "offset", "timestamp", "checksum",
     "serialized_key_size", "serialized_value_size", "serialized_header_size"])
RecordMetadata.__doc__ = """Where an acknowledged record landed (kafka-python's fields).

offset is -1 when the broker assigned none (acks=0); timestamp is the record's CreateTime,
or the broker's LogAppendTime when the topic uses it; checksum is always None (RecordBatch
v2 has no per-record CRC); sizes are -1 for a null key or value, or no headers."""

BatchMetadata = collections.namedtuple(
    "BatchMetadata",
    ["topic", "partition", "topic_partition", "base_offset", "record_count", "timestamp"])
BatchMetadata.__doc__ = """Where an acknowledged bulk batch landed: its records have offsets
base_offset .. base_offset + record_count - 1 (base_offset -1 with acks=0); timestamp is
the LogAppendTime the broker reported, or -1 for CreateTime topics."""


class ProducerBatch:
    """Records for one partition, from the first append to the broker's answer.

    Owned by the accumulator while open (appends under its lock), then by the sender.
    ``builder`` is None for a bulk batch, which arrives built. ``buffer`` is the pool
    buffer the batch is built into (given back by the accumulator when the batch is done).
    """

    __slots__ = (
        "topic", "partition", "topic_partition", "builder", "buffer", "created", "done",
        "record_count", "full", "built", "attempts", "retry_at", "metadata_ticket", "last_error",
        "record_indices", "producer_id", "producer_epoch", "base_sequence", "sequence_order")

    def __init__(self, topic, partition, builder, buffer, created):
        self.topic = topic
        self.partition = partition
        self.topic_partition = TopicPartition(topic, partition)
        self.builder = builder
        self.buffer = buffer
        self.created = created  # monotonic seconds: linger and delivery timeout count from here
        self.done = Future()
        self.record_count = 0  # known once closed (build); the builder counts until then
        self.full = False      # an append was refused: send without waiting for linger
        self.built = None      # the batch bytes, once built
        self.attempts = 0      # produce requests that carried it
        self.retry_at = 0.0    # monotonic seconds before which a retry must not be sent
        self.metadata_ticket = 0  # the metadata refresh a retry waits for (0: none)
        self.last_error = None  # the retriable error of its last attempt, if it failed
        self.record_indices = None  # bulk batches: which input records it holds
        # The idempotent producer's stamp (transaction_manager), given when first drained:
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1  # -1: not stamped
        self.sequence_order = 0  # stamps given before this one by its producer

    @classmethod
    def of_built(cls, topic, partition, data, record_count, buffer, created):
        """A batch that arrives built (the bulk path): ``data`` are its bytes."""
        batch = cls(topic, partition, None, buffer, created)
        batch.built = data
        batch.record_count = record_count
        return batch

    def close_for_appends(self):
        """Refuse every later append: the batch is no longer its partition's open batch
        (it refused a record, another was queued behind it, or it left the queue). Caller
        holds the accumulator's lock."""
        if self.builder is not None:
            self.builder.close_for_appends()

    def build(self):
        """Encode the batch (once) and return its bytes; appends are refused from now on."""
        if self.built is None:
            builder = self.builder
            self.record_count = builder.record_count
            self.built = builder.build_parts()  # a large value: its parts, not copied
        return self.built

    @property
    def size(self):
        """Bytes of the batch: as built, or uncompressed so far."""
        built = self.built
        return len(built) if built is not None else self.builder.size_in_bytes()

    def complete(self, base_offset, log_append_time):
        """The broker accepted the batch (base_offset -1: acks=0)."""
        self.done.success((base_offset, log_append_time))

    def fail(self, exception):
        self.done.failure(exception)

    def __repr__(self):
        return (f"ProducerBatch({self.topic!r}, {self.partition}, records="
                f"{self.record_count or (self.builder.record_count if self.builder else 0)}, "
                f"attempts={self.attempts}, done={self.done.is_done})")


class FailedSend:
    """Stands in for a batch when ``send()`` fails before any batch takes the record, so
    the caller still gets a future (kafka-python returns a failed one too)."""

    __slots__ = ("topic", "partition", "topic_partition", "done")

    def __init__(self, topic, partition, exception):
        self.topic = topic
        self.partition = partition
        self.topic_partition = TopicPartition(topic, partition)
        self.done = Future().failure(exception)


class _BatchView(tuple):
    """Shared behaviour of the per-record and per-batch futures: a tuple (built by
    ``send()`` with one C call, no ``__init__``) whose first field is ``batch``, the
    ProducerBatch (or a FailedSend); subclasses name their other fields and define
    ``_metadata(result)``."""

    __slots__ = ()

    batch = property(operator.itemgetter(0), doc="The ProducerBatch, or a FailedSend.")

    @property
    def is_done(self):
        return self.batch.done.is_done

    @property
    def exception(self):
        return self.batch.done.exception

    @property
    def value(self):
        done = self.batch.done
        return self._metadata(done.value) if done.is_done and done.exception is None else None

    def succeeded(self):
        return self.batch.done.succeeded()

    def failed(self):
        return self.batch.done.failed()

    def retriable(self):
        done = self.batch.done
        return done.is_done and isinstance(done.exception, RetriableError)

    def get(self, timeout=None):
        """The metadata once the broker acknowledged; waits up to ``timeout`` seconds (None:
        no limit). Raises the batch's error, or KafkaTimeoutError if not done in time."""
        done = self.batch.done
        if not done.is_done and not done.wait(timeout):
            raise KafkaTimeoutError(
                f"no acknowledgement for {self._describe()} after waiting {timeout} s")
        if done.exception is not None:
            raise done.exception
        return self._metadata(done.value)

    def add_callback(self, f, *args, **kwargs):
        """Call ``f(*args, metadata, **kwargs)`` once acknowledged; returns self."""
        if args or kwargs:
            f = functools.partial(f, *args, **kwargs)
        self.batch.done.add_callback(lambda result: f(self._metadata(result)))
        return self

    def add_errback(self, f, *args, **kwargs):
        """Call ``f(*args, exception, **kwargs)`` if the send fails; returns self."""
        self.batch.done.add_errback(f, *args, **kwargs)
        return self

    def add_both(self, f, *args, **kwargs):
        self.add_callback(f, *args, **kwargs)
        return self.add_errback(f, *args, **kwargs)

    def chain(self, future):
        """Complete ``future`` with this one's metadata or error; returns self."""
        self.add_callback(future.success)
        return self.add_errback(future.failure)


class FutureRecordMetadata(_BatchView):
    """The future of one record: ``(batch, index, timestamp, key size, value size, header
    size)`` (module doc)."""

    __slots__ = ()

    index = property(operator.itemgetter(1), doc="The record's place in its batch.")

    def _metadata(self, result):
        batch, index, timestamp, key_size, value_size, header_size = self
        base_offset, log_append_time = result
        return RecordMetadata(
            batch.topic, batch.partition, batch.topic_partition,
            base_offset + index if base_offset >= 0 else -1,
            log_append_time if log_append_time >= 0 else timestamp, None,
            key_size, value_size, header_size)

    def _describe(self):
        batch = self.batch
        return f"record {self.index} of a batch for {batch.topic}-{batch.partition}"

    def __repr__(self):
        return f"FutureRecordMetadata({self.batch!r}, index={self.index})"


class FutureBatchMetadata(_BatchView):
    """The future of one bulk batch: ``(batch,)``; ``record_indices`` says which input
    records it holds, in offset order."""

    __slots__ = ()

    @property
    def record_indices(self):
        return self.batch.record_indices

    def _metadata(self, result):
        batch = self.batch
        base_offset, log_append_time = result
        return BatchMetadata(batch.topic, batch.partition, batch.topic_partition, base_offset,
                             batch.record_count, log_append_time)

    def _describe(self):
        return f"a bulk batch for {self.batch.topic}-{self.batch.partition}"

    def __repr__(self):
        return f"FutureBatchMetadata({self.batch!r})"
