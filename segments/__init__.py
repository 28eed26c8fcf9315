"""The storage engine: RecordBatch v2 codec, segment files, the partition log.

- batch_descriptor, batch_header, records, bulk, varint, compression: the byte format
  (pure codecs: bytes in, bytes or views out);
- segment, index, index_descriptor: one segment's ``.log``, ``.index`` and ``.timeindex``;
- log, log_config, cleaner, checkpoint: a partition's log (append, read, roll, truncate,
  retention, recovery, compaction) and its checkpoint files;
- errors: the roots of ringlog's error tree and the storage errors;
- dump: ``ringlog dump-log``.

Imports nothing of ours. A ``Log`` has a single writer (the broker's request loop).
"""
