"""The compiled record paths (issue 24, ``segments.record.accel``) against their pure-Python
twins, side by side in one process: the builder core's ``append_value`` (same answers, same
batch bytes), the producer's compiled lane (same futures, same fall-throughs) and the
consumer's compiled ``to_records`` (same ConsumerRecords, field types and shared objects
included). Each compiled module is imported directly, so these run whatever
``RINGLOG_NO_ACCEL`` says; they skip, naming it, when a module is not built. The switch and
the once-per-process log line are checked in fresh interpreters.

``make test`` runs the codec and client tests a second time with ``RINGLOG_NO_ACCEL=1``,
so every behaviour they check holds on both paths.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cluster.producer.batch import FutureRecordMetadata
from consumer_proc import record_columns
from consumer_proc.columns_parser import parse_batches
from consumer_proc.consumer_record import ConsumerRecord
from segments.record import accel, builder_core, records
from segments.record.batch_header import iter_batches
from segments.record.bulk import build_batches
from segments.record.records import RecordBatchBuilder
from tests.support.bounds import IN_PROCESS_BOUND
from tests.support.properties import examples

SETTINGS = settings(max_examples=examples(80), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
T0 = 1_700_000_000_000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def compiled(name):
    try:
        return __import__(name, fromlist=["_"])
    except ImportError as exc:
        pytest.skip(f"{name} is not built ({exc}): pip install -e . with a C compiler")


def builder_on(core):
    """RecordBatchBuilder's own methods over ``core`` (the compiled or the Python base)."""
    body = {name: value for name, value in vars(RecordBatchBuilder).items()
            if not isinstance(value, types.MemberDescriptorType)
            and name not in ("__dict__", "__weakref__")}
    return type(f"RecordBatchBuilderOn{core.__module__.rsplit('.', 1)[-1]}", (core,), body)


def builders():
    core = compiled("segments.record._builder_core").BuilderCore
    return builder_on(core), builder_on(builder_core.BuilderCore)


record_st = st.tuples(
    st.sampled_from([0, 1, -1, 63, -64, 64, 1023, -1023, 1024, -1024, 5000, 2**62, -2**62]),
    st.sampled_from(["value", "key", "headers", "none", "bytearray"]),
    st.integers(0, 5000))


@SETTINGS
@given(records=st.lists(record_st, max_size=60),
       batch_size=st.sampled_from([100, 500, 4096, 16384, 1 << 20]),
       base=st.sampled_from([T0, 0, -T0, 2**63 - 1, -2**63]))
def test_compiled_builder_core_answers_and_builds_as_the_python_one(records, batch_size, base):
    lock = threading.Lock()
    made = []
    for cls in builders():
        builder = cls(0, batch_size)
        answers = [builder.append(base, None, b"first")]
        for delta, kind, size in records:
            value = b"v" * size
            if kind == "value":
                answers.append(builder.append_value(base + delta, value, lock))
            elif kind == "key":
                answers.append(builder.append(base + delta, b"k", value))
            elif kind == "headers":
                answers.append(builder.append(base + delta, None, value, [("h", b"x")]))
            elif kind == "none":
                answers.append(builder.append(base + delta, None, None))
            else:
                answers.append(builder.append(base + delta, None, bytearray(value)))
            answers.append((builder.record_count, builder.size_in_bytes()))
        try:
            data = bytes(builder.build())
        except Exception as exc:  # a timestamp past int64: both must refuse alike
            data = type(exc)
        made.append((answers, data))
        assert not lock.locked()
    assert made[0] == made[1]


def test_compiled_builder_core_refuses_what_the_python_one_refuses():
    lock = threading.Lock()
    for cls in builders():
        builder = cls(0, 16384)
        assert builder.append_value(T0, b"v", lock) is None  # the first record: append()
        assert builder.append(T0, None, b"v") == 0
        assert builder.append_value(T0 + 1024, b"v", lock) is None  # past the delta table
        assert builder.append_value(T0, b"v" * 4096, lock) is None  # past the size table
        assert builder.append_value(T0 + 5, b"v", lock) == 1
        builder.close_for_appends()
        assert builder.append_value(T0, b"v", lock) is None
        assert builder.record_count == 2 and not lock.locked()


def test_the_record_batch_builder_runs_on_the_chosen_core():
    assert issubclass(RecordBatchBuilder, builder_core.BUILDER_CORE)
    expected = "segments.record.builder_core" if accel.DISABLED else (
        builder_core.BUILDER_CORE.__module__)
    assert builder_core.BUILDER_CORE.__module__ == expected


