"""ringlog's public API, named as kafka-python names it, so code ports to a real Kafka by
changing the import::

    from cluster import KafkaProducer, KafkaConsumer, KafkaAdminClient, NewTopic

``bootstrap_servers`` is the cluster's data directory. ``Cluster`` starts and stops the
broker processes of one (``ringlog cluster start`` does the same from a shell).

Names are imported on first use (PEP 562), so a broker process, which imports
``cluster.protocol.frames`` and friends, does not load the clients, and ``consumer_proc`` (which
builds on ``cluster.client.kafka_client``) can import this package without a cycle.
"""
from __future__ import annotations

import importlib

#: public name -> module that defines it
_EXPORTS = {
    "AlterConfigOp": "cluster.config.dynamic",
    "Cluster": "cluster.supervisor.cluster",
    "ConfigResource": "cluster.admin.kafka_admin_client",
    "ConfigResourceType": "cluster.config.dynamic",
    "ConsumerGroupMetadata": "cluster.structs",
    "ConsumerRebalanceListener": "consumer_proc.rebalance_listener",
    "ConsumerRecord": "consumer_proc.consumer_record",
    "ElectionType": "cluster.protocol.frames",
    "KafkaAdminClient": "cluster.admin.kafka_admin_client",
    "KafkaConsumer": "consumer_proc.consumer",
    "KafkaProducer": "cluster.producer.kafka_producer",
    "NewPartitions": "cluster.admin.kafka_admin_client",
    "NewTopic": "cluster.admin.kafka_admin_client",
    "OffsetAndMetadata": "cluster.structs",
    "OffsetAndTimestamp": "cluster.structs",
    "ProducerState": "cluster.structs",
    "RecordMetadata": "cluster.producer.batch",
    "TopicPartition": "cluster.structs",
    "TransactionDescription": "cluster.structs",
    "TransactionListing": "cluster.structs",
    "errors": "cluster.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'cluster' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if name == "errors" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
