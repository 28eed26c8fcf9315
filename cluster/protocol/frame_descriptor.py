"""Binary layout of the Kafka protocol frames on the rings.

Every field is big-endian. A frame is a size prefix followed by a header and a body; the
size counts the bytes after the size field itself, so a frame occupies
``SIZE_PREFIX_LENGTH + size`` bytes. Requests use request header v1, responses response
header v0 — the headers of every non-flexible API version::

    request frame                               response frame
    +-------------------------------+           +-------------------------------+
    | size (int32)                  | @0        | size (int32)                  | @0
    +---------------+---------------+           +-------------------------------+
    | api_key int16 | api_version   | @4, @6    | correlation_id (int32)        | @4
    +---------------+---------------+           +-------------------------------+
    | correlation_id (int32)        | @8        | body ...                      | @8
    +---------------+---------------+           +-------------------------------+
    | client_id len | client_id ... | @12, @14   (int16 length, -1 = null; UTF-8)
    +---------------+---------------+
    | body ...                      | @14 + client_id length
    +-------------------------------+

An API with no non-flexible version (AlterPartition) travels at a flexible version: request
header v2 is v1 followed by a tagged-field section, response header v1 is v0 followed by
one; a tagged-field section is an unsigned varint count and that many fields, and ringlog
writes none (one byte, 0)::

    request header v2: ... | client_id ... | tagged fields (0x00) | body ...
    response header v1: size | correlation_id | tagged fields (0x00) | body ...

The bodies of flexible versions use compact strings and arrays and end each struct with
its own tagged fields; kio encodes and decodes them.

Body primitives (Kafka's names): STRING = int16 length + UTF-8 bytes; NULLABLE_STRING the
same with length -1 for null; NULLABLE_BYTES / RECORDS = int32 length + bytes, -1 for null;
ARRAY = int32 count + elements, -1 for null.

The two bodies that carry record batches, and the Fetch request that every consumer sends
for each response, are written field by field by ``batch_bodies`` (the requests) and
``fetch_response`` (the broker's answer); their layouts, ``[...]`` marking a repeated group::

    ProduceRequest v3-8                     FetchResponse v4-11
      transactional_id  NULLABLE_STRING       throttle_time_ms     int32
      acks              int16                 error_code           int16   (v7+)
      timeout_ms        int32                 session_id           int32   (v7+)
      [topic_data]      ARRAY                 [responses]          ARRAY
        name            STRING                  topic              STRING
        [partition_data] ARRAY                  [partitions]       ARRAY
          index         int32                     partition_index  int32
          records       RECORDS                   error_code       int16
                                                  high_watermark   int64
                                                  last_stable_offset int64
                                                  log_start_offset int64  (v5+)
                                                  [aborted_transactions] ARRAY, -1 = null
                                                    producer_id    int64
                                                    first_offset   int64
                                                  preferred_read_replica int32  (v11)
                                                  records          RECORDS

    FetchRequest v4-11
      replica_id        int32
      max_wait_ms       int32
      min_bytes         int32
      max_bytes         int32
      isolation_level   int8
      session_id        int32   (v7+)
      session_epoch     int32   (v7+)
      [topics]          ARRAY
        topic           STRING
        [partitions]    ARRAY
          partition     int32
          current_leader_epoch int32  (v9+)
          fetch_offset  int64
          log_start_offset int64  (v5+)
          partition_max_bytes int32
      [forgotten_topics_data] ARRAY  (v7+)
        topic           STRING
        [partitions]    ARRAY of int32
      rack_id           STRING  (v11)
"""
from __future__ import annotations

import struct


def joined(*parts):
    """One Struct laying ``parts`` back to back: big-endian Structs of this module, or
    format strings (``"5s"``) — a whole frame's fixed bytes packed by one call."""
    return struct.Struct(">" + "".join(
        part if isinstance(part, str) else part.format.lstrip(">") for part in parts))


# -- frame --------------------------------------------------------------------------------

SIZE_OFFSET = 0
SIZE_PREFIX_LENGTH = 4

