"""A named ring between processes: stress, wake-ups, timeouts, closed and killed peers.

Every test bounds its time, kills the processes it started by pid and unlinks what it made
(the cluster_id fixture sweeps whatever a failure left behind).
"""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from shm_ring import ring_descriptor as rd
from shm_ring.errors import PeerClosedError, PeerDiedError
from shm_ring.naming import NamedSemaphore
from shm_ring.shared_ring import SharedRing
from shm_ring.wakeup import (
    READER_PARKED_WORD,
    WRITER_PARKED_WORD,
    WaitPolicy,
    WakeSlot,
    hold_posts,
    release_posts,
    stop_holding,
)
from tests.support.bounds import BOUND
from tests.support.clock import FakeClock
from tests.support.processes import CTX
from tests.support.waits import wait_for


@pytest.fixture
def owned_ring(cluster_id):
    """Create a ring owned by the test process; close and unlink it at the end."""
    rings = []

    def create(stem: str, capacity: int) -> SharedRing:
        ring = SharedRing.create(cluster_id, stem, capacity)
        rings.append(ring)
        return ring
    yield create
    for ring in rings:
        ring.close()
        ring.unlink()


# --------------------------------------------------------------------------- stress

STRESS_FRAMES = 2_000_000
PATTERN = 1 << 20


def stress_plan(seed: int, count: int) -> tuple[bytes, list[int], list[int]]:
    """The frames both processes agree on: random sizes (mostly 0-200 bytes, one in 1000
    between 10 KB and 60 KB) at random offsets of one random pattern."""
    rng = np.random.default_rng(seed)
    pattern = rng.integers(0, 256, PATTERN, dtype=np.uint8).tobytes()
    sizes = rng.integers(0, 201, count)
    large = rng.random(count) < 0.001
    sizes[large] = rng.integers(10_000, 60_001, int(large.sum()))
    offsets = rng.integers(0, PATTERN - 60_001, count)
    return pattern, sizes.tolist(), offsets.tolist()


def _stress_writer(cluster_id: str, seed: int, count: int) -> None:
    ring = SharedRing.open(cluster_id, "stress")
    writer = ring.writer()
    pattern, sizes, offsets = stress_plan(seed, count)
    frames = memoryview(pattern)
    write = writer.write
    for size, offset in zip(sizes, offsets):
        if not write(frames[offset: offset + size], BOUND):
            os._exit(3)
    writer.close()
    ring.close()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_stress_millions_of_frames_in_order_across_many_laps(cluster_id, spawn, owned_ring):
    ring = owned_ring("stress", 1 << 18)
    reader = ring.reader()
    seed = int.from_bytes(os.urandom(4), "little")
    pattern, sizes, offsets = stress_plan(seed, STRESS_FRAMES)
    expected = memoryview(pattern)
    writer = spawn(_stress_writer, cluster_id, seed, STRESS_FRAMES)
    read, release = reader.read, reader.release
    mismatches = []
    received_bytes = 0
    for number, (size, offset) in enumerate(zip(sizes, offsets)):
        view = read(BOUND)
        assert view is not None, f"frame {number} did not arrive"
        if view != expected[offset: offset + size]:
            mismatches.append(number)
            if len(mismatches) > 10:
                break
        received_bytes += len(view)
        release()
    assert mismatches == [], f"seed {seed}: frames {mismatches} differ"
    with pytest.raises(PeerClosedError):  # the writer closed after the last frame
        read(BOUND)
    writer.join(BOUND)
    assert writer.exitcode == 0
    assert received_bytes == sum(sizes)
    assert reader.ring.head_position == reader.ring.tail_position
    assert reader.ring.tail_position > 100 * reader.ring.capacity  # wrapped many times


# --------------------------------------------------------------------------- killed writer

def _writer_killed_mid_frame(cluster_id: str, pipe) -> None:
    ring = SharedRing.open(cluster_id, "torn")
    writer = ring.writer()
    for number in range(3):
        writer.write(b"frame %d" % number)
    view = writer.claim(100)
    view[:50] = b"t" * 50  # half a payload, never committed
    pipe.send(writer.ring.tail_position)
    time.sleep(BOUND * 2)


