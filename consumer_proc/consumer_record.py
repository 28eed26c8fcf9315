"""``ConsumerRecord``: one record as ``KafkaConsumer.poll()`` returns it, kafka-python's type.

The fields, their order and their meaning are kafka-python's
(``kafka.consumer.fetcher.ConsumerRecord``, 3.x — the version ``cluster.config``'s consumer
keys follow), so code that unpacks or indexes records ports unchanged:

    topic, partition        where it came from
    leader_epoch            partitionLeaderEpoch of its batch (-1 unknown)
    offset, timestamp       its offset; its timestamp in ms (CreateTime, or the batch's
                            maxTimestamp when the topic uses LogAppendTime)
    timestamp_type          0 CreateTime, 1 LogAppendTime
    key, value              after the consumer's deserializers (bytes or None without)
    headers                 a list of (str, bytes|None); an empty tuple, shared, when the
                            record has none (``record_columns.NO_HEADERS``: it keeps
                            records out of the garbage collector's way)
    checksum                None: RecordBatch v2 has no per-record CRC
    serialized_key_size     bytes of the key as stored, -1 for a null key
    serialized_value_size   bytes of the value as stored, -1 for a null value
    serialized_header_size  bytes of the header keys (UTF-8) and values, -1 without headers

A namedtuple: immutable, any thread may share it. ``make_record`` builds one from a tuple
of the 13 fields without the namedtuple's Python-level ``__new__`` (the bulk converter in
``record_columns`` makes thousands per call).
"""
from __future__ import annotations

import functools
from collections import namedtuple

ConsumerRecord = namedtuple("ConsumerRecord", [
    "topic", "partition", "leader_epoch", "offset", "timestamp", "timestamp_type", "key",
    "value", "headers", "checksum", "serialized_key_size", "serialized_value_size",
    "serialized_header_size"])
ConsumerRecord.__doc__ = """One consumed record (fields as kafka-python's; module doc)."""

#: ``make_record(fields)``: a ConsumerRecord from a 13-tuple, at C speed.
make_record = functools.partial(tuple.__new__, ConsumerRecord)
