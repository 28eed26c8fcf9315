"""The broker's state without processes: ReplicaManager reconciliation, Partition rules,
the fetch purgatory and the log timers (fake clocks)."""
from __future__ import annotations

import dataclasses
import errno
import logging
import os
import re
import struct

import pytest

from cluster.config import BrokerConfig
from cluster.errors import (
    FencedLeaderEpochError,
    KafkaStorageError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from cluster.metadata.model import PartitionState
from replica_proc import replica_manager
from replica_proc.delayed_fetch import FOLLOWER, STABLE, DelayedFetch, FetchPurgatory
from replica_proc.log_manager import CLEANER_BACKOFF_MS, RECOVERY_CHECKPOINT_INTERVAL_MS, LogManager
from replica_proc.partition import PARTITION_METADATA, read_topic_id, write_topic_id
from replica_proc.replica_manager import ReplicaManager
from segments.log import CLEAN_SHUTDOWN_MARKER, PartitionLog, stage_empty_log
from segments.producer_state import ORIGIN_COORDINATOR
from segments.record.batch_header import iter_batches
from segments.record.control_record import COMMIT, build_end_txn_marker
from segments.record.records import RecordBatchBuilder
from tests.support.broker import batch, make_image
from tests.support.clock import T0, FakeClock
from tests.support.disk_faults import DiskFaults

CLUSTER = "unit-cluster"


@pytest.fixture
def clock():
    return FakeClock(T0)


@pytest.fixture
def manager(tmp_path, clock):
    config = BrokerConfig({"broker.id": 0, "log.retention.check.interval.ms": 1000,
                           "log.flush.scheduler.interval.ms": 500}, data_dir=tmp_path)
    replicas = ReplicaManager(0, config["log.dirs"], config, clock)
    yield replicas
    replicas.close()


def image(version, **topics):
    return make_image(CLUSTER, version, topics, brokers=(0, 1))


# -- ReplicaManager ----------------------------------------------------------------------------

def test_an_image_of_version_0_opens_and_deletes_nothing(manager):
    os.makedirs(os.path.join(manager.log_dir, "old-0"))
    assert manager.apply(image(0, t=(1, {}))) == set()
    assert len(manager) == 0
    assert os.path.isdir(os.path.join(manager.log_dir, "old-0"))


def test_apply_opens_hosted_partitions_and_deletes_strays(manager):
    stray = os.path.join(manager.log_dir, "gone-0")
    os.makedirs(stray)
    write_topic_id(stray, "gone-id")
    changed = manager.apply(dataclasses.replace(image(1, mine=(2, {}), theirs=(1, {}, 1)),
                                                deleted_topic_ids=frozenset({"gone-id"})))
    assert changed == {("mine", 0), ("mine", 1)}
    assert not os.path.exists(stray)
    assert manager.leader("mine", 1).is_leader
    assert os.path.exists(os.path.join(manager.log_dir, "mine-0", PARTITION_METADATA))
    with pytest.raises(NotLeaderForPartitionError, match="not hosted on broker 0"):
        manager.leader("theirs", 0)
    with pytest.raises(UnknownTopicOrPartitionError, match="partitions 0..1, not 5"):
        manager.partition("mine", 5)
    with pytest.raises(UnknownTopicOrPartitionError, match="'nope' does not exist"):
        manager.partition("nope", 0)


def test_a_partition_whose_log_went_offline_answers_kafka_storage_error(manager, monkeypatch):
    disk = DiskFaults(monkeypatch, os.path.join(manager.log_dir, "a-0"))
    manager.apply(image(1, a=(1, {"flush.messages": "1"}), b=(1, {})))
    disk.arm(0, errno.EIO, kinds=("sync",))
    # the batch is written, then the flush after it fails: the log goes offline
    assert manager.leader("a", 0).append_as_leader(batch([b"kept"]), 1) == 0
    disk.clear()
    with pytest.raises(KafkaStorageError, match="a-0 is offline on broker 0: .*EIO") as e:
        manager.leader("a", 0)  # so produce and fetch answer 56 for it alone
    assert e.value.errno == 56
    # one notion: the same error for every lookup, Metadata's included; no timers for it
    assert manager.offline("a", 0) is e.value
    with pytest.raises(KafkaStorageError) as again:
        manager.partition("a", 0)
    assert again.value is e.value
    assert [p.topic for p in manager.partitions()] == ["b"]
    assert manager.leader("b", 0).append_as_leader(batch([b"v"]), 1) == 0
    assert manager.offline("b", 0) is None
    manager.apply(image(2, b=(1, {})))  # the topic deleted: no longer offline here
    assert manager.offline("a", 0) is None
    assert not os.path.exists(os.path.join(manager.log_dir, "a-0"))


def test_a_damaged_segment_takes_its_partition_offline_at_its_first_read(manager, clock):
    manager.apply(image(1, a=(1, {"segment.bytes": "200"}), b=(1, {})))
    for n in range(4):
        manager.leader("a", 0).append_as_leader(batch([b"value %d" % n]), 1)
    manager.leader("b", 0).append_as_leader(batch([b"v"]), 1)
    first = manager.leader("a", 0).log.segments[0].log_path
    manager.close()
    with open(first, "r+b") as f:  # a record byte (under the CRC) of the first batch
        f.seek(70)
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 0x10]))
    again = ReplicaManager(0, manager.log_dir, manager.config, clock)
    try:
        again.apply(image(1, a=(1, {"segment.bytes": "200"}), b=(1, {})))
        assert again.offline("a", 0) is None  # not read yet
        with pytest.raises(KafkaStorageError, match=f"partition a-0 is offline: segment {first}: "
                                                    "batch at position 0 .*stored CRC"):
            again.leader("a", 0).read_slice(0, 1000, True, False)
        with pytest.raises(KafkaStorageError, match="a-0 is offline on broker 0") as e:
            again.leader("a", 0)
        assert again.offline("a", 0) is e.value
        assert again.leader("b", 0).log.read(0, 1000)  # the other partition serves
    finally:
        again.close()
    with open(first, "rb") as f:
        assert f.read(71)[70] == byte[0] ^ 0x10  # the damage is still there, nothing cut


