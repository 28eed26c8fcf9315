"""Bytes damaged on disk below the recovery point: found, never cut away (issue 10).

A flipped byte in a segment written whole and flushed is not a torn write: the log takes
itself offline (the first read of the segment CRC-checks all of it, once per process) or
does not open (recovery meets it below the recovery point), and no file is changed.
"""
from __future__ import annotations

import logging
import os
import random

import pytest

from segments.errors import CorruptSegmentError, KafkaStorageError
from segments.log import CLEAN_SHUTDOWN_MARKER
from segments.record import batch_descriptor as d
from tests.segments.helpers import (
    all_records,
    crash,
    open_log,
    set_recovery_point,
    simple_batch,
)
from tests.segments.test_recovery import CONFIG, batches_in_order, build, covered_byte, flip


def snapshot(path):
    """Every file's bytes but the clean-shutdown marker's (present or not)."""
    return {name: open(os.path.join(path, name), "rb").read()
            for name in sorted(os.listdir(path)) if name != CLEAN_SHUTDOWN_MARKER}


def logs_of(files):
    return {name: data for name, data in files.items() if name.endswith(".log")}


def damage(path, rng, where):
    """Flip a CRC-covered byte of a batch of the first (``"sealed"``) or the last
    (``"active"``) segment; ``(log_path, position of the batch, header)``."""
    batches = batches_in_order(path)
    logs = sorted({lp for lp, _, _ in batches})
    target = logs[0] if where == "sealed" else logs[-1]
    log_path, position, header = rng.choice([b for b in batches if b[0] == target])
    flip(log_path, position + covered_byte(rng, header.size_in_bytes), rng.randint(1, 255))
    return log_path, position, header


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("where", ["sealed", "active"])
def test_a_flip_after_a_clean_shutdown_takes_the_log_offline_at_its_first_read(
        tmp_path, where, seed, caplog):
    rng = random.Random(seed)
    path = tmp_path / "t-0"
    records = len(all_records(build(path, seed)))
    log = open_log(path, **CONFIG)
    log.close()
    log_path, position, header = damage(path, rng, where)
    before = snapshot(path)
    reasons = []
    log = open_log(path, **CONFIG)
    log.on_offline = reasons.append
    with caplog.at_level(logging.ERROR, logger="segments"):
        with pytest.raises(KafkaStorageError, match="offline") as raised:
            all_records(log)
    assert raised.value.errno == 56
    assert log.offline == reasons[0] and len(reasons) == 1
    assert f"segment {log_path}: batch at position {position}" in log.offline
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert log_path in line and f"position {position}" in line
    assert "stored CRC" in line or "magic" in line or "batchLength" in line \
        or "recordCount" in line
    with pytest.raises(KafkaStorageError, match="offline"):
        log.append(b"")  # every call, not only reads
    log.close()
    assert os.path.exists(path / CLEAN_SHUTDOWN_MARKER)  # the next open trusts the files
    assert snapshot(path) == before  # nothing truncated, deleted or rewritten
    again = open_log(path, **CONFIG)  # ...and finds the damage again on its first read
    with pytest.raises(KafkaStorageError, match=f"position {position}"):
        all_records(again)
    again.close()
    assert snapshot(path) == before
    assert records > header.last_offset


def test_a_segment_is_checked_once_per_process(tmp_path):
    path = tmp_path / "t-0"
    build(path, 1).close()
    log = open_log(path, **CONFIG)
    assert all(s.unverified_end == s.size for s in log.segments)
    first = log.segments[0]
    assert log.read(0, 100)
    assert first.unverified_end == 0  # read once: checked
    assert all(s.unverified_end == s.size for s in log.segments[1:])  # not yet read
    flip(first.log_path, first.size - 1, 0xFF)  # damage after the check is not looked for
    assert log.read(0, 100)
    assert log.offline is None
    log.close()


def test_appended_and_recovered_bytes_need_no_second_check(tmp_path):
    path = tmp_path / "t-0"
    log = build(path, 2)
    assert all(s.unverified_end == 0 for s in log.segments)  # written by this process
    crash(log)
    set_recovery_point(path, 0)
    log = open_log(path, **CONFIG)  # recovery from 0 checks it all
    assert all(s.unverified_end == 0 for s in log.segments)
    assert all_records(log)
    log.close()


@pytest.mark.parametrize("seed", range(3))
def test_recovery_refuses_to_cut_flushed_batches(tmp_path, seed):
    """After a crash, a bad batch below the recovery point is damage: the log does not
    open (its owner takes it offline) and its files stay as they are."""
    rng = random.Random(seed)
    path = tmp_path / "t-0"
    log = build(path, seed)
    log.flush()  # the recovery point is the log end offset
    crash(log)
    log_path, position, _ = damage(path, rng, "active")
    before = snapshot(path)
    try:
        log = open_log(path, **CONFIG)
    except CorruptSegmentError as e:  # the damage is where recovery resumes or after
        assert f"{log_path}: batch at position {position} " in str(e)
        assert "below the recovery point" in str(e)
    else:  # before it: the first read finds it
        with pytest.raises(KafkaStorageError, match=f"position {position}"):
            all_records(log)
        assert log.offline is not None
        log.close()
    assert snapshot(path) == before


