"""What the chaos tool does to and reads from partition directories: the page-cache-loss
truncation to the recovery point, and the byte-for-byte replica comparison below the HW."""
from __future__ import annotations

import os

from cluster.tools.chaos.faults import truncate_to_recovery_point
from cluster.tools.chaos.replicas import compare_replicas, first_difference, replica_batches
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