# Request header v1.
API_KEY_OFFSET = SIZE_OFFSET + SIZE_PREFIX_LENGTH
API_VERSION_OFFSET = API_KEY_OFFSET + 2
CORRELATION_ID_OFFSET = API_VERSION_OFFSET + 2
CLIENT_ID_LENGTH_OFFSET = CORRELATION_ID_OFFSET + 4
CLIENT_ID_OFFSET = CLIENT_ID_LENGTH_OFFSET + 2
#: A request frame with a null client id and an empty body is this long.
MIN_REQUEST_FRAME_LENGTH = CLIENT_ID_OFFSET

# Response header v0.
RESPONSE_CORRELATION_ID_OFFSET = SIZE_OFFSET + SIZE_PREFIX_LENGTH
RESPONSE_BODY_OFFSET = RESPONSE_CORRELATION_ID_OFFSET + 4

# Request header v2 / response header v1: the empty tagged-field section ringlog writes
# after the v1 / v0 header (an unsigned varint count of 0).
NO_TAGGED_FIELDS = 0
EMPTY_TAGGED_FIELDS_LENGTH = 1
MIN_RESPONSE_FRAME_LENGTH = RESPONSE_BODY_OFFSET

#: Bytes a frame needs around one batch: the Kafka request or response header, a client id
#: (an int16-length string, at most 32767 bytes), a topic name (at most 249 bytes) and the
#: fixed fields of Produce/Fetch — under 33 KiB, rounded up. Ring capacities are sized for
#: the largest batch plus this.
FRAME_HEADROOM_BYTES = 64 * 1024

#: size, api_key, api_version, correlation_id, client_id length.
REQUEST_PREFIX = struct.Struct(">ihhih")
assert REQUEST_PREFIX.size == CLIENT_ID_OFFSET
#: size, correlation_id.
RESPONSE_PREFIX = struct.Struct(">ii")
assert RESPONSE_PREFIX.size == RESPONSE_BODY_OFFSET

# -- body primitives ----------------------------------------------------------------------

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
STRING_LENGTH = INT16
ARRAY_LENGTH = INT32
NULL_LENGTH = -1

# -- ProduceRequest v3-8 ------------------------------------------------------------------

#: acks, timeout_ms, topic count (after transactional_id).
PRODUCE_FIXED = struct.Struct(">hii")
#: index, records length (before the records bytes).
PRODUCE_PARTITION = struct.Struct(">ii")

# -- FetchResponse v4-11 ------------------------------------------------------------------

#: v4-6: throttle_time_ms, topic count.
FETCH_TOP_V4 = struct.Struct(">ii")
#: v7-11: throttle_time_ms, error_code, session_id, topic count.
FETCH_TOP_V7 = struct.Struct(">ihii")
#: v4: partition_index, error_code, high_watermark, last_stable_offset, aborted count.
FETCH_PARTITION_V4 = struct.Struct(">ihqqi")
#: v5-11: ... last_stable_offset, log_start_offset, aborted count.
FETCH_PARTITION_V5 = struct.Struct(">ihqqqi")
#: producer_id, first_offset.
FETCH_ABORTED = struct.Struct(">qq")
#: v11: preferred_read_replica, records length.
FETCH_RECORDS_V11 = struct.Struct(">ii")
#: v4-10: records length.
FETCH_RECORDS = INT32

# -- FetchRequest v4-11 -------------------------------------------------------------------

#: v4-6: replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level.
FETCH_REQUEST_TOP_V4 = struct.Struct(">iiiib")
#: v7-11: ... isolation_level, session_id, session_epoch.
FETCH_REQUEST_TOP_V7 = struct.Struct(">iiiibii")
#: v4: partition, fetch_offset, partition_max_bytes.
FETCH_REQUEST_PARTITION_V4 = struct.Struct(">iqi")
#: v5-8: partition, fetch_offset, log_start_offset, partition_max_bytes.
FETCH_REQUEST_PARTITION_V5 = struct.Struct(">iqqi")
#: v9-11: partition, current_leader_epoch, fetch_offset, log_start_offset,
#: partition_max_bytes.
FETCH_REQUEST_PARTITION_V9 = struct.Struct(">iiqqi")
