"""The transaction coordinator (Kafka's, transactions V1) and what it stores in
``__transaction_state``.

- records: the key and value layouts of the transaction log (TransactionLogKey v0,
  TransactionLogValue v0 written, v0-1 read), as Kafka writes them;
- states: a transactional id's states (Empty ... PrepareEpochFence), their ids and names;
- metadata: one transactional id's state and its prepare/complete transitions;
- coordinator: InitProducerId (with a transactional id), AddPartitionsToTxn,
  AddOffsetsToTxn, EndTxn, timeouts, expiry, loading and the markers' completion, as a
  state machine without I/O whose operations return results (``results``: answers,
  records to write, markers to send);
- marker_requests: the WriteTxnMarkers requests that carry the markers to the partition
  leaders, and the codes of their responses; marker_sender: sends them (Kafka's
  ``TransactionMarkerChannelManager``);
- runtime: the coordinator in the broker (``TransactionRuntime``): loads and unloads the
  ``__transaction_state`` partitions this broker leads, stores transitions, sends markers;
- handler: InitProducerId (with a transactional id), AddPartitionsToTxn, AddOffsetsToTxn,
  EndTxn, decoded and answered; admin_handler: ListTransactions, DescribeTransactions.

Which ``__transaction_state`` partition, and so which broker, coordinates a transactional
id is ``replica_proc.coordinator_common.partitioning`` (shared with the group coordinator); the
topic itself is ``replica_proc.coordinator_common.topic.CoordinatorTopic.transaction_log``.
"""
