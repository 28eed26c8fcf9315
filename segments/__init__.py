"""The storage engine: the RecordBatch v2 codec, segment files, the partition log.

- record/: the RecordBatch v2 codec (pure: bytes in, bytes or views out; its own map);
- segment, index, index_descriptor, txn_index, txn_index_descriptor: one segment's
  ``.log``, ``.index``, ``.timeindex`` and ``.txnindex``; file_cache: the bound on open
  segment files;
- log, log_config: a partition's log (append, read, roll, truncate, retention, recovery)
  and its topic-level configuration; txn_index_rebuild: a log's transaction indexes
  rebuilt from its control batches;
- leader_epoch: the leader-epoch cache; producer_state, producer_snapshot_descriptor: the
  broker's half of idempotence and transactions, and its snapshot files;
- cleaner, cleaned_txns: log compaction; checkpoint: the checkpoint files;
- errors: the roots of ringlog's error tree and the storage errors; clock: the wall clock
  in milliseconds, the default of the log, the coordinators and the controller;
- dump: ``ringlog dump-log``.

Imports nothing of ours outside ``segments``. A partition's ``Log`` (``log.PartitionLog``)
has a single writer (the broker's request loop).
"""