@pytest.mark.multiprocess
def test_writer_killed_after_claim_leaves_no_torn_frame_and_is_noticed(cluster_id, spawn,
                                                                         owned_ring):
    ring = owned_ring("torn", 4096)
    reader = ring.reader(WaitPolicy(poll_interval=0.02))
    parent, child = CTX.Pipe()
    writer = spawn(_writer_killed_mid_frame, cluster_id, child)
    assert parent.poll(BOUND)
    claimed_at = parent.recv()
    os.kill(writer.pid, signal.SIGKILL)  # not reaped: a zombie must count as dead too
    frames = []
    with pytest.raises(PeerDiedError, match=rf"writer of .*torn \(pid {writer.pid}\) died"):
        while True:
            view = reader.read(BOUND)
            frames.append(bytes(view))
            reader.release()
    assert frames == [b"frame 0", b"frame 1", b"frame 2"]
    header = reader.ring._data_words[(claimed_at & (reader.ring.capacity - 1)) >> 3]
    assert header == 0  # the claimed frame was never committed


# --------------------------------------------------------------------------- wake-ups

def _parked_reader(cluster_id: str, pipe) -> None:
    ring = SharedRing.open(cluster_id, "park")
    # It polls every 60 s: only the writer's post can wake it within the test's bound.
    reader = ring.reader(WaitPolicy(spin=10, poll_interval=60))
    view = reader.read(BOUND * 2)
    pipe.send(bytes(view))
    reader.release()
    ring.close()


@pytest.mark.multiprocess
def test_parked_reader_is_woken_by_the_writer(cluster_id, spawn, owned_ring):
    ring = owned_ring("park", 4096)
    writer = ring.writer()
    parent, child = CTX.Pipe()
    process = spawn(_parked_reader, cluster_id, child)
    words = writer.ring.header_words
    wait_for(lambda: words[READER_PARKED_WORD] != 0, "the reader to park")
    assert writer.write(b"wake up", BOUND)
    assert words[READER_PARKED_WORD] == 0  # the writer cleared the flag as it posted
    assert parent.poll(BOUND), "the parked reader was not woken"
    assert parent.recv() == b"wake up"
    process.join(BOUND)
    assert process.exitcode == 0


def _parked_burst_reader(cluster_id: str, pipe) -> None:
    ring = SharedRing.open(cluster_id, "burst")
    reader = ring.reader(WaitPolicy(spin=10, poll_interval=60))
    frames = []
    for _ in range(3):
        frames.append(bytes(reader.read(BOUND * 2)))
        reader.release()
    pipe.send(frames)
    ring.close()


@pytest.mark.multiprocess
def test_a_burst_written_without_wake_ups_is_woken_once(cluster_id, spawn, owned_ring):
    ring = owned_ring("burst", 4096)
    writer = ring.writer()
    parent, child = CTX.Pipe()
    process = spawn(_parked_burst_reader, cluster_id, child)
    words = writer.ring.header_words
    wait_for(lambda: words[READER_PARKED_WORD] != 0, "the reader to park")
    for number in range(3):
        assert writer.ring.try_write(b"burst %d" % number)
    assert words[READER_PARKED_WORD] != 0  # no post yet: the flag is still set
    writer.wake()
    assert words[READER_PARKED_WORD] == 0
    assert parent.poll(BOUND), "the parked reader was not woken"
    assert parent.recv() == [b"burst 0", b"burst 1", b"burst 2"]
    process.join(BOUND)


def _parked_writer(cluster_id: str, pipe) -> None:
    ring = SharedRing.open(cluster_id, "full")
    writer = ring.writer(WaitPolicy(spin=10, poll_interval=60))
    while writer.ring.try_write(b"f" * 40):
        pass
    pipe.send("full")
    pipe.send(writer.write(b"last", BOUND * 2))
    ring.close()


@pytest.mark.multiprocess
def test_parked_writer_is_woken_when_the_reader_releases(cluster_id, spawn, owned_ring):
    ring = owned_ring("full", 1024)
    reader = ring.reader()
    parent, child = CTX.Pipe()
    process = spawn(_parked_writer, cluster_id, child)
    assert parent.poll(BOUND) and parent.recv() == "full"
    words = reader.ring.header_words
    wait_for(lambda: words[WRITER_PARKED_WORD] != 0, "the writer to park")
    frames = 0
    while reader.read(0) is not None:
        frames += 1
    reader.release()
    assert parent.poll(BOUND), "the parked writer was not woken"
    assert parent.recv() is True
    assert bytes(reader.read(BOUND)) == b"last"
    assert frames > 10
    process.join(BOUND)