def test_a_clean_shutdown_closes_every_log_together_and_none_recovers(tmp_path, clock,
                                                                      monkeypatch):
    config = BrokerConfig({"broker.id": 0}, data_dir=tmp_path)
    manager = ReplicaManager(0, config["log.dirs"], config, clock)
    manager.apply(image(1, many=(20, {})))
    for n in range(20):
        for value in range(n % 4):
            manager.leader("many", n).append_as_leader(batch([b"v%d" % value]), 1)
    ends = {n: manager.leader("many", n).log.log_end_offset for n in range(20)}
    disk = DiskFaults(monkeypatch, manager.log_dir)
    disk.arm(None, kinds=("sync",))
    manager.close()
    assert len(disk.seen) < 5, disk.seen  # not ten per log: two syncfs cover them
    monkeypatch.undo()
    for n in range(20):
        path = os.path.join(manager.log_dir, f"many-{n}")
        assert os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_MARKER))
        log = PartitionLog(path, manager.config.log_config(), clock=clock)
        assert log.recovery.clean_shutdown and log.recovery.segments_recovered == 0
        assert log.recovery_point == log.log_end_offset == ends[n]
        log.close()


def test_new_partitions_are_created_together_without_an_fsync_each(manager, monkeypatch):
    disk = DiskFaults(monkeypatch, manager.log_dir)
    disk.arm(None, kinds=("sync",))
    assert len(manager.apply(image(1, many=(20, {})))) == 20
    assert len(disk.seen) < 5, disk.seen  # not six per partition: syncfs covers them
    assert [n for n in os.listdir(manager.log_dir) if n.startswith(".")] == []
    for n in range(20):
        path = os.path.join(manager.log_dir, f"many-{n}")
        assert read_topic_id(path) == manager.image.topics["many"].topic_id
        assert not os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_MARKER))
    partition = manager.leader("many", 7)
    assert partition.append_as_leader(batch([b"v"]), 1) == 0
    assert partition.log.read(0, 1000)


