"""The consumer client: ``KafkaConsumer`` (consumer) and what it reads with.

- subscription_state: the subscription or assignment, and each partition's position;
- fetcher: pipelined Fetch requests to partition leaders; offset_lookup: ListOffsets for
  position resets and offsets by time;
- partition_records, columns_parser, record_columns, consumer_record: fetched batches
  parsed lazily, record by record or as columns;
- fetch_metrics: kafka-python's consumer metric names.

Owned by the user's process, one thread at a time (as kafka-python's). It talks to brokers
only through ``cluster.client``; group membership and assignors will live here too.
"""