def test_parked_read_returns_none_once_another_thread_stops_and_interrupts_it(owned_ring):
    ring = owned_ring("interrupt", 4096)
    ring.writer()
    # It polls every 60 s: only interrupt() can wake it within the test's bound.
    reader = ring.reader(WaitPolicy(spin=10, poll_interval=60))
    stopped = threading.Event()
    results = []
    thread = threading.Thread(target=lambda: results.append(
        reader.read(BOUND * 2, stop=stopped.is_set)))
    thread.start()
    words = reader.ring.header_words
    wait_for(lambda: words[READER_PARKED_WORD] != 0, "the reader to park")
    stopped.set()
    reader.interrupt()
    thread.join(BOUND)
    assert not thread.is_alive(), "interrupt() did not wake the parked reader"
    assert results == [None]
    assert reader.read(0.0, stop=stopped.is_set) is None  # stopped: no wait at all


def test_a_frame_wins_over_stop(owned_ring):
    ring = owned_ring("frame-first", 4096)
    writer = ring.writer()
    reader = ring.reader()
    assert writer.write(b"here", BOUND)
    assert bytes(reader.read(BOUND, stop=lambda: True)) == b"here"
    reader.release()


def test_timeouts_follow_the_injected_clock(owned_ring):
    ring = owned_ring("timeouts", 256)
    clock = FakeClock(step=1.0)  # a monotonic clock: every reading one second later
    policy = WaitPolicy(spin=3, poll_interval=0.001, clock=clock)
    writer = ring.writer(policy)
    reader = ring.reader(policy)
    assert reader.read(timeout=5) is None  # empty: gives up when the fake clock passes 5 s
    while writer.ring.try_write(b"x" * 50):
        pass
    assert writer.write(b"x" * 50, timeout=5) is False  # full
    assert policy.clock.now < 20


def test_a_read_with_timeout_zero_looks_once_without_spinning(owned_ring):
    ring = owned_ring("look", 4096)
    clock = FakeClock(step=1.0)
    policy = WaitPolicy(spin=1000, poll_interval=0.001, clock=clock)
    writer = ring.writer(policy)
    reader = ring.reader(policy)
    looks = []  # stop() is asked on every look a wait makes
    assert reader.read(timeout=0, stop=lambda: looks.append(1) and False) is None
    assert len(looks) <= 1 and clock.now == 0  # no spin over the ring, no wait
    assert writer.write(b"now", BOUND)
    assert bytes(reader.read(timeout=0)) == b"now"
    reader.release()
    writer.write(b"last")
    writer.close()
    assert bytes(reader.read(timeout=0)) == b"last"  # frames before the close still come
    reader.release()
    with pytest.raises(PeerClosedError, match="closed ring"):
        reader.read(timeout=0)


def test_closed_ends_raise_peer_closed(owned_ring):
    ring = owned_ring("closing", 256)
    policy = WaitPolicy(spin=3, poll_interval=0.001)
    writer = ring.writer(policy)
    reader = ring.reader(policy)
    writer.write(b"last words")
    writer.close()
    assert bytes(reader.read(BOUND)) == b"last words"  # frames before the close still come
    reader.release()
    with pytest.raises(PeerClosedError, match="closed ring"):
        reader.read(BOUND)
    reader.close()
    while writer.ring.try_write(b"y" * 50):
        pass
    with pytest.raises(PeerClosedError, match="reader of .* closed ring"):
        writer.write(b"y" * 50, BOUND)


def _reader_that_dies(cluster_id: str, pipe) -> None:
    ring = SharedRing.open(cluster_id, "deadreader")
    ring.reader()
    pipe.send("attached")
    time.sleep(BOUND * 2)


@pytest.mark.multiprocess
def test_blocked_writer_notices_a_killed_reader(cluster_id, spawn, owned_ring):
    ring = owned_ring("deadreader", 256)
    writer = ring.writer(WaitPolicy(spin=3, poll_interval=0.02))
    parent, child = CTX.Pipe()
    process = spawn(_reader_that_dies, cluster_id, child)
    assert parent.poll(BOUND)
    while writer.ring.try_write(b"z" * 50):
        pass
    os.kill(process.pid, signal.SIGKILL)
    process.join(BOUND)
    with pytest.raises(PeerDiedError, match=rf"pid {process.pid}"):
        writer.write(b"z" * 50, BOUND)


