"""Controller failover from a hung controller (``controller_lock``): a standby takes over
from a controller whose heartbeat is older than broker.session.timeout.ms though it still
holds its flock; the deposed controller resigns without writing; two standbys displace a
controller once; the page and the metadata log are fenced by the controller epoch.

Controllers and brokers live in this process (flock locks belong to open file
descriptions); a "stopped" controller is one the test does not poll and whose broker does
not beat. The clock is ``env.now``, the heartbeats' too.
"""
from __future__ import annotations

import json
import os

import pytest

from cluster.errors import KafkaStorageError, NotControllerError
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import HeartbeatReader
from cluster.metadata.model import BrokerInfo
from replica_proc.controller import metadata_log as mr
from replica_proc.controller.controller_lock import ControllerLock, Holder, read_holder
from replica_proc.controller.metadata_log import MetadataLog
from segments.log import CLEAN_SHUTDOWN_MARKER
from segments.record.batch_header import iter_batches
from segments.record.records import RecordBatch

SECOND_NS = 1_000_000_000
TIMEOUT_MS = 2500
CONFIG = {"broker.session.timeout.ms": TIMEOUT_MS}


def beat(env, *brokers):
    for b in brokers:
        env.brokers[b].beat(int(env.now * SECOND_NS))


def tick(env, controllers, beating):
    """One second on: the brokers ``beating`` beat, then ``controllers`` poll."""
    env.now += 1.0
    beat(env, *beating)
    for controller in controllers:
        controller.poll(env.now)


def segments(env):
    directory = os.path.join(env.data_dir, dd.METADATA_LOG_DIR)
    return [os.path.join(directory, name) for name in sorted(os.listdir(directory))
            if name.endswith(".log")]


def batches(env, paths=None):
    """(controller epoch of the batch, its records) for every batch of the metadata log
    (or of the segment files ``paths``), read from its files."""
    found = []
    for path in segments(env) if paths is None else paths:
        with open(path, "rb") as file:
            data = file.read()
        for header in iter_batches(data):
            batch = RecordBatch(data, header.position)
            batch.validate()
            found.append((header.partition_leader_epoch,
                          [json.loads(r.value) for r in batch]))
    return found


@pytest.fixture
def trio(env):
    """Brokers 0, 1, 2 beating; their controllers, broker 0's active; topic t (3
    partitions, RF 3) with every replica in the ISR."""
    for b in range(3):
        env.start_broker(b)
    beat(env, 0, 1, 2)
    controllers = [env.controller(b, **CONFIG) for b in range(3)]
    tick(env, controllers, [0, 1, 2])
    assert [c.active for c in controllers] == [True, False, False]
    assert controllers[0].create_topics(
        [{"name": "t", "num_partitions": 3, "replication_factor": 3}]) == {"t": (0, None)}
    return controllers


