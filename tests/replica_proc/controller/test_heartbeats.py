"""Broker liveness by heartbeats: a broker whose heartbeat is older than
broker.session.timeout.ms is fenced (not alive: its leaderships move, it leaves the ISRs)
until its heartbeats resume; the heartbeat file and the thread that writes it."""
from __future__ import annotations

import os

from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import HEARTBEAT, HeartbeatReader
from replica_proc.controller.controller import IsrChange
from replica_proc.heartbeat import HeartbeatThread
from tests.support.waits import wait_for

SECOND_NS = 1_000_000_000


def beat(env, *brokers):
    for b in brokers:
        env.brokers[b].beat(int(env.now * SECOND_NS))


def test_a_broker_without_heartbeats_is_fenced_until_they_resume(env):
    for b in range(3):
        env.start_broker(b)
    beat(env, 0, 1, 2)  # at 0 s
    controller = env.controller(0, **{"broker.session.timeout.ms": 2500})
    env.poll(controller)  # at 1 s
    controller.create_topics([{"name": "t", "num_partitions": 3, "replication_factor": 3}])
    led = [p for p in controller.image.topics["t"].partitions if p.leader == 2][0]
    assert controller.alter_partition(2, [IsrChange(
        "t", led.partition, led.leader_epoch, led.partition_epoch, led.replicas)])[
        ("t", led.partition)][0] == 0
    # broker 2 stops beating; the others go on
    beat(env, 0, 1)
    image = env.poll(controller)  # at 2 s its heartbeat is 2 s old: within the timeout
    assert image.brokers[2].alive and image.partition("t", led.partition).leader == 2
    beat(env, 0, 1)
    image = env.poll(controller)  # at 3 s it is 3 s old: fenced
    assert not image.brokers[2].alive
    state = image.partition("t", led.partition)
    assert state.leader != 2 and 2 not in state.isr
    assert state.leader_epoch == led.leader_epoch + 1
    assert image.live_brokers() == [0, 1]
    # the heartbeats resume: alive again (it rejoins the ISR through its leader, later)
    beat(env, 0, 1, 2)
    image = env.poll(controller)
    assert image.brokers[2].alive and image.live_brokers() == [0, 1, 2]


def test_a_broker_that_never_beat_is_judged_by_its_lock_and_state(env):
    env.start_broker(0)
    env.start_broker(1)
    controller = env.controller(0, **{"broker.session.timeout.ms": 1000})
    for _ in range(3):
        image = env.poll(controller)
    assert image.live_brokers() == [0, 1]


def test_the_heartbeat_file_holds_the_last_beat(env):
    registration = env.start_broker(4)
    reader = HeartbeatReader(env.data_dir)
    try:
        assert reader.last(4) is None
        registration.beat(123 * SECOND_NS)
        assert reader.last(4) == 123 * SECOND_NS
        registration.beat(124 * SECOND_NS)
        assert reader.last(4) == 124 * SECOND_NS
        assert reader.older_than(4, 125 * SECOND_NS)
        assert not reader.older_than(4, 124 * SECOND_NS)
        path = os.path.join(dd.broker_dir(env.data_dir, 4), dd.BROKER_HEARTBEAT)
        assert os.path.getsize(path) == HEARTBEAT.size
        assert os.stat(path).st_mode & 0o777 == dd.FILE_MODE
    finally:
        reader.close()
        reader.close()


def test_the_heartbeat_thread_beats_until_closed(env):
    registration = env.start_broker(5)
    ticks = iter(range(1, 1_000_000))
    reader = HeartbeatReader(env.data_dir)
    thread = HeartbeatThread(registration, 0.001, clock=lambda: next(ticks))
    try:
        thread.start()
        assert reader.last(5) >= 1  # the first beat is written before start returns
        wait_for(lambda: reader.last(5) >= 3, "three heartbeats")
    finally:
        thread.close()
        thread.close()
    last = reader.last(5)
    assert reader.last(5) == last
    reader.close()
