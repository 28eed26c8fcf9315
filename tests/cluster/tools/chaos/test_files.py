"""What the chaos tool does to and reads from partition directories: the page-cache-loss
truncation to the recovery point, the byte flips of the flip scenarios, and the
byte-for-byte replica comparison below the HW."""
from __future__ import annotations

import os
import random

import pytest

from cluster.errors import CorruptRecordError
from cluster.tools.chaos.faults import (
    flip_batch_byte,
    flip_file_byte,
    truncate_to_recovery_point,
)
from cluster.tools.chaos.replicas import compare_replicas, first_difference, replica_batches
from segments.record.batch_header import BatchHeader
from segments.segment import iter_file_batches
from tests.segments.helpers import crash, open_log, set_recovery_point, simple_batch

SMALL_SEGMENTS = {"segment.bytes": 1024}


def write_log(path, batches, **props):
    """A partition directory holding ``batches`` (5 records each), left as a crash leaves
    it; its log end offset."""
    log = open_log(path, **props)
    for batch in batches:
        log.append(batch)
    end = log.log_end_offset
    crash(log)
    return end


def test_truncation_drops_everything_from_the_batch_holding_the_recovery_point(tmp_path):
    path = tmp_path / "t-0"
    assert write_log(path, [simple_batch(5) for _ in range(10)], **SMALL_SEGMENTS) == 50
    segments_before = sorted(n for n in os.listdir(path) if n.endswith(".log"))
    assert len(segments_before) > 2
    set_recovery_point(path, 20)
    assert truncate_to_recovery_point(path) > 0
    log = open_log(path, **SMALL_SEGMENTS)
    try:
        assert log.log_end_offset == 20
        assert all(s.base_offset < 20 for s in log.segments)
    finally:
        log.close()


def test_truncation_to_zero_keeps_an_empty_first_segment(tmp_path):
    path = tmp_path / "t-0"
    write_log(path, [simple_batch(5) for _ in range(3)])
    set_recovery_point(path, 0)
    truncate_to_recovery_point(path)
    log = open_log(path)
    try:
        assert log.log_end_offset == 0
    finally:
        log.close()


def replica_dirs(tmp_path, topic="t", partition=0, brokers=(0, 1, 2)):
    return [tmp_path / f"broker-{b}" / f"{topic}-{partition}" for b in brokers]


def test_equal_replicas_have_no_difference(tmp_path):
    batches = [simple_batch(5) for _ in range(4)]
    for path in replica_dirs(tmp_path):
        write_log(path, batches)
    assert [b[:2] for b in replica_batches(replica_dirs(tmp_path)[0], 12)] == [
        (0, 4), (5, 9), (10, 14)]
    assert compare_replicas(str(tmp_path), "t", {0: [0, 1, 2]}, {0: 20}) == []


def test_a_replica_that_differs_or_stops_short_below_the_hw_is_reported(tmp_path):
    same = [simple_batch(5) for _ in range(2)]
    first, second, third = replica_dirs(tmp_path)
    write_log(first, same + [simple_batch(5, value_size=10)])
    write_log(second, same + [simple_batch(5, value_size=11)])  # same offsets, other bytes
    write_log(third, same)                                      # ends at 10
    found = compare_replicas(str(tmp_path), "t", {0: [0, 1, 2]}, {0: 15})
    assert [(f["broker"], f["offset"]) for f in found] == [(1, 10), (2, 10)]
    assert "below the high watermark 15" in found[1]["what"]
    # below the HW of 10 they all agree
    assert compare_replicas(str(tmp_path), "t", {0: [0, 1, 2]}, {0: 10}) == []


def test_first_difference_names_where_batches_part():
    assert first_difference([(0, 4, b"a")], [(0, 4, b"a")], 5) is None
    assert first_difference([(0, 4, b"a")], [(0, 4, b"b")], 5) == (0, "batch 0-4 differs")
    assert first_difference([(0, 4, b"a")], [(0, 4, b"a"), (5, 9, b"b")], 10) == (
        5, "the reference ends at 5, below the high watermark 10")
    assert first_difference([(0, 4, b"a")], [(1, 4, b"a")], 5)[0] == 0


def batches_of(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return [(position, bytes(view))
                for position, view in iter_file_batches(fd, 0, os.fstat(fd).st_size)]
    finally:
        os.close(fd)


def test_a_batch_byte_flip_is_one_bit_that_the_batch_crc_catches(tmp_path):
    path = tmp_path / "t-0"
    write_log(path, [simple_batch(5) for _ in range(4)])
    (segment,) = [path / n for n in os.listdir(path) if n.endswith(".log")]
    before = segment.read_bytes()
    flipped = flip_batch_byte(segment, random.Random(3))
    after = segment.read_bytes()
    changed = [i for i in range(len(before)) if before[i] != after[i]]
    assert changed == [flipped["position"]]
    assert bin(flipped["was"] ^ flipped["now"]).count("1") == 1
    damaged = [(p, b) for p, b in batches_of(segment)
               if p <= flipped["position"] < p + len(b)]
    (position, batch), = damaged
    assert BatchHeader(batch).base_offset == flipped["batch_base"]
    with pytest.raises(CorruptRecordError):
        BatchHeader(batch).validate()
    # the same seed flips the same byte of the same file
    segment.write_bytes(before)
    assert flip_batch_byte(segment, random.Random(3)) == flipped


def test_a_file_byte_flip_changes_one_bit_and_an_empty_file_is_left_alone(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(bytes(68))
    flipped = flip_file_byte(path, random.Random(1))
    data = path.read_bytes()
    assert data[flipped["position"]] == flipped["now"] != 0 and sum(map(bool, data)) == 1
    path.write_bytes(b"")
    assert flip_file_byte(path, random.Random(1)) is None
