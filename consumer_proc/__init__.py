"""The consumer client: ``KafkaConsumer`` (consumer) and what it reads with.

- subscription_state: the subscription or assignment, and each partition's position;
- fetcher: pipelined Fetch requests to partition leaders; offset_lookup: ListOffsets for
  position resets and offsets by time;
- partition_records, columns_parser, record_columns, consumer_record: fetched batches
  parsed lazily, record by record or as columns;
- fetch_metrics, coordinator_metrics: kafka-python's consumer metric names (fetch manager,
  coordinator);
- coordinator: group membership (join, sync, heartbeats, commits); assignors: how the
  group leader shares partitions; rebalance_listener: ConsumerRebalanceListener.

Owned by the user's process, one thread at a time (as kafka-python's; the coordinator's
heartbeat thread keeps to its own connection). It talks to brokers only through
``cluster.client``.
"""
from __future__ import annotations

from consumer_proc.rebalance_listener import ConsumerRebalanceListener

__all__ = ["ConsumerRebalanceListener"]
