"""Benchmark of the partition log (segments.log.PartitionLog).

Run by hand from /work/main: ``.venv/bin/python -m perf.log_bench [--quick]``.

Measures, with the standard workload (16 KB batches of 100-byte values):

- append MB/s (leader appends: header + CRC-32C validation, offset stamping, index
  maintenance, one pwrite per batch), against the peer ``os.pwrite`` of the same bytes
  into a plain file (the ceiling: what the kernel charges for the copy); once without
  and once with segment rolls;
- read MB/s (``read_slice`` of up to 1 MB + ``read_into`` a preallocated buffer, as the
  broker copies into a ring), against the peer ``os.preadv`` of the same byte ranges;
- open time of a 1 GB log: clean shutdown; unclean with the recovery point current;
  unclean with the recovery point at 0 (every batch validated, indexes rebuilt);
- the once-per-process CRC check of a segment written by an earlier process
  (``Segment.verify``, run by the first read of the segment): its time on a 1 GiB and a
  100 MB segment, and the first read pass of the reopened log against the second.

Logs live under /tmp (a real file system, not /dev/shm) and are deleted at the end. The
files stay in the page cache, so these are CPU and syscall costs, not disk speed. Each
figure is the median of several repeats (the machine has 2 noisy cores).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from segments.checkpoint import OffsetCheckpoint
from segments.log import CLEAN_SHUTDOWN_MARKER, RECOVERY_POINT_CHECKPOINT, PartitionLog
from segments.log_config import LogConfig
from segments.record import batch_descriptor as d
from segments.record.records import RecordBatchBuilder

BATCH_SIZE = 16 * 1024
VALUE = b"x" * 100
MB = 1e6


def make_batch():
    builder = RecordBatchBuilder(0, BATCH_SIZE)
    timestamp = 1_700_000_000_000
    while builder.append(timestamp, None, VALUE) is not None:
        timestamp += 1
    return bytearray(builder.build())


def median(values):
    return statistics.median(values)


def bench_append(root, batch, total_bytes, repeats, config=None):
    count = total_bytes // len(batch)
    log_rates, raw_rates = [], []
    for repeat in range(repeats):
        path = os.path.join(root, f"append-{repeat}")
        log = PartitionLog(path, config or LogConfig(), clock=lambda: 1_700_000_000_000)
        start = time.perf_counter()
        for _ in range(count):
            log.append(batch)
        elapsed = time.perf_counter() - start
        log_rates.append(count * len(batch) / elapsed / MB)
        log.delete()

        raw_path = os.path.join(root, f"raw-{repeat}")
        fd = os.open(raw_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        start = time.perf_counter()
        position = 0
        for _ in range(count):
            position += os.pwrite(fd, batch, position)
        elapsed = time.perf_counter() - start
        raw_rates.append(count * len(batch) / elapsed / MB)
        os.close(fd)
        os.unlink(raw_path)
    return median(log_rates), median(raw_rates), log_rates


def bench_read(log, repeats, max_bytes=1 << 20):
    buf = memoryview(bytearray(2 * max_bytes))
    log_rates, raw_rates = [], []
    for _ in range(repeats):
        ranges = []
        offset = log.log_start_offset
        total = 0
        start = time.perf_counter()
        while offset < log.log_end_offset:
            piece = log.read_slice(offset, max_bytes)
            total += piece.read_into(buf)
            ranges.append((piece.fd, piece.position, piece.size))
            # the next offset: one past the last batch of the slice
            offset = _next_offset(buf, piece.size)
        elapsed = time.perf_counter() - start
        log_rates.append(total / elapsed / MB)
        start = time.perf_counter()
        for fd, position, size in ranges:
            os.preadv(fd, [buf[:size]], position)
        elapsed = time.perf_counter() - start
        raw_rates.append(total / elapsed / MB)
    return median(log_rates), median(raw_rates), log_rates


def _next_offset(buf, size):
    """The next offset after the last batch in buf[:size] (walks batch lengths only)."""
    position = 0
    next_offset = None
    while position < size:
        base, length = d.OFFSET_AND_LENGTH.unpack_from(buf, position)
        delta = d.INT32.unpack_from(buf, position + d.LAST_OFFSET_DELTA_OFFSET)[0]
        next_offset = base + delta + 1
        position += d.LOG_OVERHEAD + length
    return next_offset


def build_log(path, batch, total_bytes):
    log = PartitionLog(path, LogConfig(), clock=lambda: 1_700_000_000_000)
    for _ in range(total_bytes // len(batch)):
        log.append(batch)
    return log


def time_open(path, prepare, repeats):
    times = []
    result = None
    for _ in range(repeats):
        prepare()
        start = time.perf_counter()
        log = PartitionLog(path, LogConfig(), clock=lambda: 1_700_000_000_000)
        times.append(time.perf_counter() - start)
        result = log.recovery
        # leave it as a crash would: no close(), no marker
        for segment in log.segments:
            segment.close()
    return median(times), times, result


def bench_verify(path, segment_bytes, repeats):
    """Median seconds of ``Segment.verify`` on the first segment of the log at ``path``
    (opened after a clean shutdown), and that segment's size."""
    log = PartitionLog(path, LogConfig.from_dict({"segment.bytes": segment_bytes}),
                       clock=lambda: 1_700_000_000_000)
    try:
        segment = log.segments[0]
        times = []
        for _ in range(repeats):
            segment.unverified_end = segment.size
            start = time.perf_counter()
            segment.verify()
            times.append(time.perf_counter() - start)
        return median(times), times, segment.size
    finally:
        log.close()