def python_plain_records(timestamps, values):
    """What build() wrote for a plain batch before the compiled encoder: _encode_plain,
    else encode_records."""
    encoded = records._encode_plain(timestamps, values)
    if encoded is None:
        count = len(values)
        keys, suffixes = [None] * count, [records.NO_HEADERS] * count
        encoded = records.encode_records(
            timestamps, keys, values, suffixes,
            records._record_bodies(timestamps, keys, values, suffixes))
    return encoded


@SETTINGS
@given(deltas=st.lists(st.integers(-70, 70) | st.integers(-2**40, 2**40), min_size=1,
                       max_size=300),
       lengths=st.lists(st.sampled_from([0, 1, 63, 64, 100, 4087, 4096, 9000]), min_size=1,
                        max_size=5),
       base=st.sampled_from([T0, 0, -T0, 2**61]))
def test_compiled_plain_encoder_writes_the_python_encoders_bytes(deltas, lengths, base):
    encode_plain = compiled("segments.record._builder_core").encode_plain
    timestamps = [base + delta for delta in deltas]
    values = [b"%d" % i * 9000 for i in range(len(deltas))]
    values = [value[:lengths[i % len(lengths)]] for i, value in enumerate(values)]
    assert encode_plain(timestamps, values) == python_plain_records(timestamps, values)
    one = [values[0]] * len(values)  # one length: _encode_plain's own shape
    assert encode_plain(timestamps, one) == python_plain_records(timestamps, one)


def test_compiled_plain_encoder_leaves_what_it_does_not_cover_to_python():
    encode_plain = compiled("segments.record._builder_core").encode_plain
    assert encode_plain([T0, 2**62], [b"a", b"b"]) is None     # past ±2**62
    assert encode_plain([T0, -2**62], [b"a", b"b"]) is None
    assert encode_plain([T0, T0], [b"a", bytearray(b"b")]) is None  # not bytes
    assert encode_plain([T0, True], [b"a", b"b"]) is None      # not an int
    assert encode_plain([], []) is None
    assert encode_plain([T0], [b"a", b"b"]) is None


# -- the producer's lane -----------------------------------------------------------------

class _Metadata:
    """Stands in for the producer's metadata cache: the lane reads its ``version``."""

    def __init__(self, version):
        self.version = version


def lane_and_builder(version=7, base=T0):
    lane_type = compiled("cluster.producer._lane_accel").Lane
    builder = builders()[0](0, 16384)  # on the compiled core, whatever the switch says
    assert builder.append(base, None, b"first") == 0
    batch = object()
    metadata = _Metadata(version)
    lock = threading.Lock()
    lane = lane_type(version, batch, builder, FutureRecordMetadata, metadata, lock)
    return lane, batch, builder, metadata, lock


def test_compiled_lane_hands_out_the_future_the_python_path_makes():
    now = time.time_ns() // 1_000_000
    lane, batch, builder, _, lock = lane_and_builder(base=now)
    future = lane.send(b"value", now + 3)
    assert type(future) is FutureRecordMetadata
    assert tuple(future) == (batch, 1, now + 3, -1, 5, -1)
    before = time.time_ns() // 1_000_000
    future = lane.send(b"v", None)
    after = time.time_ns() // 1_000_000
    assert future[:2] == (batch, 2) and before <= future[2] <= after
    assert future[3:] == (-1, 1, -1) and type(future[2]) is int
    assert builder.record_count == 3 and not lock.locked()
    assert (lane.version, lane.batch) == (7, batch)


def test_compiled_lane_falls_through_where_the_python_path_does():
    lane, _, builder, metadata, lock = lane_and_builder()
    assert lane.send(bytearray(b"v"), T0) is None       # not bytes: the general path
    assert lane.send(None, T0) is None                  # a tombstone: the general path
    assert lane.send(b"v", float(T0)) is None           # not an int: the general path
    assert lane.send(b"v", T0 + 5000) is None           # the builder refuses
    metadata.version = 8
    assert lane.send(b"v", T0) is None                  # the metadata changed
    metadata.version = 7
    builder.close_for_appends()
    assert lane.send(b"v", T0) is None
    assert builder.record_count == 1 and not lock.locked()


# -- the consumer's records ----------------------------------------------------------------

def records_with(module, columns, *args):
    """``columns.to_records(*args)`` with ``module`` as the compiled twin (None: Python)."""
    saved = record_columns._compiled
    record_columns._compiled = module
    try:
        return columns.to_records(*args)
    finally:
        record_columns._compiled = saved


