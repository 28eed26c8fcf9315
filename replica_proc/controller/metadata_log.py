"""The metadata log: every change the controller makes, and replaying it into an image.

``D/__cluster_metadata-0`` is a ``segments.PartitionLog`` (Kafka's KRaft keeps
``__cluster_metadata-0`` the same way). Each change is one RecordBatch v2 batch, appended
and fsynced before the image it makes is published; a crash mid-append leaves a torn batch
that the log's recovery truncates, so a change is in the log whole or not at all. Each
record's key names the entity it is about; its value is compact JSON with a ``type``:

- ``controller`` (key ``controller``): ``broker_id``, ``epoch`` — a broker became the
  active controller; epochs grow by one.
- ``broker`` (key ``broker/<id>``): ``id``, ``pid``, ``alive`` — a broker was seen alive
  (holding its lock and ``serving``) or lost.
- ``topic`` (key ``topic/<name>``): ``name``, ``topic_id`` (Kafka-style base64 UUID),
  ``configs`` (topic-level overrides, as given), ``internal`` — a topic was created, with
  no partitions yet.
- ``partition`` (key ``partition/<topic>/<p>``): ``topic``, ``partition``, ``leader``
  (-1: offline), ``leader_epoch``, ``replicas``, ``isr``, ``partition_epoch`` — the whole
  state of a partition, new (``partition`` = the topic's partition count) or changed.
  Logs written before partition epochs existed lack ``partition_epoch``; it replays as 0.
  ``elr`` and ``damaged`` (``cluster.metadata.model.PartitionState``) are written only
  when not empty; missing, they replay as empty.
- ``remove_topic`` (key ``topic/<name>``): ``name`` — a topic and its partitions were
  deleted (its id joins the image's ``deleted_topic_ids``).
- ``config`` (key ``config/<resource_type>/<name>``): ``resource_type`` (``topic`` or
  ``broker``), ``name`` (a topic; a broker id, or ``""`` for the cluster-wide default),
  ``configs`` ``{key: value, or null to delete}`` — dynamic configs changed (AlterConfigs,
  IncrementalAlterConfigs), merged over what the resource had.
- ``producer_ids`` (key ``producer_ids``): ``broker_id``, ``broker_epoch`` (-1: ringlog
  has no broker epochs), ``next_producer_id`` — the controller gave broker ``broker_id``
  the block of producer ids below ``next_producer_id`` (Kafka's ``ProducerIdsRecord``,
  ``producer_ids``). Not part of the image: ``replay`` leaves the newest value in
  ``MetadataLog.next_producer_id`` for the controller.

One controller action is one batch: a CreateTopics call's ``topic`` records, each followed
by its ``partition`` records in order; a liveness change's ``broker`` records and the
``partition`` records of the leaders it moved. The image's ``version`` is the log end
offset after the last record it includes, so versions only grow, across controllers too:
every published image is backed by at least one record.

Each batch's partitionLeaderEpoch is the controller epoch of the controller that wrote it
(as KRaft stamps its batches with the leader's epoch), so the log says who wrote what:
``replay`` refuses a log whose batch epochs go down (a deposed controller's write landing
after its successor's, see ``controller_lock``). Logs written before the stamping carry -1
and 0 there, which never go down.

The log is kept whole (retention off); compaction and snapshots are for later.

Copies (``metadata_copies``): every append is written to a copy of the log's segments in
every broker's directory before it returns (so before the image it makes is published),
and opening the log first checks every copy and the log, and repairs the damaged or
missing ones from the longest whole copy: one damaged copy, the log's own included, no
longer stops the cluster.

``MetadataLog`` belongs to the active controller (the broker loop thread), which is its only
writer and reader; ``apply`` is a pure function.
"""
from __future__ import annotations

import bisect
import dataclasses
import json
import os

