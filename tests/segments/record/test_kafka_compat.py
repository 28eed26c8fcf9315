"""Byte compatibility with kafka-python's RecordBatch v2 codec, for every compression codec.

kafka-python (a test dependency only) is the peer: its ``DefaultRecordBatchBuilder`` and
``DefaultRecordBatch`` read what we write, we read what they write, both accept and refuse
the same appends, and for the same inputs the bytes are the same. Two kafka-python habits
are accounted for: it writes partitionLeaderEpoch 0 (we default to Kafka's -1, so these
tests pass 0), and its gzip header carries the current time (we write 0, so these tests
freeze gzip's clock at 0 while kafka-python builds).
"""
from __future__ import annotations

import gzip
from contextlib import contextmanager
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from segments.record.batch_header import BatchHeader
from segments.record.bulk import build_batches
from segments.record.compression import CODEC_NAMES
from segments.record.records import RecordBatch, RecordBatchBuilder, iter_records
from tests.support.properties import examples

CODECS = sorted(CODEC_NAMES)
BASE_TS = 1_700_000_000_000
SETTINGS = settings(max_examples=examples(50), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

record_st = st.tuples(
    st.integers(-3000, 6000),
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=120) | st.sampled_from([b"abc" * 50, b"\x00" * 300]),
    st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2))


@contextmanager
def gzip_clock_at_zero():
    with mock.patch.object(gzip, "time", SimpleNamespace(time=lambda: 0.0)):
        yield


def kafka_python_batch(records, codec, batch_size=1 << 30, producer=(-1, -1, -1),
                       transactional=False):
    """kafka-python's batch for the records it accepts, and its append answers."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional,
        producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2],
        batch_size=batch_size)
    answers = []
    for offset, (timestamp, key, value, headers) in enumerate(records):
        if answers and answers[-1] is None:
            break
        metadata = builder.append(offset, timestamp, key, value, headers)
        answers.append(None if metadata is None else offset)
    with gzip_clock_at_zero():
        return bytes(builder.build()), answers


def our_batch(records, codec, batch_size=1 << 30, producer=(-1, -1, -1), transactional=False):
    builder = RecordBatchBuilder(
        codec, batch_size, producer_id=producer[0], producer_epoch=producer[1],
        base_sequence=producer[2], is_transactional=transactional, partition_leader_epoch=0)
    answers = []
    for timestamp, key, value, headers in records:
        if answers and answers[-1] is None:
            break
        answers.append(builder.append(timestamp, key, value, headers))
    return bytes(builder.build()), answers


def decoded_by_kafka_python(batch):
    reader = DefaultRecordBatch(batch)
    assert reader.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in reader]


def decoded_by_us(batch):
    reader = RecordBatch(batch)
    reader.validate()
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in reader]


def with_timestamps(records):
    return [(BASE_TS + delta, key, value, headers) for delta, key, value, headers in records]


@pytest.mark.parametrize("codec", CODECS)
@SETTINGS
@given(records=st.lists(record_st, min_size=1, max_size=30),
       batch_size=st.integers(100, 3000) | st.just(1 << 30))
def test_same_answers_same_records_same_bytes(codec, records, batch_size):
    records = with_timestamps(records)
    ours, our_answers = our_batch(records, codec, batch_size)
    theirs, their_answers = kafka_python_batch(records, codec, batch_size)
    assert our_answers == their_answers                  # same "None when full"
    assert decoded_by_kafka_python(ours) == decoded_by_us(theirs) == decoded_by_us(ours)
    if BatchHeader(theirs).compression_type == codec:
        assert ours == theirs
    else:
        # kafka-python sends records uncompressed when compressing does not shrink them;
        # Kafka's Java client (and we) keep the codec asked for. The records still match.
        assert BatchHeader(ours).compression_type == codec
        assert our_batch(records, 0, batch_size)[0] == theirs


@pytest.mark.parametrize("codec", CODECS)
def test_compressible_batches_are_byte_identical(codec):
    records = [(BASE_TS + i % 7, b"user-%d" % (i % 5), b"event payload %d " % i * 4,
                [("trace", b"abc")] if i % 3 else [])
               for i in range(300)]
    ours, _ = our_batch(records, codec, 16384)
    theirs, _ = kafka_python_batch(records, codec, 16384)
    assert BatchHeader(theirs).compression_type == codec   # kafka-python did compress
    assert ours == theirs


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_and_transactional_fields_match(codec):
    records = [(BASE_TS, b"k", b"value " * 20, [])] * 5
    producer = (4242, 7, 1_000_000)
    ours, _ = our_batch(records, codec, producer=producer, transactional=True)
    theirs, _ = kafka_python_batch(records, codec, producer=producer, transactional=True)
    assert ours == theirs
    reader = DefaultRecordBatch(ours)
    assert (reader.producer_id, reader.producer_epoch, reader.base_sequence) == producer
    assert reader.is_transactional


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_bulk_batches_and_we_read_its_batches_in_a_row(codec):
    values = np.frombuffer(b"".join(b"%099d\n" % i for i in range(500)), np.uint8)
    batches = build_batches(values.reshape(500, 100), timestamps=BASE_TS,
                            compression_type=codec, batch_size=4096)
    offsets = 0
    fetched = bytearray()
    for batch in batches:
        batch = bytearray(batch)
        BatchHeader(batch).stamp(offsets)                     # what the leader does
        records = decoded_by_kafka_python(bytes(batch))
        assert [r[0] for r in records] == list(range(offsets, offsets + len(records)))
        offsets += len(records)
        theirs, _ = kafka_python_batch(
            [(ts, key, value, headers) for _, ts, key, value, headers in records], codec)
        header = BatchHeader(bytearray(theirs))
        header.stamp(records[0][0])
        fetched += header.buf
    assert offsets == 500
    assert [(r.offset, r.value) for r in iter_records(bytes(fetched))] == \
        [(i, b"%099d\n" % i) for i in range(500)]


@given(st.none() | st.binary(max_size=500), st.none() | st.binary(max_size=500),
       st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)),
                max_size=3))
def test_size_estimate_matches_kafka_python(key, value, headers):
    assert RecordBatchBuilder.estimate_size_in_bytes(key, value, headers) == \
        DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers)
