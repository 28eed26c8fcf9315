"""Binary layout of a control record's key and value (Kafka's ControlRecordType and
EndTransactionMarker), the one record of a control batch.

A control batch (attributes bit 5, ``batch_descriptor.CONTROL_MASK``) carries one record
whose key says what kind of control record it is and whose value carries that kind's
payload. This module is the one statement of the layout: ``control_record`` (markers
built and read), ``producer_state`` (a marker appended) and ``dump`` (kafka-dump-log)
use it. Every field is big-endian::

    key (ControlRecordType.CURRENT_CONTROL_RECORD_KEY_VERSION = 0)
     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-------------------------------+-------------------------------+
    |        version (int16) = 0    |  type (int16): 0 ABORT,       |  @0, @2
    |                               |  1 COMMIT                     |
    +-------------------------------+-------------------------------+

    value of an ABORT or COMMIT record (EndTransactionMarker, version 0)
    +-------------------------------+-------------------------------+
    |        version (int16) = 0    |  coordinatorEpoch (int32) ... |  @0, @2
    +-------------------------------+-------------------------------+
    |  ... coordinatorEpoch         |
    +-------------------------------+

A reader accepts a key or value of a newer version as long as it is at least this long
(Kafka reads the fields it knows and ignores the rest); a negative version is invalid.
"""
from __future__ import annotations

import struct

# -- key -----------------------------------------------------------------------------------
KEY_VERSION_OFFSET = 0
KEY_TYPE_OFFSET = KEY_VERSION_OFFSET + 2
KEY_SIZE = KEY_TYPE_OFFSET + 2

#: version, type.
KEY = struct.Struct(">hh")
assert KEY.size == KEY_SIZE

#: The key version written (Kafka's CURRENT_CONTROL_RECORD_KEY_VERSION).
CURRENT_KEY_VERSION = 0

#: Control record types (Kafka's ControlRecordType ids): the transaction markers ringlog
#: writes and reads...
ABORT = 0
COMMIT = 1
#: ...and the KRaft ones, which ringlog only names (kafka-dump-log prints them).
TYPE_NAMES = {ABORT: "ABORT", COMMIT: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
              4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}

# -- EndTransactionMarker value ------------------------------------------------------------
VALUE_VERSION_OFFSET = 0
VALUE_COORDINATOR_EPOCH_OFFSET = VALUE_VERSION_OFFSET + 2
VALUE_SIZE = VALUE_COORDINATOR_EPOCH_OFFSET + 4

#: version, coordinatorEpoch.
END_TXN_MARKER = struct.Struct(">hi")
assert END_TXN_MARKER.size == VALUE_SIZE

#: The value version written (Kafka's EndTransactionMarker CURRENT_END_TXN_MARKER_VALUE_VERSION).
CURRENT_VALUE_VERSION = 0
