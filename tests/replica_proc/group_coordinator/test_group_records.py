"""The offsets topic's records and the group → partition rule, against Kafka's bytes and
Java's String.hashCode values."""
from __future__ import annotations

import struct

import pytest

from replica_proc.coordinator_common.partitioning import (
    java_string_hash,
    kafka_abs,
    partition_for,
)
from replica_proc.group_coordinator import records as r


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0), ("a", 97), ("Aa", 2112), ("BB", 2112), ("hello", 99162322),
    ("Hello World", -862545276), ("polygenelubricants", -(1 << 31)),
    ("\N{GRINNING FACE}", 31 * 0xD83D + 0xDE00),  # two UTF-16 code units
])
def test_java_string_hash(text, expected):
    assert java_string_hash(text) == expected


def test_partition_for_uses_kafkas_abs():
    assert kafka_abs(-(1 << 31)) == 0
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("Hello World", 50) == 862545276 % 50
    with pytest.raises(ValueError, match="positive"):
        partition_for("g", 0)


def test_offset_commit_bytes():
    key = r.OffsetCommitKey("g", "t", 3)
    assert r.encode_key(key) == b"\x00\x01" b"\x00\x01g" b"\x00\x01t" b"\x00\x00\x00\x03"
    value = r.OffsetCommitValue(42, "m", 1700000000000, leader_epoch=5)
    data = r.encode_value(value)
    assert data == (b"\x00\x03" + struct.pack(">qi", 42, 5) + b"\x00\x01m"
                    + struct.pack(">q", 1700000000000))
    assert r.decode_key(r.encode_key(key)) == key
    assert r.decode_value(key, data) == value
    assert r.decode_value(key, None) is None


def test_older_offset_commit_values_read():
    key = r.OffsetCommitKey("g", "t", 0)
    v1 = b"\x00\x01" + struct.pack(">q", 7) + b"\x00\x00" + struct.pack(">qq", 11, 99)
    assert r.decode_value(key, v1) == r.OffsetCommitValue(7, "", 11, -1, 99)
    v0 = b"\x00\x00" + struct.pack(">q", 7) + b"\x00\x02ab" + struct.pack(">q", 11)
    assert r.decode_value(key, v0) == r.OffsetCommitValue(7, "ab", 11)
    assert r.decode_key(b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x01") == \
        r.OffsetCommitKey("g", "t", 1)


def test_group_metadata_round_trip_and_v0():
    member = r.MemberMetadata("m-1", "client", "/127.0.0.1", 10000, 30000, b"sub", b"asg",
                              "instance-1")
    value = r.GroupMetadataValue("consumer", 4, "range", "m-1", 1700000000000, (member,))
    key = r.GroupMetadataKey("g")
    assert r.encode_key(key) == b"\x00\x02\x00\x01g"
    assert r.decode_value(key, r.encode_value(value)) == value
    empty = r.GroupMetadataValue("consumer", 0, None, None)
    assert r.decode_value(key, r.encode_value(empty)) == empty
    v0 = (b"\x00\x00" b"\x00\x08consumer" + struct.pack(">i", 2) + b"\x00\x05range"
          b"\x00\x01m" + struct.pack(">i", 1) + b"\x00\x01m" b"\x00\x01c" b"\x00\x01h"
          + struct.pack(">i", 6000) + b"\x00\x00\x00\x01s" b"\x00\x00\x00\x01a")
    got = r.decode_value(key, v0)
    assert got.members == (r.MemberMetadata("m", "c", "h", 6000, 6000, b"s", b"a"),)
    assert got.generation == 2 and got.current_state_timestamp == -1


@pytest.mark.parametrize(("data", "match"), [
    (b"\x00\x07\x00\x01g", "unknown type 7"),
    (b"\x00\x01\x00\x05g", "truncated"),
    (b"\x00\x02\x00\x01gX", "trailing"),
    (b"\x00\x02\xff\xfe", "string length -2"),
    (b"\x00\x02\x00\x01\xff", "not UTF-8"),
])
def test_bad_keys_name_what_is_wrong(data, match):
    with pytest.raises(ValueError, match=match):
        r.decode_key(data)


@pytest.mark.parametrize(("data", "match"), [
    (b"\x00\x04" + bytes(30), "version 4"),
    (b"\x00\x03" + bytes(5), "truncated"),
])
def test_bad_values_name_what_is_wrong(data, match):
    with pytest.raises(ValueError, match=match):
        r.decode_value(r.OffsetCommitKey("g", "t", 0), data)