def take_over(env, controllers):
    """Broker 0 (the controller) stops; the others go on until broker 1 takes over."""
    for _ in range(TIMEOUT_MS // 1000):
        tick(env, controllers[1:], [1, 2])
        assert not controllers[1].active  # within the session timeout: no takeover
    tick(env, controllers[1:], [1, 2])
    assert controllers[1].active


def test_a_standby_takes_over_from_a_controller_whose_heartbeat_is_stale(env, trio):
    c0, c1, c2 = trio
    led = [p for p in c0.image.topics["t"].partitions if p.leader == 0][0]
    take_over(env, trio)
    assert [c.active for c in trio] == [True, True, False]  # c0 is stopped: it cannot know
    assert c1.epoch == 2
    assert read_holder(env.data_dir) == Holder(1, 2)
    assert len(segments(env)) == 2  # c1 writes on in a new segment
    image = env.page.read()
    assert image.controller_id == 1 and image == c1.image
    assert not image.brokers[0].alive  # fenced by the same heartbeat
    moved = image.partition("t", led.partition)
    assert moved.leader not in (-1, 0) and moved.leader_epoch == led.leader_epoch + 1
    # metadata changes work under the new controller; the other standby stays one
    assert c1.create_topics([{"name": "u", "num_partitions": 1}]) == {"u": (0, None)}
    tick(env, [c2], [1, 2])
    assert not c2.active


def test_the_resumed_controller_resigns_without_writing_and_follows(env, trio):
    c0, c1, c2 = trio
    take_over(env, trio)
    end = c1.image.version
    tick(env, trio, [0, 1, 2])  # broker 0 runs again: its first poll finds it lost
    assert [c.active for c in trio] == [False, True, False]
    assert c0.image is None
    with pytest.raises(NotControllerError, match="is not the active controller"):
        c0.create_topics([{"name": "late", "num_partitions": 1}])
    assert env.page.read().controller_id == 1
    tick(env, trio, [0, 1, 2])
    image = env.page.read()
    assert image.brokers[0].alive  # its heartbeats resumed: alive again, as a broker
    assert image.version == end + 1  # that broker record, and nothing of c0's
    epochs = [epoch for epoch, _ in batches(env)]
    assert epochs == sorted(epochs) and epochs[0] == 1 and epochs[-1] == 2
    controller_records = [r for _, records in batches(env) for r in records
                          if r["type"] == mr.CONTROLLER]
    assert controller_records == [mr.controller_record(0, 1), mr.controller_record(1, 2)]
    # the new controller resigns cleanly: the old one may be elected again (epoch 3)
    c1.close()
    tick(env, [c0], [0, 1, 2])
    assert c0.active and c0.epoch == 3 and env.page.read().controller_id == 0


def test_a_deposed_controller_is_fenced_at_its_next_write(env, trio):
    c0, c1, _ = trio
    take_over(env, trio)
    before = batches(env)
    # c0 resumes in the middle of a request, before any poll: the write is refused
    with pytest.raises(NotControllerError, match="another broker took over"):
        c0.create_topics([{"name": "late", "num_partitions": 1}])
    assert not c0.active
    assert batches(env) == before
    assert "late" not in env.page.read().topics
    c0.close()  # a deposed controller's close leaves no clean-shutdown marker either
    assert not os.path.exists(os.path.join(env.data_dir, dd.METADATA_LOG_DIR,
                                           CLEAN_SHUTDOWN_MARKER))
    assert c1.create_topics([{"name": "late", "num_partitions": 1}]) == {"late": (0, None)}


def test_a_page_overwritten_by_the_deposed_controller_is_published_again(env, trio):
    c0, c1, _ = trio
    old = c0.image
    take_over(env, trio)
    env.page.publish(old)  # c0 finishing a publish it began before it stopped
    assert env.page.read().controller_id == 0
    tick(env, [c1], [1, 2])
    assert env.page.read() == c1.image and c1.image.controller_id == 1


def test_two_standbys_judging_the_same_stale_controller_displace_it_once(env, trio):
    c0, _, _ = trio
    reader = HeartbeatReader(env.data_dir)
    locks = [ControllerLock(env.data_dir, b, reader, TIMEOUT_MS * 1_000_000) for b in (1, 2)]
    try:
        env.now += 3.0
        beat(env, 1, 2)
        now_ns = int(env.now * SECOND_NS)
        first = locks[0].claim(now_ns)
        assert first is not None and first.displaced == Holder(0, 1)
        with first:
            assert locks[1].claim(now_ns) is None  # the takeover lock is taken
            first.install(2)
        assert locks[0].still_held() and read_holder(env.data_dir) == Holder(1, 2)
        # the second standby judged broker 0's generation; it is no longer at the path,
        # and the one there names broker 1, which beats
        assert locks[1].claim(now_ns) is None
        assert locks[0].still_held()
    finally:
        for lock in locks:
            lock.close()
        reader.close()


def test_a_takeover_epoch_passes_the_replaced_generations_too(env, trio):
    """A holder may stop after installing its generation and before its ``controller``
    record reaches the log: its successor's epoch is still a new one."""
    c0, c1, _ = trio
    c0.close()
    reader = HeartbeatReader(env.data_dir)
    lock = ControllerLock(env.data_dir, 0, reader, TIMEOUT_MS * 1_000_000)
    try:
        claim = lock.claim(int(env.now * SECOND_NS))  # the lock is free: c0 closed
        with claim:
            assert claim.displaced is None and claim.previous == Holder(0, 1)
            assert claim.next_epoch(1) == 2
            claim.install(5)  # and broker 0 stops here, before it writes
        take_over(env, trio)
        assert c1.epoch == 6 and read_holder(env.data_dir) == Holder(1, 6)
        assert [r["epoch"] for _, records in batches(env) for r in records
                if r["type"] == mr.CONTROLLER] == [1, 6]
    finally:
        lock.close()
        reader.close()


def test_a_controller_that_never_beat_is_not_taken_over(env):
    env.start_broker(0)
    env.start_broker(1)
    c0, c1 = env.controller(0, **CONFIG), env.controller(1, **CONFIG)
    env.poll(c0)
    for _ in range(5):  # no broker ever beats: broker 0 is judged by its lock alone
        env.poll(c1)
    assert c0.active and not c1.active
    assert read_holder(env.data_dir) == Holder(0, 1)


def test_a_dead_controller_is_replaced_through_its_free_lock(env):
    env.start_broker(0)
    env.start_broker(1)
    c0, c1 = env.controller(0, **CONFIG), env.controller(1, **CONFIG)
    env.poll(c0)
    env.poll(c1)
    assert not c1.active
    c0.close()
    env.poll(c1)
    assert c1.active and c1.epoch == 2 and read_holder(env.data_dir) == Holder(1, 2)
    assert not os.path.exists(os.path.join(env.data_dir, dd.CONTROLLER_LOCK_NEXT))


def test_replay_refuses_a_batch_of_an_older_controller_after_a_newer_one(env):
    metadata_log = MetadataLog(env.data_dir)
    try:
        metadata_log.append([mr.controller_record(0, 1)], 1)
        metadata_log.append([mr.controller_record(1, 2)], 2)
        assert metadata_log.replay(env.cluster_id)[1] == 2
        metadata_log.append([mr.broker_record(BrokerInfo(0, 1, True))], 1)
        with pytest.raises(KafkaStorageError,
                           match="controller epoch 1 after 2: a deposed controller wrote"):
            metadata_log.replay(env.cluster_id)
    finally:
        metadata_log.close()


def test_a_late_write_of_a_deposed_controller_lands_past_the_sealed_segment(env):
    """The race that remains (``controller_lock``): the deposed controller passed its
    checks, then stopped before its write; the successor's records survive it, and the
    log refuses to replay rather than mix the two."""
    deposed = MetadataLog(env.data_dir)
    deposed.append([mr.controller_record(0, 1)], 1)
    assert not deposed.written_elsewhere()
    successor = MetadataLog(env.data_dir)  # opened while the deposed one is stopped
    image, epoch = successor.replay(env.cluster_id)
    assert (image.controller_id, epoch) == (0, 1)
    successor.start_segment()
    assert deposed.written_elsewhere()  # its fence would say so
    successor.append([mr.controller_record(1, 2)], 2)
    deposed.append([mr.topic_record("late", "id", {})], 1)  # the write past its checks
    deposed.abandon()
    successor.append([mr.topic_record("kept", "id2", {})], 2)
    assert successor.replay(env.cluster_id)[0].controller_id == 1
    successor.close()
    first, second = segments(env)
    assert [(epoch, [r["type"] for r in records]) for epoch, records in batches(env)] == [
        (1, [mr.CONTROLLER]), (1, [mr.TOPIC]),  # the first segment, with the late batch
        (2, [mr.CONTROLLER]), (2, [mr.TOPIC])]  # the successor's, whole
    assert len(batches(env, [second])) == 2
    with pytest.raises(KafkaStorageError,
                       match=f"{os.path.basename(second)}: .*base offset 1, expected 2"):
        MetadataLog(env.data_dir).replay(env.cluster_id)