def bench_first_read(path, repeats):
    """``(first pass MB/s, second pass MB/s)`` of reading the whole log right after a
    clean open: the first pass runs the check of every segment, the second does not."""
    firsts, seconds = [], []
    for _ in range(repeats):
        log = PartitionLog(path, LogConfig(), clock=lambda: 1_700_000_000_000)
        try:
            firsts.append(bench_read(log, 1)[0])
            seconds.append(bench_read(log, 1)[0])
        finally:
            log.close()
    return median(firsts), median(seconds)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    args = parser.parse_args(argv)
    append_bytes = (64 if args.quick else 256) * 1024 * 1024
    log_bytes = (128 if args.quick else 1024) * 1024 * 1024
    repeats = 3 if args.quick else 5

    batch = make_batch()
    root = tempfile.mkdtemp(prefix="ringlog-log-bench-", dir="/tmp")
    try:
        print(f"batch: {len(batch)} bytes, 100-byte values; logs under {root}")
        log_rate, raw_rate, rates = bench_append(root, batch, append_bytes, repeats)
        print(f"append  {log_rate:8.0f} MB/s  (peer os.pwrite {raw_rate:.0f} MB/s, "
              f"ratio {log_rate / raw_rate:.2f}; target >= 700)  "
              f"[{', '.join(f'{r:.0f}' for r in rates)}]")

        rolling = LogConfig.from_dict({"segment.bytes": append_bytes // 4})
        log_rate, raw_rate, rates = bench_append(root, batch, append_bytes, repeats, rolling)
        print(f"append, rolling every {append_bytes // 4 >> 20} MB (fsync of the rolled "
              f"segment in the background)  {log_rate:.0f} MB/s  (peer os.pwrite "
              f"{raw_rate:.0f} MB/s, ratio {log_rate / raw_rate:.2f})  "
              f"[{', '.join(f'{r:.0f}' for r in rates)}]")

        path = os.path.join(root, "big-0")
        log = build_log(path, batch, log_bytes)
        size = log.size_in_bytes
        log_rate, raw_rate, rates = bench_read(log, repeats)
        print(f"read    {log_rate:8.0f} MB/s  (peer os.preadv {raw_rate:.0f} MB/s, "
              f"ratio {log_rate / raw_rate:.2f})  [{', '.join(f'{r:.0f}' for r in rates)}]")
        start = time.perf_counter()
        log.flush()
        print(f"flush (fdatasync + checkpoint) after writing {size / 1e9:.2f} GB: "
              f"{(time.perf_counter() - start) * 1000:.0f} ms (what a roll would cost the "
              f"appending thread if it flushed synchronously)")
        log.close()

        marker = os.path.join(path, CLEAN_SHUTDOWN_MARKER)
        checkpoint = OffsetCheckpoint(os.path.join(path, RECOVERY_POINT_CHECKPOINT))
        name = os.path.basename(path)
        end = log.log_end_offset

        def clean():
            open(marker, "wb").close()

        def unclean_current():
            checkpoint.write({name: end})

        def unclean_from_zero():
            checkpoint.write({name: 0})

        gb = size / 1e9
        for label, prepare, runs in (
                ("clean shutdown", clean, repeats),
                ("unclean, recovery point current", unclean_current, repeats),
                ("unclean, recovery point 0", unclean_from_zero, 3)):
            elapsed, times, result = time_open(path, prepare, runs)
            print(f"open {gb:.2f} GB log, {label}: {elapsed * 1000:8.1f} ms median "
                  f"[{', '.join(f'{t * 1000:.1f}' for t in times)}] "
                  f"(validated {result.segments_recovered} segment(s), "
                  f"dropped {result.bytes_dropped} bytes)"
                  + ("" if label != "unclean, recovery point 0" else
                     f" = {size / elapsed / MB:.0f} MB/s validated"))
        for label, seg_path, seg_bytes in (("1 GiB", path, 1 << 30),
                                           ("100 MB", os.path.join(root, "small-0"),
                                            100 * 1000 * 1000)):
            if seg_path != path:
                small = PartitionLog(seg_path, LogConfig.from_dict({"segment.bytes":
                                                                    seg_bytes}),
                                     clock=lambda: 1_700_000_000_000)
                for _ in range(2 * seg_bytes // len(batch)):
                    small.append(batch)
                small.close()
            elapsed, times, seg_size = bench_verify(seg_path, seg_bytes, repeats)
            print(f"verify a {label} segment ({seg_size / 1e6:.0f} MB, page cache warm): "
                  f"{elapsed * 1000:8.1f} ms median = {seg_size / elapsed / MB:.0f} MB/s "
                  f"[{', '.join(f'{t * 1000:.1f}' for t in times)}]")
        first, second = bench_first_read(path, repeats)
        print(f"read after a clean open: first pass {first:.0f} MB/s (each segment checked "
              f"once), second pass {second:.0f} MB/s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