def test_partitions_a_crash_left_half_created_are_created_again(manager, clock):
    """A crash while new partitions were staged: the staging directory is deleted at the
    next start (nothing in it was ever written to) and the partitions are created again,
    online; none is taken for a damaged one."""
    manager.apply(image(1, t=(1, {})))
    staging = os.path.join(manager.log_dir, replica_manager.STAGING_PREFIX + "crashed")
    os.mkdir(staging)
    stage_empty_log(os.path.join(staging, "u-0"))  # complete but never renamed into place
    os.mkdir(os.path.join(staging, "u-1"))  # torn: an empty partition.metadata, no log
    open(os.path.join(staging, "u-1", PARTITION_METADATA), "wb").close()
    manager.close()
    again = ReplicaManager(0, manager.log_dir, manager.config, clock)
    try:
        assert not os.path.exists(staging)
        again.apply(image(2, t=(1, {}), u=(2, {})))
        for index in (0, 1):
            assert again.offline("u", index) is None
            assert again.leader("u", index).append_as_leader(batch([b"v"]), 1) == 0
        assert read_topic_id(os.path.join(again.log_dir, "u-1")) == \
            again.image.topics["u"].topic_id
    finally:
        again.close()


def test_a_deleted_topic_is_closed_and_its_directory_removed(manager):
    manager.apply(image(1, a=(1, {}), b=(1, {})))
    manager.leader("a", 0).append_as_leader(batch([b"v"]), 1)
    assert manager.apply(image(2, b=(1, {}))) == {("a", 0)}
    assert not os.path.exists(os.path.join(manager.log_dir, "a-0"))
    assert [p.topic for p in manager.partitions()] == ["b"]


def test_a_topic_recreated_under_the_same_name_starts_a_new_log(manager, tmp_path, clock):
    """The old log's topic id is a deleted topic's (the metadata says so): the directory is
    renamed aside, Kafka's stray log, not deleted, and the new topic starts empty."""
    manager.apply(image(1, t=(1, {})))
    manager.leader("t", 0).append_as_leader(batch([b"old"]), 1)
    manager.close()
    path = os.path.join(manager.log_dir, "t-0")
    with open(os.path.join(path, PARTITION_METADATA), "w") as f:
        f.write("version: 0\ntopic_id: some-older-topic\n")
    again = ReplicaManager(0, manager.log_dir, manager.config, clock)
    try:
        again.apply(dataclasses.replace(image(1, t=(1, {})),
                                        deleted_topic_ids=frozenset({"some-older-topic"})))
        assert again.leader("t", 0).log.log_end_offset == 0
        [aside] = [n for n in os.listdir(manager.log_dir) if n.startswith("t-0.")]
        assert aside.endswith("-stray")
        with open(os.path.join(manager.log_dir, aside, "00000000000000000000.log"),
                  "rb") as f:
            assert b"old" in f.read()
    finally:
        again.close()


def closed_with_two_partitions(manager):
    """t-0 and t-1 with one record each, closed; the files of t-0 as bytes."""
    manager.apply(image(1, t=(2, {})))
    for n in (0, 1):
        manager.leader("t", n).append_as_leader(batch([b"v%d" % n]), 1)
    manager.close()
    path = os.path.join(manager.log_dir, "t-0")
    return {name: open(os.path.join(path, name), "rb").read() for name in os.listdir(path)}