def assert_same_records(columns, *args):
    expected = records_with(None, columns, *args)
    found = records_with(compiled("consumer_proc._records_accel"), columns, *args)
    assert found == expected
    for mine, theirs in zip(found, expected):
        assert type(mine) is ConsumerRecord
        assert [type(field) for field in mine] == [type(field) for field in theirs]
        assert mine.topic is theirs.topic and mine.leader_epoch is theirs.leader_epoch
        if not theirs.headers:
            assert mine.headers is record_columns.NO_HEADERS
    return found


def fetched(records, batch_size=16384):
    values = [value for value, _ in records]
    keys = [key for _, key in records]
    data = b"".join(bytes(batch) for batch in build_batches(
        values, None if all(k is None for k in keys) else keys, T0, batch_size=batch_size))
    return parse_batches(data, list(iter_batches(data)))


def test_compiled_records_from_positions_match_the_python_ones():
    runs = fetched([(b"v%03d" % i, None) for i in range(600)])
    assert runs and runs[0].buffer is not None
    for columns in runs:
        found = assert_same_records(columns, "topic", 3)
        assert found[0].offset == columns.offsets[0]


@SETTINGS
@given(records=st.lists(st.tuples(st.none() | st.binary(max_size=40),
                                  st.none() | st.binary(max_size=12)), min_size=1,
                        max_size=150))
def test_compiled_records_of_any_run_match_the_python_ones(records):
    if all(value is None for value, _ in records):
        records[0] = (b"", records[0][1])
    for columns in fetched(records, batch_size=512):
        assert_same_records(columns, "t", 0)
        assert_same_records(columns.slice(1, len(columns)), "t", 0)


def test_compiled_records_with_headers_lists_and_deserializers_match():
    records = [(T0 + i, b"k%d" % i if i % 3 else None, None if i == 4 else b"v%d" % i,
                [("h", b"x"), ("é", None)] if i % 2 else ()) for i in range(20)]
    from segments.record.records import RecordBatch
    builder = RecordBatchBuilder(0, 1 << 20)
    for record in records:
        builder.append(*record)
    decoded = list(RecordBatch(bytes(builder.build())))
    columns = record_columns.RecordColumns.from_records(5, 0, decoded)
    assert columns.buffer is None and columns.headers is not None
    assert_same_records(columns, "t", 1)

    def upper(topic, headers, data):
        return None if data is None else data.upper()
    assert_same_records(columns, "t", 1, upper, upper)
    positional = fetched([(b"v%d" % i, b"k%d" % i) for i in range(100)])[0]
    assert_same_records(positional, "t", 1, None, upper)
    assert_same_records(positional, "t", 1, upper, None)


def test_compiled_records_refuse_columns_of_different_lengths():
    module = compiled("consumer_proc._records_accel")
    column = np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError, match="different lengths"):
        module.make_records(ConsumerRecord, "t", 0, -1, 0, column, column[:2], column, column,
                            b"abc", column, column, None, None, None, None, ())


# -- the switch and the log line --------------------------------------------------------------

def run_python(code, **env):
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
        timeout=IN_PROCESS_BOUND * 6,
        env={**os.environ, **env, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), done.stderr


@pytest.mark.multiprocess
def test_the_switch_selects_the_python_paths_without_a_log_line():
    out, err = run_python(
        "from segments.record import accel; import consumer_proc.record_columns, "
        "cluster.producer.kafka_producer as p; print(accel.describe(), p._LANE)",
        RINGLOG_NO_ACCEL="1")
    assert out == "pure Python (RINGLOG_NO_ACCEL=1) None"
    assert "not available" not in err


@pytest.mark.multiprocess
def test_a_missing_compiled_module_is_said_once_and_the_python_paths_run():
    out, err = run_python(
        "import logging, sys; logging.basicConfig(level=logging.INFO); "
        "sys.modules['segments.record._builder_core'] = None; "
        "sys.modules['consumer_proc._records_accel'] = None; "
        "from segments.record import accel, builder_core; import consumer_proc.record_columns; "
        "import cluster.producer.kafka_producer as p; "
        "print(builder_core.BUILDER_CORE.__module__, p._LANE, accel.describe())",
        RINGLOG_NO_ACCEL="0")
    assert out.startswith("segments.record.builder_core None pure Python (compiled modules "
                          "not available: ")
    assert err.count("the compiled record paths are not available") == 1


def test_the_bench_says_which_record_paths_run():
    from perf.suite import machine
    said = machine.codec_path()
    assert said == accel.describe()
    if accel.DISABLED:
        assert said == "pure Python (RINGLOG_NO_ACCEL=1)"
    elif accel.compiled():
        assert said.startswith("compiled (Cython): ") and "_builder_core" in said
    else:
        assert said.startswith("pure Python (compiled modules not available: ")
