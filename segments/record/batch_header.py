"""A view over the header of one RecordBatch v2 in a buffer (layout: ``batch_descriptor``).

``BatchHeader`` reads the header fields without touching the records, validates the
framing and the CRC-32C, and stamps baseOffset and partitionLeaderEpoch in place — the
two fields the CRC does not cover — so a leader assigns offsets without re-encoding. A
producer re-stamps its producer fields in place (and the CRC with them).
It does no I/O and holds no lock; whoever owns the buffer owns the view.
"""
from __future__ import annotations

from crc32c import crc32c

from segments.errors import CorruptRecordError
from segments.record import batch_descriptor as d


class BatchHeader:
    """Header fields of the batch starting at ``position`` in ``buf``.

    ``buf`` is any object supporting the buffer protocol (bytes, bytearray, memoryview,
    mmap). Reading fields needs only the header's 61 bytes; ``validate()`` and
    ``compute_crc()`` need the whole batch.
    """

    __slots__ = (
        "buf", "position", "base_offset", "batch_length", "partition_leader_epoch",
        "magic", "crc", "attributes", "last_offset_delta", "base_timestamp",
        "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "record_count",
    )

    def __init__(self, buf, position=0):
        if len(buf) - position < d.HEADER_SIZE:
            raise CorruptRecordError(
                f"batch header at position {position} needs {d.HEADER_SIZE} bytes, "
                f"found {max(0, len(buf) - position)}")
        self.buf = buf
        self.position = position
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic,
         self.crc, self.attributes, self.last_offset_delta, self.base_timestamp,
         self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
         self.record_count) = d.HEADER.unpack_from(buf, position)

    # -- derived fields -------------------------------------------------------------------

    @property
    def size_in_bytes(self):
        """Bytes the whole batch occupies: the 12-byte log overhead plus batchLength."""
        return d.LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression_type(self):
        return self.attributes & d.COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self):
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & d.TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self):
        return bool(self.attributes & d.TRANSACTIONAL_MASK)

    @property
    def is_control_batch(self):
        return bool(self.attributes & d.CONTROL_MASK)

    # -- checks ---------------------------------------------------------------------------

    def compute_crc(self):
        """CRC-32C over attributes .. end of batch."""
        start = self.position + d.ATTRIBUTES_OFFSET
        end = self.position + self.size_in_bytes
        with memoryview(self.buf) as view:
            return crc32c(view[start:end])

    def validate(self, check_crc=True):
        """Raise CorruptRecordError unless the framing (and the CRC) check out.

        The framing checks: magic 2, a batchLength that covers at least the header and
        fits in the buffer, a non-negative record count and lastOffsetDelta.
        """
        if self.magic != d.MAGIC:
            raise CorruptRecordError(
                f"batch at position {self.position}: magic {self.magic}, expected {d.MAGIC}")
        if self.batch_length < d.HEADER_SIZE - d.LOG_OVERHEAD:
            raise CorruptRecordError(
                f"batch at position {self.position}: batchLength {self.batch_length} is "
                f"smaller than the header ({d.HEADER_SIZE - d.LOG_OVERHEAD})")
        available = len(self.buf) - self.position
        if self.size_in_bytes > available:
            raise CorruptRecordError(
                f"batch at position {self.position}: batchLength {self.batch_length} "
                f"runs past the end of the buffer ({available} bytes left)")
        if self.record_count < 0 or self.last_offset_delta < 0:
            raise CorruptRecordError(
                f"batch at position {self.position}: recordCount {self.record_count}, "
                f"lastOffsetDelta {self.last_offset_delta}")
        if check_crc:
            computed = self.compute_crc()
            if computed != self.crc:
                raise CorruptRecordError(
                    f"batch at position {self.position}: stored CRC {self.crc:#010x}, "
                    f"computed CRC {computed:#010x}")

    # -- stamping (the leader's two writes) -----------------------------------------------

    def stamp(self, base_offset, partition_leader_epoch=None):
        """Write baseOffset (and partitionLeaderEpoch) into the buffer; the CRC stays valid."""
        d.INT64.pack_into(self.buf, self.position + d.BASE_OFFSET_OFFSET, base_offset)
        self.base_offset = base_offset
        if partition_leader_epoch is not None:
            d.INT32.pack_into(self.buf, self.position + d.PARTITION_LEADER_EPOCH_OFFSET,
                              partition_leader_epoch)
            self.partition_leader_epoch = partition_leader_epoch

    def set_log_append_time(self, now):
        """Mark the batch LogAppendTime with maxTimestamp ``now`` and re-checksum it: unlike
        baseOffset, both fields sit inside the CRC (Kafka's setMaxTimestamp)."""
        attributes = self.attributes | d.TIMESTAMP_TYPE_MASK
        d.INT16.pack_into(self.buf, self.position + d.ATTRIBUTES_OFFSET, attributes)
        d.INT64.pack_into(self.buf, self.position + d.MAX_TIMESTAMP_OFFSET, now)
        self.attributes = attributes
        self.max_timestamp = now
        self.crc = self.compute_crc()
        d.UINT32.pack_into(self.buf, self.position + d.CRC_OFFSET, self.crc)

    def set_producer_state(self, producer_id, producer_epoch, base_sequence):
        """Write producerId, producerEpoch and baseSequence and re-checksum the batch: they
        sit inside the CRC. For a producer re-stamping a batch it built earlier (a bulk
        batch, or one whose sequence is reset after an epoch bump)."""
        position = self.position
        d.INT64.pack_into(self.buf, position + d.PRODUCER_ID_OFFSET, producer_id)
        d.INT16.pack_into(self.buf, position + d.PRODUCER_EPOCH_OFFSET, producer_epoch)
        d.INT32.pack_into(self.buf, position + d.BASE_SEQUENCE_OFFSET, base_sequence)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.crc = self.compute_crc()
        d.UINT32.pack_into(self.buf, position + d.CRC_OFFSET, self.crc)

    def __repr__(self):
        return (f"BatchHeader(base_offset={self.base_offset}, length={self.batch_length}, "
                f"records={self.record_count}, crc={self.crc:#010x}, "
                f"attributes={self.attributes:#x}, position={self.position})")


def iter_batches(buf, position=0, end=None):
    """Yield a BatchHeader for each whole batch in ``buf[position:end]``.

    Stops at a partial batch at the end (a fetch response may end in one); raises
    CorruptRecordError on a batch whose framing is invalid. CRCs are not checked here.
    """
    end = len(buf) if end is None else end
    while end - position >= d.HEADER_SIZE:
        _, length = d.OFFSET_AND_LENGTH.unpack_from(buf, position)
        size = d.LOG_OVERHEAD + length
        if size > end - position:
            return
        header = BatchHeader(buf, position)
        header.validate(check_crc=False)
        yield header
        position += size
