"""``ringlog ship`` as a process on a real cluster: writer processes append and rotate
their log files (one by rename, one by copytruncate) while the shipper is SIGKILLed twice
during a rotation and started again on its checkpoint. Every line reaches the topic, and
every duplicate lies after the checkpoint the restarted shipper read (at most one extra
copy per kill)."""
from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from cluster import KafkaConsumer
from cluster.producer.partitioner import partition_for_key
from cluster.supervisor.cluster import Cluster
from cluster.tools.ship import checkpoint
from shm_ring.naming import list_objects
from tests.support.processes import CTX
from tests.support.topics import create_topic

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

WRITERS = 2
LINES = 1500
ROTATE_EVERY = 300
DEADLINE = 90.0
#: The shipper's bound on lines sent and not acknowledged (--max-buffer-bytes): with the
#: checkpoint every 0.1 s, what a kill re-sends stays far below a rotated file read again
#: whole (ROTATE_EVERY lines).
BUFFER_BYTES = 4096


def write_logs(directory, number):
    """A writer: LINES lines to w<number>.log, rotated to w<number>.log.<k> every
    ROTATE_EVERY lines: writer 0 as logrotate's default (rename, then create), the others
    with ``copytruncate`` (copy, then truncate in place; the writer keeps its O_APPEND file)."""
    path = os.path.join(directory, f"w{number}.log")
    out = open(path, "ab", buffering=0)
    for seq in range(LINES):
        if seq and seq % ROTATE_EVERY == 0:
            rotated = f"{path}.{seq // ROTATE_EVERY}"
            if number == 0:
                out.close()
                os.rename(path, rotated)
                out = open(path, "ab", buffering=0)
            else:
                shutil.copyfile(path, rotated)
                os.truncate(path, 0)
        out.write(b"w%d %06d %s\n" % (number, seq, b"x" * (seq % 50)))
        if seq % 20 == 0:
            time.sleep(0.01)
    out.close()


def start_shipper(data, logs, ckpt):
    argv = [sys.executable, "-m", "cluster.tools.cli", "ship", "--bootstrap-server", data,
            "--topic", "logs", "--path", os.path.join(logs, "*.log*"), "--checkpoint", ckpt,
            "--rotate-wait", "0.5", "--scan-interval", "0.1", "--checkpoint-interval", "0.1",
            "--progress-interval", "0", "--max-buffer-bytes", str(BUFFER_BYTES)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(predicate, deadline, what):
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_shipper_killed_during_rotations_delivers_every_line(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    data, ckpt = str(tmp_path / "data"), str(tmp_path / "ship.checkpoint")
    cluster = Cluster(data, brokers=1)
    writers, shippers = [], []
    deadline = time.monotonic() + DEADLINE
    try:
        cluster.start()
        create_topic(cluster, "logs", 2)
        shippers.append(start_shipper(data, str(logs), ckpt))
        writers = [CTX.Process(target=write_logs, args=(str(logs), n)) for n in range(WRITERS)]
        for writer in writers:
            writer.start()
        restored = []  # the checkpoint each restart read
        for rotation in (1, 3):  # kill -9 right after w0's first and third rename
            wait_for(lambda r=rotation: (logs / f"w0.log.{r}").exists(), deadline,
                     f"rotation {rotation}")
            shippers[-1].send_signal(signal.SIGKILL)
            shippers[-1].wait(10)
            restored.append(checkpoint.load(ckpt))
            shippers.append(start_shipper(data, str(logs), ckpt))
        for writer in writers:
            writer.join(max(1.0, deadline - time.monotonic()))
            assert writer.exitcode == 0
        sizes = sum(os.path.getsize(p) for p in logs.iterdir())

        def shipped():
            entries = checkpoint.load(ckpt).values() if os.path.exists(ckpt) else []
            return sum(e.position for e in entries) >= sizes
        # every file's whole size is acknowledged (a copytruncate copy goes on from its
        # truncated file's position; finished files stay in the checkpoint while the glob
        # finds them); then what the consumer reads is checked
        wait_for(shipped, deadline, "the checkpoint to cover every file")
        shippers[-1].send_signal(signal.SIGTERM)
        out, err = shippers[-1].communicate(timeout=30)
        assert shippers[-1].returncode == 0, err.decode()
        assert b"checkpointed" in out
        copies = collections.Counter()
        positions = {}
        keys_in_partition = set()
        with KafkaConsumer("logs", bootstrap_servers=data, auto_offset_reset="earliest",
                           consumer_timeout_ms=3000) as consumer:
            for record in consumer:
                headers = dict(record.headers)
                where = (headers["log.file.id"].decode(), int(headers["log.offset"]))
                copies[record.value] += 1
                positions[record.value] = where
                keys_in_partition.add((record.key, record.partition))
    finally:
        for shipper in shippers:
            if shipper.poll() is None:
                shipper.kill()
                shipper.communicate(timeout=10)
        for writer in writers:
            if writer.is_alive():
                writer.kill()
                writer.join(5)
        cluster.stop()
    assert list_objects(cluster.cluster_id) == []
    expected = {b"w%d %06d %s" % (n, seq, b"x" * (seq % 50))
                for n in range(WRITERS) for seq in range(LINES)}
    assert set(copies) == expected
    # each file's lines went where the default partitioner puts their key ({file})
    assert {(key, partition_for_key(key, 2)) for key, _ in keys_in_partition} == \
        keys_in_partition
    assert max(copies.values()) <= 1 + len(restored)
    duplicates = sum(count - 1 for count in copies.values())
    assert duplicates < ROTATE_EVERY, duplicates  # no rotated file or copy read twice
    for value, count in copies.items():
        if count > 1:  # re-sent: it followed what a restart's checkpoint held
            fid, position = positions[value]
            assert any(fid not in r or r[fid].position <= position for r in restored), value
