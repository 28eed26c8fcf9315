"""The metadata log's copies (``metadata_copies``): every commit reaches every broker's
copy; a damaged copy, the log's own included, is kept aside and repaired from the others; a
copy that is behind is brought up to date and never taken for the authority; a damaged copy
that may hold more than every whole one stops the start."""
from __future__ import annotations

import glob
import logging
import os

import pytest

from cluster.errors import KafkaStorageError
from cluster.metadata import data_dir as dd
from replica_proc.controller import metadata_copies, metadata_log as mr
from replica_proc.controller.metadata_copies import COPY_DIR, DAMAGED_SUFFIX
from replica_proc.controller.metadata_log import MetadataLog

SEGMENT = "0" * 20 + ".log"


def log_dir(env):
    return os.path.join(env.data_dir, dd.METADATA_LOG_DIR)


def copy_dir(env, broker_id):
    return os.path.join(env.data_dir, f"broker-{broker_id}", COPY_DIR)


def read(directory, name=SEGMENT):
    with open(os.path.join(directory, name), "rb") as f:
        return f.read()


def batch_positions(data):
    """Where each RecordBatch in ``data`` starts."""
    positions, position = [], 0
    while position < len(data):
        positions.append(position)
        position += 12 + int.from_bytes(data[position + 8:position + 12], "big")
    return positions


def flip(path, position, mask=0x40):
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ mask]))


@pytest.fixture
def stopped(env):
    """Three brokers whose controller created two topics and closed: (env, the image)."""
    for b in range(3):
        env.start_broker(b)
    controller = env.controller(0)
    env.poll(controller)
    controller.create_topics([{"name": "a", "num_partitions": 3, "replication_factor": 3}])
    controller.create_topics([{"name": "b", "num_partitions": 2, "replication_factor": 2}])
    image = env.page.read()
    controller.close()
    return env, image


def replayed(env):
    metadata_log = MetadataLog(env.data_dir)
    try:
        return metadata_log.replay(env.cluster_id)[0]
    finally:
        metadata_log.close()


def test_every_commit_reaches_every_broker_copy(stopped):
    env, image = stopped
    assert len(batch_positions(read(log_dir(env)))) >= 3
    for b in range(3):
        assert sorted(os.listdir(copy_dir(env, b))) == [SEGMENT]
        assert read(copy_dir(env, b)) == read(log_dir(env))
        assert os.stat(copy_dir(env, b)).st_mode & 0o777 == dd.DIR_MODE
    assert replayed(env) == image


#: A position class of a batch: header fields outside the CRC, the CRC, the records.
POSITIONS = {
    "header: baseOffset": lambda batch, size: batch + 7,
    "header: batchLength": lambda batch, size: batch + 11,
    "header: magic": lambda batch, size: batch + 16,
    "checksum": lambda batch, size: batch + 18,
    "record body": lambda batch, size: batch + size - 5,
}


@pytest.mark.parametrize("where", sorted(POSITIONS))
@pytest.mark.parametrize("which", ["log", "copy"])
def test_a_flipped_byte_in_one_copy_is_kept_aside_and_repaired(stopped, which, where, caplog):
    env, image = stopped
    damaged = log_dir(env) if which == "log" else copy_dir(env, 1)
    intact = read(copy_dir(env, 2))
    positions = batch_positions(intact)
    batch = positions[1]  # a batch in the middle: later ones follow it
    flip(os.path.join(damaged, SEGMENT), POSITIONS[where](batch, positions[2] - batch))
    flipped = read(damaged)
    with caplog.at_level(logging.ERROR, logger="replica_proc.controller.metadata_copies"):
        assert replayed(env) == image
    [aside] = glob.glob(f"{damaged}.*{DAMAGED_SUFFIX}")
    assert read(aside) == flipped  # kept, never deleted
    assert read(damaged) == intact  # repaired
    assert any(damaged in r.message and aside in r.message for r in caplog.records)
    for b in range(3):
        assert read(copy_dir(env, b)) == intact


def test_a_copy_that_is_behind_is_brought_up_to_date_not_taken_for_the_authority(stopped,
                                                                                 caplog):
    env, image = stopped
    intact = read(log_dir(env))
    positions = batch_positions(intact)
    with open(os.path.join(copy_dir(env, 2), SEGMENT), "r+b") as f:
        f.truncate(positions[1])  # broker 2's copy missed every change after the first
    last = positions[-1]
    flip(os.path.join(log_dir(env), SEGMENT), last + 30)  # and the log's last batch is damaged
    with caplog.at_level(logging.WARNING, logger="replica_proc.controller.metadata_copies"):
        assert replayed(env) == image  # from broker 0's or 1's copy, not broker 2's
    assert any("is behind" in r.message and copy_dir(env, 2) in r.message
               for r in caplog.records)
    assert glob.glob(f"{copy_dir(env, 2)}.*") == []  # a prefix: nothing to keep aside
    for directory in (log_dir(env), copy_dir(env, 0), copy_dir(env, 2)):
        assert read(directory) == intact