from cluster.metadata import data_dir as dd
from cluster.metadata.model import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from replica_proc.controller import producer_ids
from replica_proc.controller.metadata_copies import MetadataCopies
from segments.errors import CorruptRecordError, KafkaStorageError
from segments.log import PartitionLog
from segments.log_config import INT_MAX, LogConfig
from segments.record.batch_header import iter_batches
from segments.record.records import RecordBatch, RecordBatchBuilder
from segments.segment import LOG_SUFFIX, segment_paths

CONTROLLER = "controller"
BROKER = "broker"
TOPIC = "topic"
PARTITION = "partition"
REMOVE_TOPIC = "remove_topic"
CONFIG = "config"
PRODUCER_IDS = "producer_ids"
#: The ``resource_type`` of ``config`` records.
TOPIC_RESOURCE = "topic"
BROKER_RESOURCE = "broker"

#: The metadata log's settings: nothing is ever deleted, and one change is one batch
#: whatever its size.
LOG_CONFIG = LogConfig.from_dict({
    "retention.ms": -1, "retention.bytes": -1, "max.message.bytes": INT_MAX,
    "segment.bytes": 64 * 1024 * 1024, "cleanup.policy": "delete"})

_READ_BYTES = 1024 * 1024


# -- records ------------------------------------------------------------------------------------

def controller_record(broker_id, epoch):
    return {"type": CONTROLLER, "broker_id": broker_id, "epoch": epoch}


def broker_record(info):
    return {"type": BROKER, "id": info.id, "pid": info.pid, "alive": info.alive}


def topic_record(name, topic_id, configs, internal=False):
    return {"type": TOPIC, "name": name, "topic_id": topic_id, "configs": dict(configs),
            "internal": internal}


def partition_record(state):
    record = {"type": PARTITION, "topic": state.topic, "partition": state.partition,
              "leader": state.leader, "leader_epoch": state.leader_epoch,
              "replicas": list(state.replicas), "isr": list(state.isr),
              "partition_epoch": state.partition_epoch}
    if state.elr:
        record["elr"] = list(state.elr)
    if state.damaged:
        record["damaged"] = list(state.damaged)
    return record


def remove_topic_record(name):
    return {"type": REMOVE_TOPIC, "name": name}


def config_record(resource_type, name, changes):
    return {"type": CONFIG, "resource_type": resource_type, "name": name,
            "configs": dict(changes)}


def producer_ids_record(broker_id, broker_epoch, next_producer_id):
    return {"type": PRODUCER_IDS, "broker_id": broker_id, "broker_epoch": broker_epoch,
            "next_producer_id": next_producer_id}


def record_key(record):
    """The entity a record is about (its key in the log)."""
    kind = record["type"]
    if kind == CONTROLLER:
        return CONTROLLER
    if kind == BROKER:
        return f"broker/{record['id']}"
    if kind in (TOPIC, REMOVE_TOPIC):
        return f"topic/{record['name']}"
    if kind == PARTITION:
        return f"partition/{record['topic']}/{record['partition']}"
    if kind == CONFIG:
        return f"config/{record['resource_type']}/{record['name']}"
    if kind == PRODUCER_IDS:
        return PRODUCER_IDS
    raise ValueError(f"unknown metadata record type {kind!r} in {record!r}")


def encode_batch(records, timestamp):
    """One RecordBatch v2 holding ``records`` (dicts) at ``timestamp`` (ms)."""
    builder = RecordBatchBuilder(batch_size=INT_MAX)
    for record in records:
        builder.append(timestamp, record_key(record).encode(),
                       json.dumps(record, separators=(",", ":")).encode())
    return builder.build()


# -- applying -----------------------------------------------------------------------------------

