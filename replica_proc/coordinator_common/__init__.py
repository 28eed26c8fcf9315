"""What the group coordinator and the transaction coordinator share (Kafka's
``coordinator-common`` module).

- topic: a coordinator's internal topic (``__consumer_offsets``, ``__transaction_state``),
  created on first use, and FindCoordinator's answer from it;
- partitioning: which partition of that topic, and so which broker, holds a key (Kafka's
  ``partitionFor``, bit for bit);
- log: the partitions of that topic this broker leads, loaded as leadership comes and goes,
  and the coordinator's acks=all appends to them;
- record_fields: the field encodings of the coordinators' records (Kafka's generated-message
  primitives).

Owner: the broker's loop thread, through each coordinator's runtime.
"""
