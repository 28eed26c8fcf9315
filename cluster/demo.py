"""`make demo`: the storage and transport layers at work, end to end across processes.

Until the broker exists, this process plays the broker's part with the real pieces:

1. A producer process encodes records into RecordBatch v2 batches (the bulk builder),
   connects to this process over a shared-memory connection and sends each batch as a frame.
2. This process appends every frame to a partition log (offsets stamped in place, CRC
   checked, nothing decoded) and answers with the first offset it assigned.
3. The log is read back and every record checked against what the producer generated.
4. A process appends more batches and is SIGKILLed halfway through writing one; the log is
   opened again and recovery truncates the torn batch, reporting the bytes dropped.
5. ``ringlog dump-log`` shows the first batches; nothing is left in /dev/shm.
"""

import argparse
import logging
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import uuid

import numpy as np

from segments.bulk import build_batches
from segments.log import PartitionLog
from segments.records import iter_records
from shm_ring import Listener, cleanup_stale, connect, list_objects

VALUE_SIZE = 100
BATCH_SIZE = 16384
OFFSET_REPLY = struct.Struct(">q")


def values_for(count, seed):
    """The records the producer sends: reproducible from the seed, so the reader can check."""
    return np.random.default_rng(seed).integers(0, 256, (count, VALUE_SIZE), dtype=np.uint8)


def produce(cluster_id, count, seed):
    """Producer process: encode in bulk, send each batch as one frame, wait for the offsets."""
    batches = build_batches(values_for(count, seed), batch_size=BATCH_SIZE,
                            compression_type="lz4")
    conn = connect(cluster_id, 0, timeout=10)
    try:
        for batch in batches:
            if not conn.send(batch, timeout=10):
                raise TimeoutError("broker did not take a batch within 10 s")
        for _ in batches:
            reply = conn.recv(timeout=10)
            if reply is None:
                raise TimeoutError("no offset from the broker within 10 s")
            conn.release()
    finally:
        conn.close()


def serve(listener, log, expected_batches, timeout):
    """Append every request frame to the log and answer with its first offset."""
    deadline = time.monotonic() + timeout
    appended = 0
    while appended < expected_batches:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {appended} of {expected_batches} batches arrived")
        listener.wait(timeout=0.1)
        listener.accept_pending()
        for conn in listener.ready():
            while (frame := conn.recv()) is not None:
                first, _ = log.append(frame)  # stamps offsets into the ring's memory
                appended += 1
                while not conn.try_send(OFFSET_REPLY.pack(first)):
                    listener.wait(timeout=0.01)
            conn.release()
        listener.reap()
    return appended


def verify(log, count, seed):
    """Read offsets 0..count-1 back through the fetch path and compare every value."""
    expected = values_for(count, seed)
    seen = 0
    while seen < count and seen < log.log_end_offset:
        for record in iter_records(log.read(seen, 1 << 20)):
            if record.offset >= count:
                break
            if record.offset != seen or record.value != expected[seen].tobytes():
                raise AssertionError(f"record {seen} differs at offset {record.offset}")
            seen += 1
    if seen != count:
        raise AssertionError(f"read back {seen} records, produced {count}")
    return seen


def crash_mid_append(log_dir, count, seed):
    """Crashing process: append more batches, then die by SIGKILL halfway through writing one."""
    log = PartitionLog(log_dir)
    batches = build_batches(values_for(count, seed), batch_size=BATCH_SIZE)
    for batch in batches[:-1]:
        log.append(batch)
    with open(log.active_segment.log_path, "ab") as f:
        f.write(batches[-1][: len(batches[-1]) // 2])
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--data-dir", default="demo-data")
    args = parser.parse_args(argv)
    logging.basicConfig(format="   [%(name)s] %(message)s", level=logging.WARNING)

    cluster_id = "demo" + uuid.uuid4().hex[:12]
    shutil.rmtree(args.data_dir, ignore_errors=True)
    log_dir = os.path.join(args.data_dir, "broker-0", "demo-0")
    seed = 20261121
    expected_batches = len(build_batches(values_for(args.records, seed), batch_size=BATCH_SIZE,
                                         compression_type="lz4"))
    listener = Listener(cluster_id, 0)
    producer = None
    try:
        log = PartitionLog(log_dir)
        print(f"ringlog demo: {args.records:,} records of {VALUE_SIZE} B, lz4, "
              f"{expected_batches:,} batches, cluster id {cluster_id}")
        started = time.perf_counter()
        producer = subprocess.Popen(
            [sys.executable, "-c",
             f"from cluster.demo import produce; produce({cluster_id!r}, {args.records}, {seed})"])
        serve(listener, log, expected_batches, timeout=120)
        if producer.wait(timeout=60) != 0:
            raise SystemExit(f"producer process failed with exit code {producer.returncode}")
        elapsed = time.perf_counter() - started
        print(f"1. produced and appended across processes: {args.records / elapsed:,.0f} records/s "
              f"({log.size_in_bytes / elapsed / 1e6:,.0f} MB/s on disk, compressed)")
        started = time.perf_counter()
        seen = verify(log, args.records, seed)
        elapsed = time.perf_counter() - started
        print(f"2. read back {seen:,} records, every value as sent, offsets 0..{seen - 1}: "
              f"{seen / elapsed:,.0f} records/s")
        log.close()
        crash = subprocess.run(
            [sys.executable, "-c", "from cluster.demo import crash_mid_append; "
             f"crash_mid_append({log_dir!r}, 1000, {seed + 1})"], timeout=60)
        log = PartitionLog(log_dir)
        dropped = log.recovery.bytes_dropped
        print(f"3. a writer SIGKILLed mid-batch (exit {crash.returncode}): recovery dropped "
              f"{dropped} bytes of the torn batch; log end offset {log.log_end_offset:,}")
        if crash.returncode != -signal.SIGKILL or dropped == 0:
            raise SystemExit("the staged crash did not leave a torn batch to recover")
        verify(log, args.records, seed)
        segment = log.active_segment.log_path
        log.close()
        print(f"4. ringlog dump-log --files {segment} (first batches):")
        dump = subprocess.run([sys.executable, "-m", "cluster.cli", "dump-log", "--files", segment],
                              capture_output=True, text=True, check=True).stdout.splitlines()
        print("\n".join("   " + line for line in dump[:5]))
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait()
        listener.close()
        cleanup_stale(cluster_id)
    left = list_objects(cluster_id)
    print(f"5. shared-memory objects left: {len(left)}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