def _long_message_reader(cluster_id: str, pipe) -> None:
    ring = SharedRing.open(cluster_id, "long")
    # It polls every 60 s: only the writer's posts can wake it within the test's bound,
    # and only its own releases can wake the writer.
    reader = ring.reader(WaitPolicy(spin=10, poll_interval=60))
    for _ in range(2):
        view = reader.read(BOUND * 2)
        pipe.send(None if view is None else (bytes(view), reader.ring.frame_type))
        del view
        reader.release()
    ring.close()


@pytest.mark.multiprocess
def test_messages_many_times_the_ring_pass_between_parked_ends(cluster_id, spawn, owned_ring):
    ring = owned_ring("long", 1024)
    writer = ring.writer(WaitPolicy(spin=10, poll_interval=60))
    parent, child = CTX.Pipe()
    process = spawn(_long_message_reader, cluster_id, child)
    words = writer.ring.header_words
    wait_for(lambda: words[READER_PARKED_WORD] != 0, "the reader to park")
    first = os.urandom(50 * 1024)
    assert writer.write(first, BOUND, frame_type=3)
    assert parent.poll(BOUND) and parent.recv() == (first, 3)
    second = os.urandom(rd.max_frame_length(1024) + 1)
    assert writer.write(second, BOUND)
    assert parent.poll(BOUND) and parent.recv() == (second, rd.DATA_TYPE)
    process.join(BOUND)
    assert process.exitcode == 0


# --------------------------------------------------------------------------- held posts

@pytest.fixture
def parked_slot(cluster_id):
    """A WakeSlot over a semaphore of the test's own, its waiter's flag raised (parked)."""
    semaphore = NamedSemaphore.create(f"/ringlog.{cluster_id}.held")
    words = memoryview(bytearray(8)).cast("Q")
    words[0] = 1
    yield WakeSlot(words, 0, semaphore.semaphore), semaphore.semaphore
    semaphore.close()
    semaphore.unlink()


def test_held_posts_wait_for_the_end_of_the_turn(parked_slot):
    slot, semaphore = parked_slot
    hold_posts()
    try:
        slot.notify()
        assert slot.words[0] == 0  # cleared at once: no second notifier posts it
        assert semaphore.value == 0  # the post itself waits for release_posts
        slot.words[0] = 1
        slot.notify()  # the same semaphore asked for twice in one turn: posted once
        release_posts()
        assert semaphore.value == 1
        release_posts()  # nothing left to post
        assert semaphore.value == 1
    finally:
        stop_holding()
    slot.words[0] = 1
    slot.notify()  # no longer held
    assert semaphore.value == 2


def test_a_wait_makes_the_threads_held_posts_first(parked_slot, owned_ring):
    slot, semaphore = parked_slot
    reader = owned_ring("held", 4096).reader(WaitPolicy(spin=1, poll_interval=0.001))
    hold_posts()
    try:
        slot.notify()
        assert semaphore.value == 0
        assert reader.read(0.001) is None  # waits: what it holds must not wait with it
        assert semaphore.value == 1
    finally:
        stop_holding()


def test_posts_are_held_for_the_holding_thread_only(parked_slot):
    slot, semaphore = parked_slot
    hold_posts()
    try:
        other = threading.Thread(target=slot.notify)
        other.start()
        other.join(BOUND)
        assert semaphore.value == 1  # another thread's post went at once
    finally:
        stop_holding()


def test_a_held_post_of_a_semaphore_closed_since_is_dropped(parked_slot, cluster_id):
    slot, semaphore = parked_slot
    other = NamedSemaphore.create(f"/ringlog.{cluster_id}.gone")
    gone = WakeSlot(memoryview(bytearray(8)).cast("Q"), 0, other.semaphore)
    gone.words[0] = 1
    hold_posts()
    try:
        gone.notify()
        slot.notify()
        other.close()  # its connection dropped before the turn ended
        other.unlink()
        release_posts()
        assert semaphore.value == 1  # the others still go
    finally:
        stop_holding()
