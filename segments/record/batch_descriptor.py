"""Binary layout of a Kafka RecordBatch v2 (magic 2) header.

Every field is big-endian. Offsets are built one from the one before, so the table
below and the constants cannot drift apart::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +---------------------------------------------------------------+
    |                      baseOffset (int64)                       |  @0
    +---------------------------------------------------------------+
    |                      batchLength (int32)                      |  @8
    +---------------------------------------------------------------+
    |                 partitionLeaderEpoch (int32)                  |  @12
    +---------------+-----------------------------------------------+
    |  magic (int8) |              crc (uint32) ...                 |  @16, @17
    +---------------+---------------+-------------------------------+
    |  ... crc      |       attributes (int16)      | lastOffsetDelta @23
    +---------------+-------------------------------+---------------+
    |        ... lastOffsetDelta (int32)            | baseTimestamp @27 (int64)
    |        ... maxTimestamp (int64) @35           | producerId @43 (int64)
    |        ... producerEpoch (int16) @51 | baseSequence (int32) @53 |
    |        recordCount (int32) @57       | records ...  @61         |
    +---------------------------------------------------------------+

batchLength counts the bytes after the batchLength field itself, so a batch occupies
``LOG_OVERHEAD + batchLength`` bytes in a log (``LOG_OVERHEAD`` = 12).

The CRC-32C covers bytes ``ATTRIBUTES_OFFSET`` to the end of the batch. baseOffset and
partitionLeaderEpoch sit before it (and batchLength, which only frames the batch), so the
leader stamps them without re-checksumming: a batch's CRC is computed once, by the
producer, and checked by the broker and by the consumer.

Attributes: bits 0-2 compression codec, bit 3 timestamp type (1 = log-append time),
bit 4 transactional, bit 5 control batch, bit 6 has delete horizon (compaction).
"""
from __future__ import annotations

import struct

MAGIC = 2

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = BASE_OFFSET_OFFSET + 8
PARTITION_LEADER_EPOCH_OFFSET = BATCH_LENGTH_OFFSET + 4
MAGIC_OFFSET = PARTITION_LEADER_EPOCH_OFFSET + 4
CRC_OFFSET = MAGIC_OFFSET + 1
ATTRIBUTES_OFFSET = CRC_OFFSET + 4
LAST_OFFSET_DELTA_OFFSET = ATTRIBUTES_OFFSET + 2
BASE_TIMESTAMP_OFFSET = LAST_OFFSET_DELTA_OFFSET + 4
MAX_TIMESTAMP_OFFSET = BASE_TIMESTAMP_OFFSET + 8
PRODUCER_ID_OFFSET = MAX_TIMESTAMP_OFFSET + 8
PRODUCER_EPOCH_OFFSET = PRODUCER_ID_OFFSET + 8
BASE_SEQUENCE_OFFSET = PRODUCER_EPOCH_OFFSET + 2
RECORD_COUNT_OFFSET = BASE_SEQUENCE_OFFSET + 4
RECORDS_OFFSET = RECORD_COUNT_OFFSET + 4

#: Bytes in front of batchLength's count: baseOffset + batchLength.
LOG_OVERHEAD = BATCH_LENGTH_OFFSET + 4
#: Size of the fixed header; the smallest valid batch (no records) is this long.
HEADER_SIZE = RECORDS_OFFSET
#: Bytes needed to learn a batch's magic and length.
PREFIX_SIZE = MAGIC_OFFSET + 1

#: The whole header: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
#: lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence,
#: recordCount.
HEADER = struct.Struct(">qiibIhiqqqhii")
assert HEADER.size == HEADER_SIZE

#: The fields after the CRC, in the order HEADER lists them (attributes .. recordCount).
HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")
assert ATTRIBUTES_OFFSET + HEADER_AFTER_CRC.size == HEADER_SIZE

#: baseOffset + batchLength: what a log scan reads first.
OFFSET_AND_LENGTH = struct.Struct(">qi")

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT64 = struct.Struct(">q")

# Attribute bits.
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

# Compression codec ids (attributes bits 0-2).
CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4

# Sentinels Kafka uses when there is no producer id / sequence / leader epoch.
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1
