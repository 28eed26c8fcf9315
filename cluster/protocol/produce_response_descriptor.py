"""Binary layout of a ProduceResponse v3-8 body (after response header v0).

Big-endian, Kafka's primitives as in ``cluster.protocol.frame_descriptor`` (STRING = int16 length
+ UTF-8, NULLABLE_STRING with length -1 for null, ARRAY = int32 count + elements);
``[...]`` marks a repeated group::

    ProduceResponse v3-8
      [responses]                 ARRAY
        name                      STRING
        [partition_responses]     ARRAY
          index                   int32    \\
          error_code              int16     | PARTITION_V3 (v3-4)
          base_offset             int64     |
          log_append_time_ms      int64    /  (-1 unless the topic uses LogAppendTime)
          log_start_offset        int64       v5+ (PARTITION_V5 adds it)
          [record_errors]         ARRAY       v8+ (always empty here)
          error_message           NULLABLE_STRING  v8+
      throttle_time_ms            int32       (at the end, unlike most responses)
"""
from __future__ import annotations

import struct

#: index, error_code, base_offset, log_append_time_ms.
PARTITION_V3 = struct.Struct(">ihqq")
#: ... and log_start_offset.
PARTITION_V5 = struct.Struct(">ihqqq")
#: record_errors count, error_message length (v8+).
ERRORS_V8 = struct.Struct(">ih")
ARRAY_LENGTH = struct.Struct(">i")
STRING_LENGTH = struct.Struct(">h")
THROTTLE_TIME = struct.Struct(">i")
NULL_LENGTH = -1
