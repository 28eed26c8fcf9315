"""``__transaction_state`` records against bytes built by hand from Kafka's
TransactionLogKey.json / TransactionLogValue.json (no Python library has this codec), and
the transactional id -> partition rule."""
from __future__ import annotations

import struct

import pytest

from replica_proc.coordinator_common.partitioning import java_string_hash, partition_for
from replica_proc.transaction_coordinator import records as r
from replica_proc.transaction_coordinator.states import TransactionState as S

T0 = 1_700_000_000_000


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def test_key_v0_bytes():
    key = r.TransactionLogKey("txn-1")
    assert r.encode_key(key) == i16(0) + i16(5) + b"txn-1"
    assert r.decode_key(r.encode_key(key)) == key
    assert r.decode_key(i16(0) + i16(2) + "é".encode() + b"") == r.TransactionLogKey("é")


def test_ongoing_value_v0_bytes():
    value = r.TransactionLogValue(
        producer_id=4000, producer_epoch=3, transaction_timeout_ms=60000, state=S.ONGOING,
        partitions=(("b", 1), ("a", 2), ("b", 0)), last_update_timestamp_ms=T0 + 5,
        start_timestamp_ms=T0)
    expected = (i16(0) + i64(4000) + i16(3) + i32(60000) + b"\x01"
                + i32(2)  # two topics, in order
                + i16(1) + b"a" + i32(1) + i32(2)
                + i16(1) + b"b" + i32(2) + i32(0) + i32(1)
                + i64(T0 + 5) + i64(T0))
    assert r.encode_value(value) == expected
    decoded = r.decode_value(expected)
    assert decoded == r.TransactionLogValue(4000, 3, 60000, S.ONGOING,
                                            (("a", 2), ("b", 0), ("b", 1)), T0 + 5, T0)


def test_empty_value_writes_a_null_partition_array():
    value = r.TransactionLogValue(7, 0, 1000, S.EMPTY, (), T0, -1)
    data = r.encode_value(value)
    assert data == i16(0) + i64(7) + i16(0) + i32(1000) + b"\x00" + i32(-1) + i64(T0) + i64(-1)
    assert r.decode_value(data) == value
    with pytest.raises(ValueError, match="Empty transaction has no partitions"):
        r.encode_value(r.TransactionLogValue(7, 0, 1000, S.EMPTY, (("t", 0),), T0, -1))
    # Kafka ignores an Empty value's partitions when reading.
    with_partitions = (i16(0) + i64(7) + i16(0) + i32(1000) + b"\x00" + i32(1) + i16(1) + b"t"
                       + i32(1) + i32(0) + i64(T0) + i64(-1))
    assert r.decode_value(with_partitions).partitions == ()


def test_value_v1_flexible_bytes_and_tagged_fields():
    value = r.TransactionLogValue(
        producer_id=9, producer_epoch=1, transaction_timeout_ms=500,
        state=S.PREPARE_COMMIT, partitions=(("t", 3),), last_update_timestamp_ms=T0,
        start_timestamp_ms=T0 - 1, previous_producer_id=8, next_producer_id=-1,
        client_transaction_version=2)
    expected = (i16(1) + i64(9) + i16(1) + i32(500) + b"\x02"
                + b"\x02"  # compact array: 1 topic + 1
                + b"\x02t" + b"\x02" + i32(3) + b"\x00"  # topic, 1 partition, no tags
                + i64(T0) + i64(T0 - 1)
                + b"\x02"  # two tagged fields (NextProducerId is the default: left out)
                + b"\x00\x08" + i64(8)
                + b"\x02\x02" + i16(2))
    assert r.encode_value(value, version=1) == expected
    assert r.decode_value(expected) == value
    # Defaults only: an empty tagged section; the v0 reading has the same defaults.
    plain = r.TransactionLogValue(9, 1, 500, S.COMPLETE_ABORT, (), T0, T0)
    flexible = r.encode_value(plain, version=1)
    assert flexible.endswith(b"\x00") and r.decode_value(flexible) == plain
    assert flexible[17] == 1  # compact count 0 + 1: an empty (not null) array
    assert r.decode_value(r.encode_value(plain)) == plain
    # An unknown tag is ignored, as Kafka ignores it.
    unknown = flexible[:-1] + b"\x01" + b"\x09\x01\x00"
    assert r.decode_value(unknown) == plain


def test_every_state_round_trips():
    for state in S:
        partitions = () if state is S.EMPTY else (("t", 0),)
        value = r.TransactionLogValue(1, 2, 3, state, partitions, T0, T0)
        for version in (0, 1):
            assert r.decode_value(r.encode_value(value, version)) == value
    assert r.encode_value(None) is None and r.decode_value(None) is None


@pytest.mark.parametrize(("data", "message"), [
    (i16(1) + i16(1) + b"x", "TransactionLogKey of version 1"),
    (i16(0) + i16(3) + b"ab", "truncated"),
    (i16(0) + i16(1) + b"ab", "trailing"),
])
def test_bad_keys(data, message):
    with pytest.raises(ValueError, match=message):
        r.decode_key(data)


GOOD_V0 = r.encode_value(r.TransactionLogValue(1, 0, 10, S.ONGOING, (("t", 0),), T0, T0))


@pytest.mark.parametrize(("data", "message"), [
    (i16(2) + GOOD_V0[2:], "version 2"),
    (GOOD_V0[:16] + b"\x09" + GOOD_V0[17:], "unknown transaction status 9"),
    (GOOD_V0[:-1], "truncated"),
    (GOOD_V0 + b"\x00", "trailing"),
    (GOOD_V0[:17] + i32(1000) + GOOD_V0[21:], "array count 1000"),
])
def test_bad_values(data, message):
    with pytest.raises(ValueError, match=message):
        r.decode_value(data)


def test_state_names_and_transitions_are_kafkas():
    assert [s.kafka_name for s in S] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
        "CompleteAbort", "Dead", "PrepareEpochFence"]
    assert S.PREPARE_ABORT.valid_previous == {S.ONGOING, S.PREPARE_EPOCH_FENCE}
    assert {s for s in S if s.expiration_allowed} == {S.EMPTY, S.COMPLETE_COMMIT,
                                                      S.COMPLETE_ABORT}


def test_transactional_id_partition_is_kafkas():
    # Utils.abs("my-txn".hashCode) % 50: hashCode = sum(c * 31^(n-1-i)) in int32.
    expected = sum(ord(c) * 31 ** (5 - i) for i, c in enumerate("my-txn")) % 2**32 - 2**32
    assert java_string_hash("my-txn") == expected == -1061187895
    assert partition_for("my-txn", 50) == 1061187895 % 50 == 45
    assert partition_for("polygenelubricants", 50) == 0  # hashCode = Integer.MIN_VALUE
