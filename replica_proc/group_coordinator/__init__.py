"""The group coordinator (Kafka's classic consumer-group protocol) and what it stores in
``__consumer_offsets``.

- records: the key and value layouts of the offsets topic's records (OffsetCommit key v1 /
  value v3, GroupMetadata key v2 / value v3), as Kafka writes them;
- coordinator: the classic group coordinator (JoinGroup ... OffsetFetch, rebalances,
  sessions, offsets retention) as a state machine the broker loop drives; results: what it
  answers; timers: its deadlines; group: one group's state;
- runtime: the coordinator in the broker (``GroupRuntime``): loads and unloads the
  ``__consumer_offsets`` partitions this broker leads, stores what the coordinator decides,
  parks the requests that wait for a rebalance;
- handler: the group requests (FindCoordinator, JoinGroup ... DeleteGroups), decoded and
  answered; offset_handler: the offset requests (OffsetCommit, TxnOffsetCommit,
  OffsetFetch, OffsetDelete);
- which ``__consumer_offsets`` partition, and so which broker, coordinates a group is
  ``replica_proc.coordinator_common.partitioning`` (shared with the transaction coordinator).
"""
