"""The high-watermark checkpoint (replica_proc.high_watermark_checkpoint) through the
ReplicaManager and the LogManager's timer, without processes: a restart keeps each high
watermark (clamped to its log), an unreadable file falls back to the log start and deletes
nothing, the timer writes only when a high watermark moved."""
from __future__ import annotations

import logging
import os

import pytest

from cluster.config import BrokerConfig
from cluster.metadata.model import PartitionState
from replica_proc.high_watermark_checkpoint import (
    REPLICATION_OFFSET_CHECKPOINT,
    HighWatermarkCheckpoint,
)
from replica_proc.log_manager import LogManager
from replica_proc.replica_manager import ReplicaManager
from segments.checkpoint import CheckpointFile
from tests.support.broker import batch, make_image
from tests.support.clock import T0, FakeClock

CLUSTER = "unit-cluster"
INTERVAL = "replica.high.watermark.checkpoint.interval.ms"


@pytest.fixture
def config(tmp_path):
    return BrokerConfig({"broker.id": 0, INTERVAL: 2000}, data_dir=tmp_path)


def start(config):
    return ReplicaManager(0, config["log.dirs"], config, FakeClock(T0))


def image(version, leader=0):
    """Topic t, 2 partitions on brokers 0 and 1, led by ``leader``."""
    made = make_image(CLUSTER, version, {"t": (2, {})}, brokers=(0, 1))
    info = made.topics["t"]
    replicas = (leader, 1 - leader)
    made.topics["t"] = type(info)(info.name, info.topic_id, tuple(
        PartitionState("t", n, leader, version, replicas, replicas) for n in range(2)))
    return made


def fill(replicas):
    """As leader: 6 records in t-0, 2 in t-1; then the high watermarks 4 and 2 (the ISR
    would hold them there)."""
    replicas.apply(image(1))
    replicas.partition("t", 0).append_as_leader(batch([b"v"] * 6), 1)
    replicas.partition("t", 1).append_as_leader(batch([b"v"] * 2), 1)
    replicas.partition("t", 0).high_watermark = 4
    replicas.partition("t", 1).high_watermark = 2


def test_a_restart_keeps_each_high_watermark(config):
    replicas = start(config)
    fill(replicas)
    replicas.close()  # a clean shutdown checkpoints
    assert HighWatermarkCheckpoint(config["log.dirs"]).read() == {("t", 0): 4, ("t", 1): 2}
    restarted = start(config)
    restarted.apply(image(2, leader=1))  # a follower now: nothing moves its HW
    assert restarted.partition("t", 0).high_watermark == 4
    assert restarted.partition("t", 1).high_watermark == 2
    restarted.close()


def test_without_a_checkpoint_the_high_watermark_starts_at_the_log_start(config):
    replicas = start(config)
    fill(replicas)
    replicas.close()
    os.unlink(os.path.join(config["log.dirs"], REPLICATION_OFFSET_CHECKPOINT))
    restarted = start(config)
    restarted.apply(image(2, leader=1))
    assert restarted.partition("t", 0).high_watermark == 0
    restarted.close()


def test_a_checkpointed_value_outside_the_log_is_clamped(config):
    replicas = start(config)
    fill(replicas)
    replicas.partition("t", 0).log.delete_records_before(3)
    replicas.close()
    HighWatermarkCheckpoint(config["log.dirs"]).write({("t", 0): 1, ("t", 1): 50})
    restarted = start(config)
    restarted.apply(image(2, leader=1))
    assert restarted.partition("t", 0).high_watermark == 3  # the log start
    assert restarted.partition("t", 1).high_watermark == 2  # the log end
    restarted.close()


@pytest.mark.parametrize("content", [
    b"0\n1\nt 0 4\ncrc32c 0x00000000\n",  # a flipped byte: the CRC fails
    b"0\n2\nt 0 4\nt 0 5\n",  # the same partition twice
    b"0\n1\nt x 4\n",
    b"0\n1\nt 0\n",
    b"1\n0\n",
])
def test_an_unreadable_checkpoint_starts_at_the_log_start_and_deletes_nothing(
        config, caplog, content):
    replicas = start(config)
    fill(replicas)
    replicas.close()
    path = os.path.join(config["log.dirs"], REPLICATION_OFFSET_CHECKPOINT)
    with open(path, "wb") as f:
        f.write(content)
    with caplog.at_level(logging.ERROR, logger="replica_proc.replica_manager"):
        restarted = start(config)
    assert path in caplog.text and "starts at its log start offset" in caplog.text
    restarted.apply(image(2, leader=1))
    partition = restarted.partition("t", 0)
    assert partition.high_watermark == 0
    assert partition.log.log_end_offset == 6  # the data is all there
    with open(path, "rb") as f:
        assert f.read() == content  # left as it was until the next checkpoint
    assert restarted.checkpoint_high_watermarks()
    assert HighWatermarkCheckpoint(config["log.dirs"]).read() == {("t", 0): 0, ("t", 1): 0}
    restarted.close()


def test_the_timer_writes_when_a_high_watermark_moved(config, monkeypatch):
    replicas = start(config)
    fill(replicas)
    writes = []
    original = CheckpointFile.write

    def counting(self, entries, *args, **kwargs):
        if self.path.endswith(REPLICATION_OFFSET_CHECKPOINT):
            writes.append(list(entries))
        original(self, entries, *args, **kwargs)
    monkeypatch.setattr(CheckpointFile, "write", counting)
    timers = LogManager(replicas, config, 0)
    assert "high-watermark checkpoint" not in timers.tick(1999)
    assert "high-watermark checkpoint" in timers.tick(2000)
    assert writes == [[("t", 0, 4), ("t", 1, 2)]]
    timers.tick(4000)  # nothing moved: no write
    assert len(writes) == 1
    replicas.partition("t", 0).high_watermark = 6
    timers.tick(6000)
    assert writes[-1] == [("t", 0, 6), ("t", 1, 2)]
    replicas.close()
    assert len(writes) == 2  # the shutdown's checkpoint had nothing new either


def test_a_failed_write_is_logged_and_retried_by_the_next_pass(config, monkeypatch, caplog):
    replicas = start(config)
    fill(replicas)
    timers = LogManager(replicas, config, 0)

    def full_disk(self, high_watermarks):
        raise OSError(28, "No space left on device")
    with monkeypatch.context() as m:
        m.setattr(HighWatermarkCheckpoint, "write", full_disk)
        with caplog.at_level(logging.ERROR, logger="replica_proc.log_manager"):
            assert "high-watermark checkpoint" in timers.tick(2000)
    assert "No space left on device" in caplog.text
    assert HighWatermarkCheckpoint(config["log.dirs"]).read() == {}
    timers.tick(4000)  # the same high watermarks, written this time
    assert HighWatermarkCheckpoint(config["log.dirs"]).read() == {("t", 0): 4, ("t", 1): 2}
    replicas.close()