def test_a_flip_the_checks_cannot_see_is_outvoted(stopped):
    """The last batch's partitionLeaderEpoch (outside the CRC), raised: the batch checks
    pass, the bytes differ; most copies hold the other bytes."""
    env, image = stopped
    intact = read(log_dir(env))
    last = batch_positions(intact)[-1]
    flip(os.path.join(copy_dir(env, 0), SEGMENT), last + 13, mask=0x01)  # epoch 1 -> 65537
    assert replayed(env) == image
    assert len(glob.glob(f"{copy_dir(env, 0)}.*{DAMAGED_SUFFIX}")) == 1
    assert read(copy_dir(env, 0)) == intact


def test_a_damaged_copy_holding_more_than_every_whole_one_stops_the_start(stopped):
    env, _ = stopped
    intact = read(log_dir(env))
    positions = batch_positions(intact)
    for b in range(3):  # every copy missed the last change
        with open(os.path.join(copy_dir(env, b), SEGMENT), "r+b") as f:
            f.truncate(positions[-1])
    flip(os.path.join(log_dir(env), SEGMENT), positions[1] + 30)  # and the log is damaged
    with pytest.raises(KafkaStorageError, match=f"metadata log {log_dir(env)}/{SEGMENT}: "
                                                f".*holds more than the longest whole copy"):
        MetadataLog(env.data_dir)
    assert read(log_dir(env)) != intact and len(read(log_dir(env))) == len(intact)
    assert glob.glob(f"{env.data_dir}/**/*{DAMAGED_SUFFIX}", recursive=True) == []


def test_a_new_broker_directory_gets_the_whole_log_at_the_next_commit(stopped):
    env, _ = stopped
    env.start_broker(3)
    controller = env.controller(1)
    env.poll(controller)  # takes over: its controller record is a commit
    assert read(copy_dir(env, 3)) == read(log_dir(env))
    controller.close()


def test_a_lost_log_is_rebuilt_from_the_copies(stopped, caplog):
    env, image = stopped
    intact = read(log_dir(env))
    os.rename(log_dir(env), log_dir(env) + ".gone")
    with caplog.at_level(logging.ERROR, logger="replica_proc.controller.metadata_copies"):
        assert replayed(env) == image
    assert read(log_dir(env)) == intact
    assert any(log_dir(env) in r.message for r in caplog.records)


def test_with_one_copy_besides_the_log_an_unseen_epoch_flip_is_settled_by_the_records(env):
    """One broker: the log and one copy, so no majority; the copy whose changed epoch no
    ``controller`` record of that epoch starts is the damaged one."""
    env.start_broker(0)
    controller = env.controller(0)
    env.poll(controller)
    controller.create_topics([{"name": "a", "num_partitions": 2}])
    image = env.page.read()
    controller.close()
    intact = read(log_dir(env))
    last = batch_positions(intact)[-1]
    flip(os.path.join(log_dir(env), SEGMENT), last + 14, mask=0x01)  # epoch 1 -> 257
    assert replayed(env) == image
    assert len(glob.glob(f"{log_dir(env)}.*{DAMAGED_SUFFIX}")) == 1
    assert read(log_dir(env)) == intact


def test_a_copy_that_cannot_be_written_is_rewritten_once_it_can(stopped, monkeypatch, caplog):
    env, _ = stopped
    failing = copy_dir(env, 1)
    real = metadata_copies._write_file

    def write_file(path, *args, **kwargs):
        if path.startswith(failing):
            raise OSError(28, "No space left on device", path)
        return real(path, *args, **kwargs)
    metadata_log = MetadataLog(env.data_dir)
    try:
        monkeypatch.setattr(metadata_copies, "_write_file", write_file)
        with caplog.at_level(logging.ERROR, logger="replica_proc.controller.metadata_copies"):
            for n in range(3):  # the commits succeed; the copy falls behind, logged once
                metadata_log.append([mr.topic_record(f"t{n}", f"id{n}", {})], 1)
        assert [r.message for r in caplog.records if failing in r.message] == [
            f"metadata log copy {failing}: write failed ([Errno 28] No space left on device: "
            f"'{failing}/{SEGMENT}'); it is behind until a later write succeeds or the next "
            f"controller repairs it"]
        assert read(failing) != read(log_dir(env))
        monkeypatch.undo()
        metadata_log.append([mr.topic_record("t3", "id3", {})], 1)
        assert read(failing) == read(log_dir(env)) == read(copy_dir(env, 0))
    finally:
        metadata_log.close()
