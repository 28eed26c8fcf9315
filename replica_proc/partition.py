"""One replica of a partition hosted by this broker: its log, its role, its high watermark.

A ``Partition`` is what the request handlers see of a topic-partition: appends as leader
(stamping the leader epoch into each batch), reads bounded by the high watermark, offsets
for ListOffsets. Its state comes from the controller's ``PartitionState`` (``update``):
leader or follower, leader epoch, replicas, ISR.

High watermark: a field of its own, not the log end offset. The leader advances it to the
smallest log end offset of the ISR; while the ISR is this broker alone (replication factor
1) that is its own log end offset, so an append moves it at once. Followers' positions and
the ISR changes that let it lag come with replication. Consumers read below the high
watermark only; followers (``replica_id`` >= 0 in a Fetch) read up to the log end.

The partition directory carries ``partition.metadata`` (Kafka's PartitionMetadataFile:
exactly the two lines ``version: 0`` and ``topic_id: <id>``) so that a topic deleted and
created again under the same name while this broker was down is recognised as a different
topic. ``read_topic_id`` parses it strictly: anything else raises KafkaStorageError naming
the file and what was wrong, and the ReplicaManager takes that partition offline.

Owner: the broker's loop thread (through the ReplicaManager); not thread-safe, like the
PartitionLog it owns.
"""
from __future__ import annotations

import os
import re

from cluster.errors import (
    FencedLeaderEpochError,
    KafkaStorageError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    UnknownLeaderEpochError,
)
from segments.checkpoint import write_atomically
from segments.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, PartitionLog

PARTITION_METADATA = "partition.metadata"
METADATA_VERSION = 0
_METADATA_FORMAT = re.compile(rb"version: %d\ntopic_id: ([A-Za-z0-9_-]{1,64})\n"
                              % METADATA_VERSION)
#: Longer than any well-formed partition.metadata (what an error message quotes of it).
_MAX_METADATA_BYTES = 96

#: ListOffsets' answer when no offset matches (Kafka's UNKNOWN_OFFSET / NO_TIMESTAMP).
UNKNOWN_OFFSET = -1
NO_TIMESTAMP = -1


def directory_name(topic, partition):
    """``<topic>-<partition>``, Kafka's partition directory name."""
    return f"{topic}-{partition}"


def parse_directory_name(name):
    """``(topic, partition)`` from a partition directory name, or None if it is not one."""
    topic, dash, number = name.rpartition("-")
    if not dash or not topic or not number.isdigit() or str(int(number)) != number:
        return None
    return topic, int(number)


def read_topic_id(path):
    """The topic id recorded in ``path``/partition.metadata, or None if there is none.

    Strict (Kafka's PartitionMetadataFile has no checksum, so the parser is the check):
    ASCII, exactly ``version: 0`` and ``topic_id: <id>`` with an id of 1-64 characters of
    ``[A-Za-z0-9_-]``, each line ending in a newline, nothing else. Anything else raises
    KafkaStorageError naming the file and what was found.
    """
    target = os.path.join(path, PARTITION_METADATA)
    try:
        with open(target, "rb") as f:
            data = f.read(_MAX_METADATA_BYTES + 1)
    except FileNotFoundError:
        return None
    match = _METADATA_FORMAT.fullmatch(data)
    if match is None:
        raise KafkaStorageError(
            f"{target}: malformed partition metadata {data[:_MAX_METADATA_BYTES]!r}, "
            f"expected b'version: {METADATA_VERSION}\\ntopic_id: <id>\\n'")
    return match.group(1).decode("ascii")


def write_topic_id(path, topic_id, durable=True):
    """Record ``topic_id`` in ``path``/partition.metadata (atomically; durably unless
    ``durable`` is False: see ``segments.checkpoint.write_atomically``)."""
    write_atomically(os.path.join(path, PARTITION_METADATA),
                     f"version: {METADATA_VERSION}\ntopic_id: {topic_id}\n".encode("ascii"),
                     durable)