@pytest.mark.parametrize("content", [
    b"version: 0\ntopic_id: \xff\xfe\n",      # not ASCII (a UnicodeDecodeError before)
    b"version: 0\ntopic_id: ab\ncd\n",         # a flipped byte became a newline
    b"version: 0\ntopik_id: abc\n",
    b"version: 9\ntopic_id: abc\n",
    b"version: 0\n",
    b"",
    b"version: 0\ntopic_id: some-other-topic\n",  # a valid id that is no deleted topic's
])
def test_a_damaged_partition_metadata_takes_that_partition_offline_and_keeps_its_data(
        manager, clock, caplog, content):
    before = closed_with_two_partitions(manager)
    metadata = os.path.join(manager.log_dir, "t-0", PARTITION_METADATA)
    with open(metadata, "wb") as f:
        f.write(content)
    again = ReplicaManager(0, manager.log_dir, manager.config, clock)
    try:
        with caplog.at_level(logging.ERROR, logger="replica_proc.replica_manager"):
            assert again.apply(image(1, t=(2, {}))) == {("t", 0), ("t", 1)}
        assert again.leader("t", 1).log.read(0, 1000)  # the other partition serves
        with pytest.raises(KafkaStorageError, match="t-0 is offline on broker 0: .*"
                           + re.escape(metadata)) as raised:
            again.leader("t", 0)
        assert raised.value.errno == 56
        assert again.offline("t", 0) is raised.value and again.offline("t", 1) is None
        [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert metadata in line and "offline" in line
        if b"some-other-topic" in content:
            assert "'some-other-topic' on disk, expected" in line
        path = os.path.join(manager.log_dir, "t-0")
        after = {name: open(os.path.join(path, name), "rb").read() for name in os.listdir(path)}
        assert after == {**before, PARTITION_METADATA: content}  # nothing deleted or written
        again.apply(image(2, u=(1, {})))  # the topic deleted: no longer offline here
        assert again.offline("t", 0) is None
    finally:
        again.close()


def test_a_log_that_fails_to_open_in_an_unexpected_way_takes_only_its_partition_offline(
        manager, clock, caplog, monkeypatch):
    closed_with_two_partitions(manager)

    def open_log(path, *args, **kwargs):
        if path.endswith("t-0"):
            raise struct.error("offset -1375730254 out of range for 1458-byte buffer")
        return PartitionLog(path, *args, **kwargs)
    monkeypatch.setattr(replica_manager, "PartitionLog", open_log)
    again = ReplicaManager(0, manager.log_dir, manager.config, clock)
    try:
        with caplog.at_level(logging.ERROR, logger="replica_proc.replica_manager"):
            again.apply(image(1, t=(2, {})))
        assert again.leader("t", 1).log.read(0, 1000)
        with pytest.raises(KafkaStorageError, match="t-0 is offline on broker 0: error"):
            again.leader("t", 0)
        [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert os.path.join(manager.log_dir, "t-0") in record.getMessage()
        assert record.exc_info is not None  # a bug: its traceback is in the log
    finally:
        again.close()


@pytest.mark.parametrize("content", [
    b"version: 0\ntopic_id: \xff\n",        # unreadable
    b"version: 0\ntopic_id: unknown-id\n",   # a topic the metadata never deleted
    None,                                    # no partition.metadata at all
])
def test_a_stray_directory_the_metadata_does_not_account_for_is_renamed_aside(manager,
                                                                              content):
    stray = os.path.join(manager.log_dir, "gone-0")
    os.makedirs(stray)
    if content is not None:
        with open(os.path.join(stray, PARTITION_METADATA), "wb") as f:
            f.write(content)
    manager.apply(image(1, mine=(1, {})))
    assert not os.path.exists(stray)
    [aside] = [n for n in os.listdir(manager.log_dir) if n.startswith("gone-0.")]
    assert aside.endswith("-stray")


def test_topic_configs_reach_the_log_and_change_with_the_image(manager):
    manager.apply(image(1, t=(1, {"segment.bytes": "5000", "min.insync.replicas": "2"})))
    partition = manager.leader("t", 0)
    assert partition.log.config.segment_bytes == 5000
    assert partition.min_insync_replicas == 2
    manager.apply(image(2, t=(1, {"segment.bytes": "7000"})))
    assert partition.log.config.segment_bytes == 7000
    assert partition.min_insync_replicas == 1


# -- Partition ---------------------------------------------------------------------------------

def test_leadership_epochs_and_the_high_watermark(manager):
    manager.apply(image(1, t=(1, {})))
    partition = manager.leader("t", 0)
    assert partition.append_as_leader(batch([b"a", b"b"]), 1) == 0
    assert partition.high_watermark == partition.log.log_end_offset == 2
    header_epoch = partition.log.read(0, 1000)[12:16]
    assert int.from_bytes(header_epoch, "big") == 0  # the leader epoch, stamped
    partition.check_leader(current_leader_epoch=-1)  # -1: the client did not say
    partition.update(PartitionState("t", 0, 0, 3, (0,), (0,)))
    with pytest.raises(FencedLeaderEpochError, match="older than the current 3"):
        partition.check_leader(2)
    with pytest.raises(UnknownLeaderEpochError, match="newer"):
        partition.check_leader(4)
    partition.check_leader(3)
    partition.append_as_leader(batch([b"c"]), 1)
    assert int.from_bytes(partition.log.read(2, 1000)[12:16], "big") == 3
    partition.update(PartitionState("t", 0, 1, 4, (0,), (1,)))
    with pytest.raises(NotLeaderForPartitionError, match="leader: 1"):
        partition.append_as_leader(batch([b"d"]), 1)


def test_acks_all_needs_min_insync_replicas(manager):
    manager.apply(image(1, t=(1, {"min.insync.replicas": "2"})))
    partition = manager.leader("t", 0)
    with pytest.raises(NotEnoughReplicasError, match="min.insync.replicas=2"):
        partition.append_as_leader(batch([b"a"]), -1)
    assert partition.log.log_end_offset == 0
    partition.append_as_leader(batch([b"a"]), 1)


def test_offsets_for_timestamps_stop_at_the_high_watermark(manager):
    manager.apply(image(1, t=(1, {})))
    partition = manager.leader("t", 0)
    partition.append_as_leader(batch([b"a", b"b"], timestamp=T0), 1)
    assert partition.offset_for(-2) == (-1, 0)
    assert partition.offset_for(-1) == (-1, 2)
    assert partition.offset_for(T0 + 1) == (T0 + 1, 1)
    assert partition.offset_for(T0 + 2) == (-1, -1)


# -- the purgatory -----------------------------------------------------------------------------

def test_a_parked_fetch_completes_on_min_bytes_change_or_deadline():
    purgatory = FetchPurgatory()
    a = DelayedFetch(10.0, 100, 0, [("t", 0), ("t", 1)], "a")
    b = DelayedFetch(5.0, 1, 0, [("t", 1)], "b")
    c = DelayedFetch(20.0, 1, 0, [("u", 0)], "c")
    for fetch in (a, b, c):
        purgatory.park(fetch)
    assert purgatory.next_deadline() == 5.0
    assert purgatory.on_high_watermark(("t", 0), 60) == []
    assert purgatory.on_high_watermark(("t", 1), 50) == [a, b]  # a has 110 of 100, b 50 of 1
    assert len(purgatory) == 1 and purgatory.next_deadline() == 20.0
    assert purgatory.on_high_watermark(("t", 1), 50) == []
    assert purgatory.expire(19.9) == []
    assert purgatory.expire(20.0) == [c]
    assert purgatory.next_deadline() is None


def test_appends_wake_followers_fetches_and_high_watermark_moves_consumers():
    purgatory = FetchPurgatory()
    follower = DelayedFetch(10.0, 1, 0, [("t", 0)], "follower", FOLLOWER)
    consumer = DelayedFetch(10.0, 1, 0, [("t", 0)], "consumer")
    purgatory.park(follower)
    purgatory.park(consumer)
    assert purgatory.has_uncommitted_consumers(("t", 0))
    assert not purgatory.has_consumers(("t", 1))
    assert purgatory.on_append(("t", 0), 10) == [follower]
    assert purgatory.on_append(("t", 0), 10) == []
    assert purgatory.on_high_watermark(("t", 0), 10) == [consumer]
    assert len(purgatory) == 0 and not purgatory.has_consumers(("t", 0))


def test_read_committed_fetches_wait_on_the_last_stable_offset():
    purgatory = FetchPurgatory()
    committed = DelayedFetch(10.0, 1, 0, [("t", 0), ("t", 1)], "committed", STABLE)
    later = DelayedFetch(10.0, 1, 0, [("t", 0)], "later", STABLE)
    purgatory.park(committed, {("t", 0): 5, ("t", 1): 0})
    assert (purgatory.stable_offset(("t", 0)), purgatory.stable_offset(("t", 1))) == (5, 0)
    assert purgatory.has_consumers(("t", 0))
    assert not purgatory.has_uncommitted_consumers(("t", 0))  # the HW's moves are not for it
    assert purgatory.on_high_watermark(("t", 0), 100) == []
    purgatory.park(later, {("t", 0): 5})  # the LSO already watched for the key stays
    assert purgatory.on_stable_offset(("t", 0), 9, 0) == []  # nothing readable came
    assert purgatory.stable_offset(("t", 0)) == 9
    assert purgatory.on_stable_offset(("t", 0), 12, 30) == [committed, later]
    assert purgatory.stable_offset(("t", 0)) is purgatory.stable_offset(("t", 1)) is None
    assert len(purgatory) == 0 and not purgatory.has_consumers(("t", 0))


def test_changes_and_cancellation_remove_parked_fetches():
    purgatory = FetchPurgatory()
    a = DelayedFetch(10.0, 100, 0, [("t", 0), ("t", 1)], "a")
    b = DelayedFetch(10.0, 100, 0, [("t", 2)], "b")
    purgatory.park(a)
    purgatory.park(b)
    assert purgatory.on_change({("t", 0), ("t", 1)}) == [a]  # once, though it watches both
    purgatory.cancel(b)
    purgatory.cancel(b)
    assert len(purgatory) == 0
    assert purgatory.expire(100.0) == []


# -- the log timers ----------------------------------------------------------------------------

def test_retention_runs_at_its_interval_below_the_high_watermark(manager, clock):
    manager.apply(image(1, t=(1, {"segment.bytes": "300", "retention.ms": "1000"})))
    partition = manager.leader("t", 0)
    for _n in range(5):
        partition.append_as_leader(batch([b"x" * 200], timestamp=clock.now), 1)
    segments = len(partition.log.segments)
    timers = LogManager(manager, manager.config, now=0)
    clock.now += 5000  # every sealed segment is past retention.ms
    assert "retention" not in timers.tick(999)
    assert "retention" in timers.tick(1000)
    assert len(partition.log.segments) == 1 < segments
    assert partition.log.log_start_offset == 4


def test_flush_and_recovery_point_checkpoints(manager, clock):
    manager.apply(image(1, t=(1, {"flush.ms": "100"}), u=(1, {})))
    flushed, idle = manager.leader("t", 0), manager.leader("u", 0)
    timers = LogManager(manager, manager.config, now=0)
    for partition in (flushed, idle):
        partition.append_as_leader(batch([b"v"]), 1)
        assert partition.log.recovery_point == 0
    clock.now += 200
    timers.tick(500)  # the flush pass: flush.ms is due for t only
    assert (flushed.log.recovery_point, idle.log.recovery_point) == (1, 0)
    timers.tick(RECOVERY_CHECKPOINT_INTERVAL_MS)  # first checkpoint pass: notes the ends
    assert idle.log.recovery_point == 0
    timers.tick(2 * RECOVERY_CHECKPOINT_INTERVAL_MS)  # idle since: flushed, checkpointed
    assert idle.log.recovery_point == 1


def test_producer_expiration_runs_at_its_interval(tmp_path, clock):
    config = BrokerConfig({"broker.id": 0, "producer.id.expiration.ms": 5000,
                           "producer.id.expiration.check.interval.ms": 2000},
                          data_dir=tmp_path)
    replicas = ReplicaManager(0, config["log.dirs"], config, clock)
    try:
        replicas.apply(image(1, t=(1, {})))
        partition = replicas.leader("t", 0)
        builder = RecordBatchBuilder(0, 1 << 20, producer_id=7, producer_epoch=0,
                                     base_sequence=0)
        builder.append(clock.now, b"k", b"v")
        partition.append_as_leader(bytes(builder.build()), 1)
        timers = LogManager(replicas, config, now=0)
        clock.now += 5000
        assert "producer expiration" not in timers.tick(1999)
        assert 7 in partition.log.producer_state.producers
        assert "producer expiration" in timers.tick(2000)
        assert partition.log.producer_state.producers == {}
    finally:
        replicas.close()


def test_compaction_runs_on_compacted_topics(manager, clock):
    manager.apply(image(1, c=(1, {"cleanup.policy": "compact", "segment.bytes": "200",
                                  "min.cleanable.dirty.ratio": "0.01"})))
    partition = manager.leader("c", 0)
    for n in range(6):
        partition.append_as_leader(batch([b"value-%d" % n], key=b"same-key"), 1)
    before = partition.log.size_in_bytes
    timers = LogManager(manager, manager.config, now=0)
    assert "compaction" in timers.tick(CLEANER_BACKOFF_MS)
    assert partition.log.size_in_bytes < before


def test_compaction_stops_at_the_last_stable_offset(manager, clock):
    """A transaction whose marker is not yet below the high watermark is not stable: the
    segments from its first offset on are not compacted, though below the HW."""
    configs = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
    one_replica = image(1, c=(1, configs))
    info = dataclasses.replace(one_replica.topics["c"], partitions=(
        PartitionState("c", 0, 0, 0, (0, 1), (0, 1)),))  # broker 1 follows
    manager.apply(dataclasses.replace(one_replica, topics={"c": info}))
    partition = manager.leader("c", 0)
    txns = []
    for sequence, key in enumerate((b"x", b"w")):
        txn = RecordBatchBuilder(0, 1 << 20, producer_id=7, producer_epoch=0,
                                 base_sequence=sequence, is_transactional=True)
        txn.append(clock.now, key, b"in the transaction")
        txns.append(bytes(txn.build()))
    for records in (batch([b"a1"], key=b"a"), batch([b"a2"], key=b"a"), None,  # 0, 1
                    *txns, batch([b"x2"], key=b"x"), None,                      # 2, 3, 4
                    batch([b"y"], key=b"y"), None):                             # 5
        if records is None:
            partition.log.roll()
        else:
            partition.append_as_leader(records, 1)
    partition.append_as_leader(build_end_txn_marker(COMMIT, 0, 7, 0, clock.now), 1,
                               origin=ORIGIN_COORDINATOR)                     # 6
    partition.update_follower(1, 6, partition.log.log_end_offset)  # HW 6: the marker is not
    assert (partition.high_watermark, partition.last_stable_offset) == (6, 2)  # below it
    timers = LogManager(manager, manager.config, now=0)
    assert "compaction" in timers.tick(CLEANER_BACKOFF_MS)
    offsets = [h.base_offset for s in partition.log.segments
               for h in iter_batches(s.read_bytes(0, s.size))]
    assert offsets == [1, 2, 3, 4, 5, 6]  # a1 compacted away; x's two versions untouched
