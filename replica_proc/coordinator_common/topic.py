"""A coordinator's internal topic, created on first use, and FindCoordinator's answer from
it: ``__consumer_offsets`` for the group coordinator, ``__transaction_state`` for the
transaction coordinator.

``CoordinatorTopic.info()`` is the topic's TopicInfo, or None after asking the controller
to create it (``AdminHandler.create_topic``; the first request for a group or a
transactional id does) with ``partitions`` partitions, replication factor
``min(factor, live brokers)`` (so a cluster of fewer brokers than the factor still gets its
coordinators; Kafka refuses with COORDINATOR_NOT_AVAILABLE instead), and ``configs``; a
``min_isr`` (``transaction.state.log.min.isr``) becomes the topic's
``min.insync.replicas``, capped at that factor likewise. ``coordinator_node(key)`` is the
leader of the key's partition (``coordinator_common.partitioning.partition_for``), or
COORDINATOR_NOT_AVAILABLE until the topic exists and that partition has a live leader.

The offsets topic: ``offsets.topic.num.partitions``, ``offsets.topic.replication.factor``,
compacted, ``segment.bytes`` = ``offsets.topic.segment.bytes``. The transaction log
(Kafka's ``TransactionStateManager.transactionTopicConfigs``):
``transaction.state.log.num.partitions``, ``transaction.state.log.replication.factor``,
compacted, ``segment.bytes`` = ``transaction.state.log.segment.bytes``,
``min.insync.replicas`` = ``transaction.state.log.min.isr``, unclean leader election off
(Kafka also forces ``compression.type=uncompressed``, which ringlog's topics do not have:
the coordinators write uncompressed batches).

Owner: the broker's loop thread.
"""
from __future__ import annotations

from cluster.errors import CoordinatorNotAvailableError
from cluster.metadata.model import GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC
from replica_proc.coordinator_common.partitioning import partition_for


class CoordinatorTopic:
    """One coordinator's internal topic (module doc). ``metadata``: the BrokerMetadata;
    ``create_topic(name, partitions, factor, configs)``: ``AdminHandler.create_topic``."""

    def __init__(self, name, metadata, create_topic, partitions, factor, configs,
                 min_isr=None):
        self.name = name
        self._metadata = metadata
        self._create_topic = create_topic
        self._partitions = partitions
        self._factor = factor
        self._configs = dict(configs)
        self._min_isr = min_isr

    @classmethod
    def offsets(cls, config, metadata, create_topic):
        """``__consumer_offsets``, as the group coordinator creates it."""
        return cls(GROUP_METADATA_TOPIC, metadata, create_topic,
                   config["offsets.topic.num.partitions"],
                   config["offsets.topic.replication.factor"],
                   {"cleanup.policy": "compact",
                    "segment.bytes": str(config["offsets.topic.segment.bytes"])})

    @classmethod
    def transaction_log(cls, config, metadata, create_topic):
        """``__transaction_state``, as the transaction coordinator creates it."""
        return cls(TRANSACTION_STATE_TOPIC, metadata, create_topic,
                   config["transaction.state.log.num.partitions"],
                   config["transaction.state.log.replication.factor"],
                   {"cleanup.policy": "compact",
                    "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
                    "unclean.leader.election.enable": "false"},
                   min_isr=config["transaction.state.log.min.isr"])

    def info(self):
        """The topic's TopicInfo, or None after asking the controller to create it."""
        image = self._metadata.image
        info = image.topics.get(self.name)
        if info is not None:
            return info
        live = image.live_brokers()
        if not live:
            return None
        factor = min(self._factor, len(live))
        configs = dict(self._configs)
        if self._min_isr is not None:
            configs["min.insync.replicas"] = str(min(self._min_isr, factor))
        self._create_topic(self.name, self._partitions, factor, configs)
        return None

    def coordinator_node(self, key):
        """``(error code, message, node id)`` of ``key``'s coordinator: the leader of its
        partition (the topic is created on first use)."""
        info = self.info()
        if info is None:
            return (CoordinatorNotAvailableError.errno,
                    f"{self.name} does not exist yet; it is being created", -1)
        state = info.partitions[partition_for(key, len(info.partitions))]
        broker = self._metadata.image.brokers.get(state.leader)
        if not state.online or broker is None or not broker.alive:
            return (CoordinatorNotAvailableError.errno,
                    f"{self.name}-{state.partition} has no live leader", -1)
        return 0, None, state.leader