class Partition:
    """This broker's replica of ``topic``-``index`` (see the module doc).

    Created by the ReplicaManager with an open ``log``; ``update`` applies each new
    PartitionState; ``close``/``delete`` end it.
    """

    __slots__ = ("topic", "index", "topic_id", "broker_id", "log", "leader_id",
                 "leader_epoch", "replicas", "isr", "high_watermark", "min_insync_replicas")

    def __init__(self, topic, index, topic_id, broker_id, log: PartitionLog,
                 min_insync_replicas=1):
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.broker_id = broker_id
        self.log = log
        self.leader_id = -1
        self.leader_epoch = -1
        self.replicas = ()
        self.isr = ()
        self.high_watermark = log.log_start_offset
        self.min_insync_replicas = min_insync_replicas

    def __repr__(self):
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return (f"Partition({self.topic}-{self.index}, {role}, epoch={self.leader_epoch}, "
                f"hw={self.high_watermark}, leo={self.log.log_end_offset})")

    @property
    def is_leader(self):
        return self.leader_id == self.broker_id

    # -- state from the controller --------------------------------------------------------

    def update(self, state):
        """Apply the controller's PartitionState; True if leadership or ISR changed."""
        changed = (state.leader != self.leader_id or state.leader_epoch != self.leader_epoch
                   or tuple(state.isr) != self.isr or tuple(state.replicas) != self.replicas)
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.replicas = tuple(state.replicas)
        self.isr = tuple(state.isr)
        self._advance_high_watermark()
        return changed

    def _advance_high_watermark(self):
        """Move the high watermark to the smallest log end offset of the ISR, as far as
        this broker knows it (its own, while the ISR is this broker alone)."""
        if self.is_leader and self.isr == (self.broker_id,):
            self.high_watermark = self.log.log_end_offset

    def check_leader(self, current_leader_epoch=-1):
        """Raise unless this replica leads; with ``current_leader_epoch`` >= 0 (a client's
        view, KIP-320) also unless it is this leader's epoch."""
        if not self.is_leader:
            raise NotLeaderForPartitionError(
                f"broker {self.broker_id} is not the leader of {self.topic}-{self.index} "
                f"(leader: {self.leader_id}, epoch {self.leader_epoch})")
        self.check_epoch(current_leader_epoch)

    def check_epoch(self, current_leader_epoch):
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.topic}-{self.index}: request's leader epoch {current_leader_epoch} "
                f"is older than the current {self.leader_epoch}")
        raise UnknownLeaderEpochError(
            f"{self.topic}-{self.index}: request's leader epoch {current_leader_epoch} is "
            f"newer than this broker's {self.leader_epoch}")

    # -- the hot paths --------------------------------------------------------------------

    def append_as_leader(self, records, required_acks):
        """Validate, stamp (offsets, leader epoch) and append ``records`` (whole batches);
        return the first offset. acks=all needs min.insync.replicas in the ISR first."""
        if not self.is_leader:
            self.check_leader()
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.index}: the ISR {list(self.isr)} has {len(self.isr)} "
                f"replica(s), fewer than min.insync.replicas={self.min_insync_replicas} "
                f"that acks=all requires")
        first, _ = self.log.append(records, leader_epoch=self.leader_epoch)
        self._advance_high_watermark()
        return first

    def read_slice(self, offset, max_bytes, min_one_batch, follower):
        """The LogSlice of whole batches from the one holding ``offset``: up to the high
        watermark for consumers, the log end for a follower (OffsetOutOfRangeError outside
        the log)."""
        return self.log.read_slice(offset, max_bytes,
                                   None if follower else self.high_watermark, min_one_batch)

    # -- ListOffsets ----------------------------------------------------------------------

    def offset_for(self, timestamp):
        """ListOffsets: ``(timestamp, offset)`` for -2 (earliest), -1 (latest: the high
        watermark) or a timestamp (first record at or after it, below the high
        watermark); ``(-1, -1)`` when no record qualifies."""
        if timestamp == LATEST_TIMESTAMP:
            return NO_TIMESTAMP, self.high_watermark
        if timestamp == EARLIEST_TIMESTAMP:
            return NO_TIMESTAMP, self.log.log_start_offset
        found = self.log.lookup_timestamp(timestamp)
        if found is None or found.offset >= self.high_watermark:
            return NO_TIMESTAMP, UNKNOWN_OFFSET
        return found.timestamp, found.offset

    # -- ending ---------------------------------------------------------------------------

    def close(self):
        """Flush and close the log (leaving its clean-shutdown marker)."""
        self.log.close()

    def delete(self):
        """Close the log and remove the partition directory."""
        self.log.delete()