def apply(image, records, version):
    """The image after ``records`` (dicts, in log order), with ``version``.

    Raises ValueError naming the record if it does not fit the image (a partition of an
    unknown topic, a partition number past the end, an unknown type): the log is corrupt
    or written by a newer ringlog.
    """
    brokers = dict(image.brokers)
    topics = dict(image.topics)
    broker_configs = dict(image.broker_configs)
    partitions = {}  # topic -> list of PartitionState, for the topics these records touch
    controller_id = image.controller_id
    deleted = set(image.deleted_topic_ids)
    for record in records:
        kind = record.get("type")
        if kind == PARTITION:
            name, number = record["topic"], record["partition"]
            states = partitions.get(name)
            if states is None:
                if name not in topics:
                    raise ValueError(f"metadata record {record!r}: no topic {name!r}")
                states = partitions[name] = list(topics[name].partitions)
            state = PartitionState(name, number, record["leader"], record["leader_epoch"],
                                   tuple(record["replicas"]), tuple(record["isr"]),
                                   record.get("partition_epoch", 0),
                                   tuple(record.get("elr", ())),
                                   tuple(record.get("damaged", ())))
            if number == len(states):
                states.append(state)
            elif 0 <= number < len(states):
                states[number] = state
            else:
                raise ValueError(f"metadata record {record!r}: topic {name!r} has "
                                 f"{len(states)} partitions, expected partition <= "
                                 f"{len(states)}")
        elif kind == BROKER:
            brokers[record["id"]] = BrokerInfo(record["id"], record["pid"], record["alive"])
        elif kind == TOPIC:
            name = record["name"]
            topics[name] = TopicInfo(name, record["topic_id"], (), dict(record["configs"]),
                                     record["internal"])
            partitions[name] = []
        elif kind == REMOVE_TOPIC:
            removed = topics.pop(record["name"], None)
            partitions.pop(record["name"], None)
            if removed is not None:
                deleted.add(removed.topic_id)
        elif kind == CONTROLLER:
            controller_id = record["broker_id"]
        elif kind == CONFIG and record["resource_type"] == TOPIC_RESOURCE:
            name = record["name"]
            if name not in topics:
                raise ValueError(f"metadata record {record!r}: no topic {name!r}")
            topics[name] = dataclasses.replace(
                topics[name], configs=_merged(topics[name].configs, record["configs"]))
        elif kind == CONFIG and record["resource_type"] == BROKER_RESOURCE:
            configs = _merged(broker_configs.get(record["name"], {}), record["configs"])
            broker_configs[record["name"]] = configs
            if not configs:
                del broker_configs[record["name"]]
        elif kind == PRODUCER_IDS:
            pass  # the controller's, not the image's (module doc)
        else:
            raise ValueError(f"unknown metadata record type {kind!r} in {record!r}")
    for name, states in partitions.items():
        topics[name] = dataclasses.replace(topics[name], partitions=tuple(states))
    return MetadataImage(version, image.cluster_id, controller_id, brokers, topics,
                         frozenset(deleted), broker_configs)


def _merged(configs, changes):
    """``configs`` with ``changes`` applied (a None value deletes its key)."""
    merged = {**configs, **changes}
    return {key: value for key, value in merged.items() if value is not None}


# -- the log ------------------------------------------------------------------------------------

