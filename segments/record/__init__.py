"""The RecordBatch v2 codec (Kafka's ``common/record``, aiokafka's ``record/``): bytes in,
bytes or views out, no files.

- batch_descriptor: the byte layout of a batch header; batch_header: a view over one;
- records: the builder a producer appends to, and the reader a consumer iterates;
- bulk: many records encoded at once, vectorised with numpy;
- varint: the zigzag varints inside records;
- compression: Kafka's codecs (gzip, snappy, lz4, zstd), byte-compatible with Kafka;
- control_record_descriptor, control_record: the COMMIT and ABORT markers of transactions.

Imports nothing of ours but ``segments.errors`` (an import-linter contract): the clients,
the broker and the storage engine all stand on it.
"""