@pytest.mark.parametrize("where", ["sealed", "active"])
def test_a_renumbered_last_batch_is_found_after_a_clean_shutdown(tmp_path, where):
    """baseOffset is outside the CRC: raised by one in a segment's last batch, its
    offsets reach the next segment's base (sealed: found by the first read) or move the
    log end offset away from the one the clean close checkpointed (active: the open
    fails). Nothing is served renumbered, no batch is cut (an index may be rebuilt)."""
    path = tmp_path / "t-0"
    build(path, 3).close()
    batches = batches_in_order(path)
    logs = sorted({lp for lp, _, _ in batches})
    target = logs[0] if where == "sealed" else logs[-1]
    log_path, position, header = [b for b in batches if b[0] == target][-1]
    with open(log_path, "r+b") as f:
        f.seek(position)
        f.write(d.INT64.pack(header.base_offset + 1))
    before = logs_of(snapshot(path))
    if where == "sealed":
        log = open_log(path, **CONFIG)
        with pytest.raises(KafkaStorageError, match=f"{log_path}: batch at position "
                                                    f"{position} .*reaches the next"):
            all_records(log)
        log.close()
    else:
        with pytest.raises(CorruptSegmentError, match=f"{log_path}: its batches end at "
                                                      f"offset {header.next_offset + 1}"):
            open_log(path, **CONFIG)
    assert logs_of(snapshot(path)) == before


def test_a_truncation_before_the_first_read_leaves_no_false_damage(tmp_path):
    """A follower truncates a segment it has not read yet in this process and appends
    batches of other sizes over the cut (found by chaos: the first read then checked up to
    the old end, met the batch now crossing it cut short, and took the partition offline)."""
    path = tmp_path / "t-0"
    build(path, 3).close()
    log = open_log(path, **CONFIG)
    active = log.segments[-1]
    assert active.unverified_end == active.size  # not read yet in this process
    old_end = active.size
    cut = active.base_offset + 1
    log.truncate_to(cut)
    while active.size <= old_end:  # a batch now crosses the old end
        log.append(simple_batch(1, value_size=7))
    assert all_records(log)  # the first read of the segment: checked, nothing offline
    assert log.offline is None and active.unverified_end == 0
    log.close()


def test_recovery_keeps_damaged_batches_and_what_follows_aside(tmp_path):
    """After a crash, a batch past the recovery point framed whole but failing its CRC is
    damage, not a torn write: the log is cut there, but its segment's bytes and the
    later segments are kept as ``.damaged`` files; the recovery says where the dropped
    batches ended."""
    path = tmp_path / "t-0"
    log = build(path, 4)
    end = log.log_end_offset
    crash(log)
    set_recovery_point(path, 0)
    batches = batches_in_order(path)
    first_log = batches[0][0]
    log_path, position, header = [b for b in batches if b[0] == first_log][3]
    original = {name: data for name, data in logs_of(snapshot(path)).items()}
    flip(log_path, position + d.RECORDS_OFFSET + 1, 0x40)  # a record byte: the CRC fails
    damaged = open(log_path, "rb").read()
    log = open_log(path, **CONFIG)
    assert log.log_end_offset == header.base_offset
    assert log.recovery.log_end_before == end
    names = sorted(os.listdir(path))
    kept = {n: open(path / n, "rb").read() for n in names if ".damaged" in n}
    base = os.path.basename(log_path)
    assert kept.pop(base + ".damaged") == damaged  # the whole segment, as it was
    assert {n.removesuffix(".damaged") for n in kept} == set(original) - {base}
    assert all(kept[n + ".damaged"] == original[n] for n in original if n != base)
    log.close()


def test_a_torn_tail_is_cut_without_a_copy(tmp_path):
    path = tmp_path / "t-0"
    log = build(path, 5)
    crash(log)
    set_recovery_point(path, 0)
    last = sorted(n for n in os.listdir(path) if n.endswith(".log"))[-1]
    os.truncate(path / last, os.path.getsize(path / last) - 3)  # a write cut short
    log = open_log(path, **CONFIG)
    assert log.recovery.bytes_dropped
    assert not [n for n in os.listdir(path) if ".damaged" in n]
    log.close()


def test_set_aside_damage_cuts_at_the_last_good_batch_and_keeps_the_rest(tmp_path):
    from segments.damaged import set_aside_damage
    path = tmp_path / "t-0"
    build(path, 6).close()
    rng = random.Random(6)
    assert set_aside_damage(path) is None  # nothing damaged: nothing changes
    log_path, position, header = damage(path, rng, "sealed")
    before = logs_of(snapshot(path))
    base, aside = set_aside_damage(path)
    assert aside[0] == log_path + ".damaged"
    assert open(aside[0], "rb").read() == before[os.path.basename(log_path)]
    assert open(log_path, "rb").read() == before[os.path.basename(log_path)][:position]
    log = open_log(path, **CONFIG)
    assert log.log_end_offset == header.base_offset  # the batches before the damage
    assert len(all_records(log)) == header.base_offset
    log.append(simple_batch(2))  # and it takes what the leader sends next
    log.close()
