"""Controller failover from a hung controller, with real broker processes
(``replica_proc.controller.controller_lock``).

Three brokers (``tests.support.trio``: broker 0 the controller, a session timeout of
1.5 s, topic ``r`` with full ISRs). The controller broker, which also leads a partition of
``r``, is SIGSTOPped while it holds its flock: another broker takes over, the partition
gets a new leader, topics can be created. After SIGCONT the old controller resigns
without writing and serves as a broker again (it rejoins the partition's ISR as a
follower, through the new controller), one controller is active, and the metadata log
replays with controller epochs that only grow.
"""
from __future__ import annotations

import json
import os
import signal

import pytest

from cluster.errors import NotControllerError
from cluster.metadata import data_dir as dd
from replica_proc.controller import metadata_log as mr
from replica_proc.controller.controller_lock import Holder, read_holder
from replica_proc.controller.metadata_log import MetadataLog
from segments.record.batch_header import iter_batches
from segments.record.records import RecordBatch
from shm_ring import list_objects
from tests.support.broker import Client, create_topics_request
from tests.support.trio import Trio
from tests.support.waits import wait_for

pytestmark = pytest.mark.multiprocess


@pytest.fixture
def trio(tmp_path):
    cluster = Trio(tmp_path)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
    assert list_objects(cluster.cluster_id) == []


def create_topic(trio, broker_id, name):
    """The error code of creating ``name`` (1 partition) through broker ``broker_id``."""
    client = Client(trio.cluster_id, broker_id)
    try:
        return client.call(create_topics_request({name: (1, {})})).topics[0].error_code
    finally:
        client.close()


def log_batches(data_dir):
    """(partitionLeaderEpoch — the controller epoch —, records) of every batch of the
    metadata log, read from its files."""
    directory = os.path.join(data_dir, dd.METADATA_LOG_DIR)
    found = []
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".log")):
        with open(os.path.join(directory, name), "rb") as file:
            data = file.read()
        for header in iter_batches(data):
            batch = RecordBatch(data, header.position)
            batch.validate()
            found.append((header.partition_leader_epoch,
                          [json.loads(record.value) for record in batch]))
    return found


def test_a_stopped_controller_is_replaced_and_resigns_when_it_resumes(trio):
    image = trio.image()
    assert image.controller_id == 0 and read_holder(trio.data_dir) == Holder(0, 1)
    led = next(p for p in image.topics["r"].partitions if p.leader == 0)
    old = trio.brokers[0]
    os.kill(old.pid, signal.SIGSTOP)

    def taken_over():
        now = trio.image()
        state = now.partition("r", led.partition)
        return (now.controller_id in (1, 2) and not now.brokers[0].alive
                and state.leader not in (-1, 0))
    wait_for(taken_over, f"a new controller and a new leader of r-{led.partition}")
    successor = trio.image().controller_id
    assert read_holder(trio.data_dir) == Holder(successor, 2)
    assert trio.image().partition("r", led.partition).leader_epoch == led.leader_epoch + 1
    assert create_topic(trio, successor, "while-stopped") == 0
    wait_for(lambda: "while-stopped" in trio.image().topics, "the new topic in the image")

    os.kill(old.pid, signal.SIGCONT)
    wait_for(lambda: "no longer the controller (epoch 1)" in old.log(),
             "the old controller to resign")
    assert "resigning without writing" in old.log()
    wait_for(lambda: trio.image().brokers[0].alive, "broker 0 alive again")
    # broker 0 follows now: it catches up and its leader adds it back to the ISR, through
    # the new controller
    wait_for(lambda: 0 in trio.image().partition("r", led.partition).isr,
             f"broker 0 back in the ISR of r-{led.partition}")
    assert old.popen.poll() is None
    # one active controller: the old one answers NOT_CONTROLLER, the new one creates
    assert create_topic(trio, 0, "after") == NotControllerError.errno
    assert create_topic(trio, successor, "after") == 0
    image = trio.image()
    assert image.controller_id == successor and "after" in image.topics
    assert read_holder(trio.data_dir) == Holder(successor, 2)

    for broker in trio.brokers:
        broker.kill()
    batches = log_batches(trio.data_dir)
    epochs = [epoch for epoch, _ in batches]
    assert epochs == sorted(epochs) and epochs[0] == 1 and epochs[-1] == 2
    metadata_log = MetadataLog(trio.data_dir)
    try:
        replayed, epoch = metadata_log.replay(trio.cluster_id)
    finally:
        metadata_log.close()
    assert epoch == 2 and replayed.controller_id == successor
    assert {"r", "while-stopped", "after"} <= replayed.topics.keys()
    controllers = [record for _, records in batches for record in records
                   if record["type"] == mr.CONTROLLER]
    assert controllers == [mr.controller_record(0, 1), mr.controller_record(successor, 2)]

