"""The cluster metadata model: brokers, topics, partitions, leaders, replicas, epochs.

A ``MetadataImage`` is an immutable snapshot. The active controller makes a new image for
every change, appends the change to the metadata log and publishes the image on the
metadata page; brokers and clients read images and never mutate them, so an image can be
shared between threads freely.
"""
from __future__ import annotations

import dataclasses
import json
import re

from cluster.errors import InvalidTopicError

#: Kafka's topic name rule (org.apache.kafka.common.internals.Topic).
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
#: Leader id of a partition that has no live leader.
NO_LEADER = -1
#: The topic of the consumer groups' state and committed offsets (Kafka's
#: GROUP_METADATA_TOPIC_NAME); the group coordinators create it.
GROUP_METADATA_TOPIC = "__consumer_offsets"
#: The topic of the transactional ids' state (Kafka's TRANSACTION_STATE_TOPIC_NAME); the
#: transaction coordinators create it.
TRANSACTION_STATE_TOPIC = "__transaction_state"
#: Topics created as internal (Kafka's Topic.INTERNAL_TOPICS).
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC})


def validate_topic_name(name):
    """Return ``name`` if Kafka accepts it as a topic name; else raise InvalidTopicError."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError(f"topic name must be a non-empty string, found {name!r}")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name {name[:40]!r}... is {len(name)} characters, more than the "
            f"{MAX_TOPIC_NAME_LENGTH} allowed")
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        bad = sorted(set(re.sub(r"[a-zA-Z0-9._-]", "", name)))
        raise InvalidTopicError(
            f"topic name {name!r} contains {''.join(bad)!r}: only ASCII letters, digits, "
            f"'.', '_' and '-' are allowed")
    return name


@dataclasses.dataclass(frozen=True)
class BrokerInfo:
    """A broker the controller knows: its id, the pid it last ran as, whether it is alive."""

    id: int
    pid: int = 0
    alive: bool = False


@dataclasses.dataclass(frozen=True)
class PartitionState:
    """Leadership of one partition. ``leader`` is NO_LEADER while the partition is offline.

    ``partition_epoch`` is Kafka's partitionEpoch: 0 for a new partition, one more on every
    change of its leader, ISR or replicas; an AlterPartition naming an older one is stale
    (INVALID_UPDATE_VERSION), which fences ISR updates from a leader that missed a change.

    ``elr``: Kafka's eligible leader replicas (KIP-966): replicas that left the ISR while
    it was smaller than min.insync.replicas (the high watermark cannot move then, so they
    hold every acknowledged record) and may still lead. ``damaged``: replicas whose broker
    reported that its log of this partition lost records in recovery or is offline
    (damaged bytes), until they have fetched back what they lost; they lead only when no
    intact replica of the ISR or ELR is alive (``replica_proc.controller.placement``).
    """

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple
    isr: tuple
    partition_epoch: int = 0
    elr: tuple = ()
    damaged: tuple = ()

    @property
    def online(self):
        return self.leader != NO_LEADER


@dataclasses.dataclass(frozen=True)
class TopicInfo:
    """A topic: its id (a UUID string, as Kafka's topic ids), partitions in order, configs."""

    name: str
    topic_id: str
    partitions: tuple
    configs: dict = dataclasses.field(default_factory=dict)
    internal: bool = False

    def __hash__(self):
        return hash((self.name, self.topic_id))


@dataclasses.dataclass(frozen=True)
class MetadataImage:
    """One published version of the whole cluster's metadata.

    ``version`` grows by one with every change the controller publishes; readers compare it
    to know whether anything changed. ``deleted_topic_ids``: the ids of every topic ever
    deleted, so a broker finding one in a partition directory's ``partition.metadata``
    knows that directory holds a deleted topic's log (the topic was deleted, and perhaps
    created again under its name, while that broker was down), not a damaged file.
    ``broker_configs`` are the dynamic broker configs: ``{"": the cluster-wide default,
    "<broker id>": that broker's}``, each ``{broker key: value}``
    (``cluster.config.dynamic``).
    """

    version: int
    cluster_id: str
    controller_id: int
    brokers: dict
    topics: dict
    deleted_topic_ids: frozenset = frozenset()
    broker_configs: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def empty(cls, cluster_id):
        return cls(version=0, cluster_id=cluster_id, controller_id=-1, brokers={}, topics={})

    def partition(self, topic, partition):
        """The PartitionState of ``topic``-``partition``, or None if there is no such one."""
        info = self.topics.get(topic)
        if info is None or not 0 <= partition < len(info.partitions):
            return None
        return info.partitions[partition]

    def partitions_led_by(self, broker_id):
        """Every PartitionState whose leader is ``broker_id``."""
        return [p for t in self.topics.values() for p in t.partitions if p.leader == broker_id]

    def partitions_on(self, broker_id):
        """Every PartitionState with a replica on ``broker_id``."""
        return [p for t in self.topics.values() for p in t.partitions
                if broker_id in p.replicas]

    def live_brokers(self):
        """Ids of the brokers the controller considers alive, in order."""
        return sorted(b.id for b in self.brokers.values() if b.alive)

    def replace(self, **changes):
        """A copy with ``changes`` applied and the version moved on by one."""
        changes.setdefault("version", self.version + 1)
        return dataclasses.replace(self, **changes)

    # -- serialisation (the metadata page carries compact JSON) ---------------------------
    # A partition is [leader, leader epoch, replicas, isr, partition epoch], followed by
    # [elr, damaged] only when either is not empty.

    def to_json(self):
        return json.dumps({
            "version": self.version,
            "cluster_id": self.cluster_id,
            "controller_id": self.controller_id,
            "brokers": [[b.id, b.pid, b.alive] for b in self.brokers.values()],
            "topics": [
                [t.name, t.topic_id, t.configs, t.internal,
                 [[p.leader, p.leader_epoch, list(p.replicas), list(p.isr),
                   p.partition_epoch] + ([list(p.elr), list(p.damaged)]
                                         if p.elr or p.damaged else [])
                  for p in t.partitions]]
                for t in self.topics.values()],
            "deleted_topic_ids": sorted(self.deleted_topic_ids),
            "broker_configs": self.broker_configs,
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text):
        raw = json.loads(text)
        brokers = {i: BrokerInfo(i, pid, alive) for i, pid, alive in raw["brokers"]}
        topics = {}
        for name, topic_id, configs, internal, partitions in raw["topics"]:
            topics[name] = TopicInfo(
                name, topic_id,
                tuple(PartitionState(name, n, leader, epoch, tuple(replicas), tuple(isr),
                                     partition_epoch, *map(tuple, rest))
                      for n, (leader, epoch, replicas, isr, partition_epoch, *rest)
                      in enumerate(partitions)),
                configs, internal)
        return cls(raw["version"], raw["cluster_id"], raw["controller_id"], brokers, topics,
                   frozenset(raw["deleted_topic_ids"]), raw.get("broker_configs", {}))
