"""Two-process throughput of the shared-memory ring against its peers, in one run.

    .venv/bin/python -m perf.ring_bench [--repeats 5] [--json out.json]

One writer process sends N identical frames, one call per frame; the reader (this process)
takes them. Frames of 100 B (ring of 256 KB) and 64 KB (ring of 4 MB). Transports, all
measured now on this machine:

* ring write:      RingWriter.write per frame: commit, full fence, look at the reader's parked
                   flag (the strict wake-up check) -> RingReader.read, a zero-copy view
* ring burst:      Ring.try_write per frame (no wake-up check) and one RingWriter.wake() per
                   64 frames (DESIGN: one wake-up per batch) -> the same reader
* ring+copy:       ring write, and the reader copies each frame out (bytes(view)) as the peers
                   hand it bytes
* ring spin:       Ring.try_write / Ring.read spinning, no wake-up at all (the floor)
* mp.Queue:        multiprocessing.Queue put / get
* mp.Pipe:         multiprocessing.Pipe send_bytes / recv_bytes
* os.pipe:         os.write per frame; the reader reads the byte stream in 1 MB chunks

Elapsed time runs from the writer's first write to the reader's last read (perf_counter is
CLOCK_MONOTONIC, shared by processes). Figures are medians of the repeats. Writer and reader
are pinned to different CPUs when there are two. Also printed: the memcpy speed of this
machine, copying 64 KB blocks over a working set as large as the ring (numpy and memoryview).
Note "ring write" readers do not touch the payload (the broker writes the view to a file), so
at 64 KB it measures the writer's copy into the ring; "ring+copy" also pays the reader's copy.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
import uuid

import numpy as np

from shm_ring import ring_descriptor as rd
from shm_ring.naming import cleanup_stale
from shm_ring.shared_ring import SharedRing

CTX = multiprocessing.get_context("fork")
SMALL, LARGE = 100, 64 * 1024
FRAMES = {  # frames per trial, sized for roughly half a second each
    ("ring write", SMALL): 800_000, ("ring burst", SMALL): 1_000_000,
    ("ring+copy", SMALL): 800_000, ("ring spin", SMALL): 1_000_000,
    ("mp.Queue", SMALL): 100_000, ("mp.Pipe", SMALL): 250_000, ("os.pipe", SMALL): 500_000,
    ("ring write", LARGE): 60_000, ("ring burst", LARGE): 60_000, ("ring+copy", LARGE): 30_000,
    ("ring spin", LARGE): 60_000, ("mp.Queue", LARGE): 6_000, ("mp.Pipe", LARGE): 10_000,
    ("os.pipe", LARGE): 10_000,
}
TRANSPORTS = ["ring write", "ring burst", "ring+copy", "ring spin", "mp.Queue", "mp.Pipe",
              "os.pipe"]
CAPACITY = {SMALL: 1 << 18, LARGE: 1 << 22}
"""Ring data bytes per frame size: small frames like a ring that stays in L2."""
BURST = 64
"""Frames per wake-up in "ring burst"."""
TIMEOUT = 60.0


def _pin(cpu: int) -> None:
    if len(os.sched_getaffinity(0)) >= 2:
        os.sched_setaffinity(0, {cpu})


class Trial:
    """One transport, one frame size: a writer process and the reader loop in this process."""

    def __init__(self, transport: str, size: int, count: int, capacity: int) -> None:
        self.transport, self.size, self.count, self.capacity = transport, size, count, capacity
        self.frame = os.urandom(size)
        self.start = CTX.Value("d", 0.0, lock=False)
        self.go = CTX.Event()

    def run(self) -> float:
        """Seconds from the first write to the last read."""
        setup = {"mp.Queue": self._setup_queue, "mp.Pipe": self._setup_mp_pipe,
                 "os.pipe": self._setup_os_pipe}.get(self.transport, self._setup_ring)
        writer_side, reader_loop, teardown = setup()
        writer = CTX.Process(target=self._writer, args=(writer_side,), daemon=True)
        writer.start()
        old_affinity = os.sched_getaffinity(0)
        try:
            _pin(1)
            self.go.set()
            reader_loop()
            end = time.perf_counter()
            writer.join(TIMEOUT)
            if writer.exitcode != 0:
                raise RuntimeError(f"{self.transport} writer exited with {writer.exitcode}")
            return end - self.start.value
        finally:
            os.sched_setaffinity(0, old_affinity)
            if writer.is_alive():
                writer.kill()
                writer.join(TIMEOUT)
            teardown()

    def _writer(self, write_all) -> None:
        _pin(0)
        self.go.wait(TIMEOUT)
        write_all()

    # -- ring ---------------------------------------------------------------------------

    def _setup_ring(self):
        cluster = "bench" + uuid.uuid4().hex[:12]
        ring = SharedRing.create(cluster, "bench", self.capacity)
        frame, count, start = self.frame, self.count, self.start
        spin = self.transport == "ring spin"
        burst = self.transport == "ring burst"
        copy = self.transport == "ring+copy"
        aligned = rd.align(self.size + rd.FRAME_HEADER_LENGTH)
        release_every = max(1, min(64, self.capacity // (8 * aligned)))

        def write_all() -> None:
            writer = SharedRing.open(cluster, "bench").writer()
            start.value = time.perf_counter()
            if spin:
                try_write = writer.ring.try_write
                sent = 0
                while sent < count:
                    if try_write(frame):
                        sent += 1
            elif burst:
                try_write, write, wake = writer.ring.try_write, writer.write, writer.wake
                for sent in range(1, count + 1):
                    if not try_write(frame):
                        write(frame)  # full: wakes the reader, waits for room
                    if sent % BURST == 0:
                        wake()
                wake()
            else:
                write = writer.write
                for _ in range(count):
                    write(frame)

        reader = ring.reader()

        def read_all() -> None:
            read, release = reader.ring.read, reader.ring.release
            if not spin:
                blocking_read, release = reader.read, reader.release
            received = 0
            total = 0
            while received < count:
                view = read()
                if view is None:
                    release()
                    if spin:
                        continue
                    view = blocking_read(TIMEOUT)
                total += len(bytes(view)) if copy else len(view)
                received += 1
                if received % release_every == 0:
                    release()
            release()
            assert total == count * self.size

        def teardown() -> None:
            ring.close()
            ring.unlink()
            cleanup_stale(cluster)
        return write_all, read_all, teardown

    # -- peers ----------------------------------------------------------------------------

    def _setup_queue(self):
        queue = CTX.Queue()
        frame, count, start = self.frame, self.count, self.start

        def write_all() -> None:
            put = queue.put
            start.value = time.perf_counter()
            for _ in range(count):
                put(frame)
            queue.close()
            queue.join_thread()

        def read_all() -> None:
            get = queue.get
            total = 0
            for _ in range(count):
                total += len(get(timeout=TIMEOUT))
            assert total == count * self.size
        return write_all, read_all, queue.close

    def _setup_mp_pipe(self):
        receiver, sender = CTX.Pipe(duplex=False)
        frame, count, start = self.frame, self.count, self.start

        def write_all() -> None:
            send = sender.send_bytes
            start.value = time.perf_counter()
            for _ in range(count):
                send(frame)

        def read_all() -> None:
            recv = receiver.recv_bytes
            total = 0
            for _ in range(count):
                total += len(recv())
            assert total == count * self.size

        def teardown() -> None:
            receiver.close()
            sender.close()
        return write_all, read_all, teardown

    def _setup_os_pipe(self):
        read_fd, write_fd = os.pipe()
        frame, count, start = self.frame, self.count, self.start

        def write_all() -> None:
            os.close(read_fd)
            write = os.write
            start.value = time.perf_counter()
            for _ in range(count):
                write(write_fd, frame)  # blocking pipe: writes all of it

        def read_all() -> None:
            buffer = bytearray(1 << 20)
            readv = os.readv
            remaining = count * self.size
            while remaining:
                got = readv(read_fd, [buffer])
                if not got:
                    raise RuntimeError("os.pipe writer went away early")
                remaining -= got

        def teardown() -> None:
            os.close(read_fd)
            os.close(write_fd)
        return write_all, read_all, teardown


def memcpy_gbps(working_set: int, repeats: int) -> tuple[float, float]:
    """Copy speed of 64 KB blocks over a working set of the given size, median GB/s: with numpy
    (np.copyto, about 1 us of call overhead per block) and with memoryview slice assignment
    (what the ring's writer does)."""
    source = np.frombuffer(os.urandom(working_set), dtype=np.uint8)
    target = np.empty_like(source)
    source_view, target_view = memoryview(source), memoryview(target)
    starts = range(0, working_set - LARGE + 1, LARGE)
    rounds = max(1, (2 << 30) // working_set)  # about 2 GB copied per repeat
    speeds: dict[str, list[float]] = {"numpy": [], "memoryview": []}
    for _ in range(repeats):
        began = time.perf_counter()
        for _ in range(rounds):
            for start in starts:
                np.copyto(target[start: start + LARGE], source[start: start + LARGE])
        speeds["numpy"].append(rounds * len(starts) * LARGE / (time.perf_counter() - began))
        began = time.perf_counter()
        for _ in range(rounds):
            for start in starts:
                target_view[start: start + LARGE] = source_view[start: start + LARGE]
        speeds["memoryview"].append(rounds * len(starts) * LARGE / (time.perf_counter() - began))
    return (statistics.median(speeds["numpy"]) / 1e9,
            statistics.median(speeds["memoryview"]) / 1e9)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply frame counts")
    args = parser.parse_args(argv)

    results: dict = {"cpus": os.cpu_count(), "repeats": args.repeats, "rows": []}
    numpy_speed, view_speed = memcpy_gbps(CAPACITY[LARGE], args.repeats)
    results["memcpy_gbps"] = {"numpy": numpy_speed, "memoryview": view_speed}
    copy_speed = max(numpy_speed, view_speed)
    print(f"ring_bench: {os.cpu_count()} CPUs, medians of {args.repeats}")
    print(f"memcpy of 64 KB blocks over {CAPACITY[LARGE] >> 10} KB, one process:"
          f" numpy {numpy_speed:.1f} GB/s, memoryview {view_speed:.1f} GB/s")
    for size in (SMALL, LARGE):
        print(f"\nframes of {size} B, ring of {CAPACITY[size] >> 10} KB")
        print(f"  {'transport':16s} {'frames/s':>12s} {'GB/s':>8s} {'x mp.Queue':>11s}")
        rows = {}
        for transport in TRANSPORTS:
            count = max(1000, int(FRAMES[transport, size] * args.scale))
            seconds = [Trial(transport, size, count, CAPACITY[size]).run()
                       for _ in range(args.repeats)]
            rate = count / statistics.median(seconds)
            rows[transport] = rate
            results["rows"].append({"transport": transport, "frame_bytes": size,
                                    "frames": count, "frames_per_s": rate,
                                    "gb_per_s": rate * size / 1e9,
                                    "seconds": seconds})
        for transport in TRANSPORTS:
            rate = rows[transport]
            print(f"  {transport:16s} {rate:12,.0f} {rate * size / 1e9:8.2f}"
                  f" {rate / rows['mp.Queue']:10.1f}x")
        if size == SMALL:
            for transport in ("ring write", "ring burst"):
                verdict = "met" if rows[transport] >= 2e6 else "NOT met"
                print(f"  target >= 2M frames/s written one at a time ({transport}): {verdict}")
        else:
            gbps = rows["ring write"] * size / 1e9
            ratio = rows["ring write"] / rows["mp.Queue"]
            verdict = "met" if gbps >= 8 and ratio >= 10 else "NOT met"
            print(f"  target >= 8 GB/s and >= 10x mp.Queue (ring write): {verdict}"
                  f" ({gbps:.1f} GB/s, {ratio:.0f}x; {gbps / copy_speed:.2f} of the faster"
                  f" memcpy)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