class MetadataLog:
    """The metadata log of a data directory, opened by the controller that became active.

    Single owner: the active controller's thread. ``clock`` returns wall-clock
    milliseconds (record timestamps). Opening runs the log's crash recovery.
    """

    def __init__(self, data_dir, clock=None):
        self.path = os.path.join(os.fspath(data_dir), dd.METADATA_LOG_DIR)
        self._copies = MetadataCopies(data_dir, self.path)
        self._copies.reconcile()
        self._log = PartitionLog(self.path, LOG_CONFIG, clock=clock)
        self._copies.sync(self._segments())  # writes nothing unless the open changed it
        self._clock = self._log.clock
        #: The first producer id no block has taken, as of the last ``replay``.
        self.next_producer_id = 0

    @property
    def end_offset(self):
        return self._log.log_end_offset

    def replay(self, cluster_id):
        """(image, controller epoch) from every record in the log (epoch 0 if none); sets
        ``next_producer_id`` from the ``producer_ids`` records.

        Every batch's CRC is checked, and the offsets must run on without a gap (the log is
        never compacted; baseOffset is outside the CRC). A damaged batch, a gap, or a record
        that is not JSON raises KafkaStorageError naming the segment file and the offset
        (the open repaired what a copy could repair: this is damage in every copy, or
        written after the open), and cutting it at the damage (a partition log's repair)
        would make the controller forget topics and the brokers delete their logs.
        """
        records = []
        offset = self._log.log_start_offset
        end = self._log.log_end_offset
        batch_epoch = -1
        while offset < end:
            data = self._log.read(offset, _READ_BYTES)
            start = offset
            try:
                for header in iter_batches(data):
                    batch = RecordBatch(data, header.position)
                    batch.validate()
                    if header.partition_leader_epoch < batch_epoch:
                        raise ValueError(
                            f"controller epoch {header.partition_leader_epoch} after "
                            f"{batch_epoch}: a deposed controller wrote after its successor")
                    batch_epoch = header.partition_leader_epoch
                    for record in batch:
                        if record.offset != offset:  # never compacted: no gaps
                            raise ValueError(
                                f"record offset {record.offset}, expected {offset}")
                        records.append(json.loads(record.value))
                        offset += 1
                if offset == start:
                    raise ValueError(f"no whole batch before the log end offset {end}")
            except (CorruptRecordError, ValueError) as exc:
                bases = self._log.segment_base_offsets()
                base = bases[max(0, bisect.bisect_right(bases, offset) - 1)]
                raise KafkaStorageError(
                    f"metadata log {os.path.join(self.path, f'{base:020d}{LOG_SUFFIX}')}: "
                    f"the batch after offset {offset} is damaged ({exc}); not replaying "
                    f"a damaged metadata log") from None
        epoch = max((r["epoch"] for r in records if r.get("type") == CONTROLLER), default=0)
        next_producer_id = 0
        for record in records:
            if record.get("type") == PRODUCER_IDS:
                try:
                    next_producer_id = producer_ids.replayed(next_producer_id, record)
                except ValueError as exc:
                    raise KafkaStorageError(f"metadata log {self.path}: {exc}") from None
        self.next_producer_id = next_producer_id
        return apply(MetadataImage.empty(cluster_id), records, end), epoch

    def append(self, records, epoch):
        """Append ``records`` as one batch of controller ``epoch`` and fsync it; return the
        new end offset (the version of the image that includes them)."""
        self._log.append(encode_batch(records, self._clock()), leader_epoch=epoch)
        self._log.flush()
        self._copies.sync(self._segments())
        return self._log.log_end_offset

    def _segments(self):
        return [(segment.log_path, segment.size) for segment in self._log.segments]

    def start_segment(self):
        """Seal the active segment and write on in a new one (a takeover from a stopped
        controller, ``controller_lock``): a late write of the deposed controller lands
        where it believes the log ends, past the end of the sealed segment — never over
        this controller's records — where replay and ``metadata_copies.scan`` find it."""
        self._log.roll()
        self._copies.sync(self._segments())

    def written_elsewhere(self):
        """Whether the log's files are no longer as this writer left them: the active
        segment's size changed (another controller took over and appended its
        ``controller`` record), or a segment starts at this writer's log end offset (it
        took over from this one and ``start_segment``-ed). Two stats."""
        segment = self._log.active_segment
        try:
            if os.stat(segment.log_path).st_size != segment.size:
                return True
        except FileNotFoundError:
            return True
        end = self._log.log_end_offset
        return end != segment.base_offset and os.path.exists(
            segment_paths(self.path, end)[0])

    def close(self):
        """Flush and close (clean shutdown); safe to call twice."""
        self._log.close()

    def abandon(self):
        """Close without writing anything (no flush, no clean-shutdown marker): another
        controller writes the log now. Safe to call twice."""
        self._log.abandon()
