"""CPU cost of one frame through the ring, in one process: Ring.try_write, then Ring.read
and Ring.release, with no wake-ups and no second process, so the figure is the ring's own
Python work per frame (the part a change to ring.py can move), free of the scheduling noise
of a two-process run (perf.ring_bench measures that).

    .venv/bin/python -m perf.ring_frame_cost [--repeats 7] [--frames 200000]

Frames of 100 B and 64 KB through a ring of 256 KB and 4 MB (the sizes of ring_bench);
each trial writes bursts of up to 64 frames (fewer when the ring is full), reads and
releases them, for many laps, so the padding at wrap-around is in the figure. Also 3 MB
messages through the 4 MB ring (longer than its largest frame: fragments), for the record.
Printed: the median over ``--repeats`` of ns per frame (per message for the last), in CPU
time of this thread (time.thread_time: time spent descheduled on a busy machine is not
counted; a wall-clock figure swings by 2x there). To compare two checkouts, run this file
alternately with PYTHONPATH set to each.
"""
from __future__ import annotations

import argparse
import statistics
import time

from shm_ring import ring_descriptor as rd
from shm_ring.ring import Ring, format_ring


def trial(size: int, capacity: int, frames: int) -> float:
    """ns per frame for ``frames`` frames of ``size`` bytes through a fresh ring."""
    memory = bytearray(rd.ring_length(capacity))
    format_ring(memory, capacity)
    writer, reader = Ring(memory, "w"), Ring(memory, "r")
    frame = bytes(size)
    write, read, release = writer.try_write, reader.read, reader.release
    burst = 64
    left = frames
    start = time.thread_time()
    while left:
        written = 0
        while written < burst and written < left and write(frame):
            written += 1
        while read() is not None:
            pass
        release()
        left -= written
    elapsed = time.thread_time() - start
    return elapsed / frames * 1e9


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m perf.ring_frame_cost",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--frames", type=int, default=200_000)
    args = parser.parse_args(argv)
    cases = [("100 B, 256 KB ring", 100, 256 << 10, args.frames),
             ("64 KB, 4 MB ring", 64 << 10, 4 << 20, args.frames // 20)]
    if rd.max_frame_length(4 << 20) < 3 << 20 and hasattr(rd, "fragment_length"):
        cases.append(("3 MB message, 4 MB ring", 3 << 20, 4 << 20, 20))
    for name, size, capacity, frames in cases:
        figures = [trial(size, capacity, frames) for _ in range(args.repeats)]
        print(f"{name}: median {statistics.median(figures):,.0f} ns per frame "
              f"(min {min(figures):,.0f}, max {max(figures):,.0f})", flush=True)


if __name__ == "__main__":
    main()
