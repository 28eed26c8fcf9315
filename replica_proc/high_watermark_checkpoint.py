"""The broker's ``replication-offset-checkpoint``: the high watermark of each partition.

Kafka's file in the log directory, one ``topic partition high_watermark`` line per
partition after the version (0) and count lines, plus ringlog's CRC line
(``segments.checkpoint``); written atomically. The ReplicaManager writes it every
``replica.high.watermark.checkpoint.interval.ms`` (the LogManager's timer) and at a clean
shutdown, and reads it once at start, so that a restarted replica's high watermark starts
where it was (clamped to its log's [log start, log end]) instead of at the log start,
which would hide committed records from consumers until the leader advanced it again.

Reading is strict: a file that does not parse raises KafkaStorageError naming the file,
the line and what was expected; the ReplicaManager then logs it and starts each high
watermark at its log start offset (Kafka's fallback), deleting nothing.

Owner: the ReplicaManager (the broker's loop thread). No locking.
"""
from __future__ import annotations

import os

from segments.checkpoint import CheckpointFile
from segments.errors import KafkaStorageError

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"


class HighWatermarkCheckpoint:
    """``<log_dir>/replication-offset-checkpoint`` as ``{(topic, partition): hw}``."""

    def __init__(self, log_dir):
        self.file = CheckpointFile(os.path.join(os.fspath(log_dir),
                                                REPLICATION_OFFSET_CHECKPOINT),
                                   version=0, fields=3, key_fields=2)

    @property
    def path(self):
        return self.file.path

    def write(self, high_watermarks):
        """Replace the file with ``high_watermarks`` (``{(topic, partition): offset}``)."""
        self.file.write([(topic, partition, offset) for (topic, partition), offset
                         in sorted(high_watermarks.items())])

    def read(self):
        """``{(topic, partition): offset}``; ``{}`` without a file; KafkaStorageError for
        a file that does not parse."""
        result = {}
        for number, (topic, partition, offset) in enumerate(self.file.read(), start=3):
            if not (_is_decimal(partition) and _is_decimal(offset)):
                raise KafkaStorageError(
                    f"checkpoint {self.path} line {number}: {topic} {partition} {offset}, "
                    f"expected a topic, a partition and an offset (non-negative decimal "
                    f"integers)")
            result[(topic, int(partition))] = int(offset)
        return result


def _is_decimal(text):
    """A plain non-negative decimal: no sign, no leading zero (what ``str(int)`` writes)."""
    return text.isascii() and text.isdigit() and str(int(text)) == text
