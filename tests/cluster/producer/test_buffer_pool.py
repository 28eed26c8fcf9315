"""BufferPool: accounting, recycling, blocking, timeouts, FIFO waiters, close, stress.

Waiting threads are observed through ``pool.queued`` (polled with a bound), never through
sleeps of a guessed length; no assertion depends on how long anything took.
"""
from __future__ import annotations

import mmap
import random
import threading

import pytest

from cluster.errors import KafkaTimeoutError
from cluster.producer.buffer_pool import (
    MAPPED_FROM,
    SPARE_BUFFERS,
    BufferExhaustedError,
    BufferPool,
    BufferPoolClosedError,
    BufferPoolError,
)
from tests.support.waits import wait_for

BATCH = 1024
LONG_MS = 60_000  # a deadline no passing test reaches, longer than result()'s bound


class Allocator(threading.Thread):
    """Calls pool.allocate once in its own thread; keeps the result or the error."""

    def __init__(self, pool, size, max_block_ms=LONG_MS, done=None):
        super().__init__(daemon=True)
        self.pool, self.size, self.max_block_ms, self.done = pool, size, max_block_ms, done
        self.buffer = self.error = None

    def run(self):
        try:
            self.buffer = self.pool.allocate(self.size, self.max_block_ms)
        except BaseException as e:  # handed to the test thread
            self.error = e
        if self.done is not None:
            self.done.append(self)

    def result(self):
        self.join(10)
        assert not self.is_alive(), "allocate() still blocked"
        if self.error is not None:
            raise self.error
        return self.buffer


def start_waiting(pool, size, **kw):
    """Start an allocator and return once it is queued in the pool."""
    before = pool.queued
    t = Allocator(pool, size, **kw)
    t.start()
    wait_for(lambda: pool.queued == before + 1)
    return t


def fill(pool):
    """Allocate every byte of the pool as batch-size buffers."""
    held = [pool.allocate(BATCH, 0) for _ in range(pool.total_memory // BATCH)]
    assert pool.available_memory == 0
    return held


# -- accounting and recycling -------------------------------------------------------------

def test_fresh_pool_accounting():
    pool = BufferPool(4 * BATCH, BATCH)
    assert pool.total_memory == 4 * BATCH
    assert pool.batch_size == BATCH
    assert pool.available_memory == 4 * BATCH
    assert pool.unallocated_memory == 4 * BATCH
    assert pool.pooled_count == 0
    assert pool.queued == 0
    assert not pool.closed


def test_allocate_and_deallocate_poolable_accounting():
    pool = BufferPool(4 * BATCH, BATCH)
    buf = pool.allocate(BATCH, 0)
    assert isinstance(buf, memoryview) and not buf.readonly
    assert len(buf) == BATCH
    assert pool.available_memory == 3 * BATCH
    assert pool.unallocated_memory == 3 * BATCH
    pool.deallocate(buf)
    assert pool.available_memory == 4 * BATCH
    assert pool.unallocated_memory == 3 * BATCH  # the buffer sits on the free list
    assert pool.pooled_count == 1


def test_recycling_returns_the_same_buffer_object():
    pool = BufferPool(4 * BATCH, BATCH)
    first = pool.allocate(BATCH, 0)
    first[:5] = b"hello"
    pool.deallocate(first)
    again = pool.allocate(BATCH, 0)
    assert again is first
    assert bytes(again[:5]) == b"hello"  # recycled buffers are not cleared
    assert pool.pooled_count == 0


def test_most_recently_returned_buffer_is_reused_first():
    pool = BufferPool(4 * BATCH, BATCH)
    a, b = pool.allocate(BATCH, 0), pool.allocate(BATCH, 0)
    pool.deallocate(a)
    pool.deallocate(b)
    assert pool.allocate(BATCH, 0) is b
    assert pool.allocate(BATCH, 0) is a


def test_non_poolable_sizes_release_their_memory():
    pool = BufferPool(4 * BATCH, BATCH)
    small = pool.allocate(100, 0)
    large = pool.allocate(2 * BATCH + 1, 0)
    assert (len(small), len(large)) == (100, 2 * BATCH + 1)
    assert pool.available_memory == 4 * BATCH - 100 - (2 * BATCH + 1)
    pool.deallocate(small)
    pool.deallocate(large)
    assert pool.pooled_count == 0
    assert pool.unallocated_memory == pool.available_memory == 4 * BATCH


def test_deallocate_many_gives_back_each_buffer_as_deallocate_would():
    pool = BufferPool(4 * BATCH, BATCH)
    a, b, small = pool.allocate(BATCH, 0), pool.allocate(BATCH, 0), pool.allocate(100, 0)
    pool.deallocate_many([a, small, b])
    assert pool.pooled_count == 2 and pool.available_memory == 4 * BATCH
    assert pool.allocate(BATCH, 0) is b  # the most recently returned first, as one by one
    with pytest.raises(ValueError, match="not lent"):
        pool.deallocate_many([a])  # already given back


def test_zero_byte_allocation():
    pool = BufferPool(BATCH, BATCH)
    buf = pool.allocate(0, 0)
    assert len(buf) == 0
    pool.deallocate(buf)
    assert pool.available_memory == BATCH


def test_large_allocation_frees_pooled_buffers_to_make_room():
    pool = BufferPool(4 * BATCH, BATCH)
    for buf in fill(pool):
        pool.deallocate(buf)
    assert (pool.pooled_count, pool.unallocated_memory) == (4, 0)
    big = pool.allocate(3 * BATCH, 0)
    assert len(big) == 3 * BATCH
    assert (pool.pooled_count, pool.unallocated_memory) == (1, 0)
    pool.deallocate(big)
    assert (pool.pooled_count, pool.unallocated_memory) == (1, 3 * BATCH)


def test_making_room_drops_the_coldest_free_buffers():
    pool = BufferPool(3 * BATCH, BATCH)
    a, b, c = fill(pool)
    for buf in (a, b, c):
        pool.deallocate(buf)
    big = pool.allocate(2 * BATCH, 0)
    assert pool.allocate(BATCH, 0) is c  # the most recently returned buffer survived
    pool.deallocate(big)


def test_poolable_request_after_the_free_list_ran_dry_takes_unpooled_memory():
    pool = BufferPool(3 * BATCH, BATCH)
    a = pool.allocate(BATCH, 0)
    pool.deallocate(a)
    assert pool.allocate(BATCH, 0) is a
    b = pool.allocate(BATCH, 0)
    assert b is not a and len(b) == BATCH
    assert pool.unallocated_memory == BATCH


# -- misuse -------------------------------------------------------------------------------

def test_request_larger_than_total_raises_at_once_naming_the_sizes():
    pool = BufferPool(4 * BATCH, BATCH)
    with pytest.raises(ValueError) as e:
        pool.allocate(4 * BATCH + 1, LONG_MS)
    assert str(4 * BATCH + 1) in str(e.value) and str(4 * BATCH) in str(e.value)
    assert pool.queued == 0 and pool.available_memory == 4 * BATCH


def test_negative_size_raises():
    pool = BufferPool(BATCH, BATCH)
    with pytest.raises(ValueError, match="-1"):
        pool.allocate(-1, 0)


@pytest.mark.parametrize("memory, batch", [(-1, BATCH), (BATCH, 0)])
def test_constructor_rejects_bad_sizes(memory, batch):
    with pytest.raises(ValueError):
        BufferPool(memory, batch)


def test_deallocate_rejects_a_second_return_and_foreign_buffers():
    pool = BufferPool(4 * BATCH, BATCH)
    buf = pool.allocate(BATCH, 0)
    pool.deallocate(buf)
    with pytest.raises(ValueError, match="not lent"):
        pool.deallocate(buf)
    with pytest.raises(ValueError, match="not lent"):
        pool.deallocate(memoryview(bytearray(BATCH)))
    assert pool.pooled_count == 1 and pool.available_memory == 4 * BATCH


def test_failed_buffer_creation_gives_the_memory_back():
    huge = 1 << 62
    pool = BufferPool(huge, BATCH)
    with pytest.raises(MemoryError):
        pool.allocate(huge, 0)
    assert pool.unallocated_memory == huge


def test_a_large_buffer_is_a_zeroed_mapping_given_back_like_any_other():
    size = MAPPED_FROM + 3
    pool = BufferPool(2 * size, BATCH)
    buf = pool.allocate(size, 0)
    assert isinstance(buf.obj, mmap.mmap) and not buf.readonly  # not cleared by a memset
    assert len(buf) == size and buf[-1] == 0 and bytes(buf[:8]) == bytes(8)
    buf[size - 3:] = b"end"
    pool.deallocate(buf)
    assert pool.unallocated_memory == size and pool.pooled_count == 0
    assert pool.spare_memory == size and pool.available_memory == 2 * size


def test_a_mapping_given_back_is_reused_by_a_request_of_its_size_alone():
    size = MAPPED_FROM + 3
    pool = BufferPool(4 * size, BATCH)
    first, second = pool.allocate(size, 0), pool.allocate(size + 1, 0)
    pool.deallocate_many([first, second])
    assert pool.spare_memory == 2 * size + 1
    other = pool.allocate(size + 2, 0)  # no spare of this size: a fresh mapping
    assert other.obj is not first.obj and other.obj is not second.obj
    again = pool.allocate(size, 0)
    assert again.obj is first.obj and pool.spare_memory == size + 1
    assert pool.available_memory == 4 * size - size - (size + 2)
    pool.deallocate(again)
    with pytest.raises(ValueError, match="not lent"):
        pool.deallocate(again)  # a spare is not lent: a second return is still caught


def test_spares_are_dropped_first_when_memory_is_short():
    size = MAPPED_FROM
    pool = BufferPool(3 * size, size // 4)
    small = [pool.allocate(size // 4, 0) for _ in range(4)]
    pool.deallocate_many(small)  # the free list holds one mapping's worth
    spare = pool.allocate(size, 0)
    pool.deallocate(spare)
    assert (pool.pooled_count, pool.spare_memory, pool.unallocated_memory) == (4, size, size)
    big = pool.allocate(2 * size, 0)  # needs the spare's memory, not the free buffers'
    assert (pool.pooled_count, pool.spare_memory, pool.unallocated_memory) == (4, 0, 0)
    assert big.obj is not spare.obj


def test_spares_are_capped_the_oldest_dropped():
    size = MAPPED_FROM
    pool = BufferPool((SPARE_BUFFERS + 2) * size, BATCH)
    buffers = [pool.allocate(size, 0) for _ in range(SPARE_BUFFERS + 2)]
    pool.deallocate_many(buffers)
    assert pool.spare_memory == SPARE_BUFFERS * size
    assert pool.unallocated_memory == 2 * size
    assert pool.allocate(size, 0).obj is buffers[-1].obj  # the most recent first


# -- blocking and timeouts ----------------------------------------------------------------

def test_allocate_blocks_until_another_thread_deallocates():
    pool = BufferPool(2 * BATCH, BATCH)
    held = fill(pool)
    waiter = start_waiting(pool, BATCH)
    assert waiter.is_alive()
    pool.deallocate(held[0])
    assert waiter.result() is held[0]
    assert pool.queued == 0 and pool.available_memory == 0


def test_non_poolable_waiter_is_served_from_a_returned_pooled_buffer():
    pool = BufferPool(2 * BATCH, BATCH)
    held = fill(pool)
    waiter = start_waiting(pool, 100)
    pool.deallocate(held[0])
    assert len(waiter.result()) == 100
    assert pool.pooled_count == 0 and pool.unallocated_memory == BATCH - 100


def test_timeout_raises_buffer_exhausted_with_the_sizes():
    pool = BufferPool(2 * BATCH, BATCH)
    held = fill(pool)
    with pytest.raises(BufferExhaustedError) as e:
        pool.allocate(BATCH, 20)
    err = e.value
    # Kafka's BufferExhaustedException is a TimeoutException: one error tree
    assert isinstance(err, BufferPoolError) and isinstance(err, KafkaTimeoutError)
    assert (err.errno, err.message, err.retriable) == (7, "REQUEST_TIMED_OUT", True)
    assert (err.requested, err.max_block_ms, err.total, err.available, err.used) == (
        BATCH, 20, 2 * BATCH, 0, 2 * BATCH)
    for figure in (f"{BATCH} bytes", f"total memory {2 * BATCH}", "available 0", "used 2048"):
        assert figure in str(err)
    assert pool.queued == 0 and pool.exhausted_total == 1
    assert pool.available_memory == 0 and len(held) == 2


def test_zero_max_block_fails_without_waiting_for_memory():
    pool = BufferPool(BATCH, BATCH)
    fill(pool)
    with pytest.raises(BufferExhaustedError):
        pool.allocate(BATCH, 0)
    assert pool.wait_time_ns_total == 0


def test_timed_out_request_gives_back_the_memory_it_gathered():
    pool = BufferPool(3 * BATCH, BATCH)
    held = [pool.allocate(BATCH, 0), pool.allocate(BATCH, 0)]
    with pytest.raises(BufferExhaustedError) as e:
        pool.allocate(2 * BATCH, 20)  # gathers the one free batch, then times out
    assert e.value.available == BATCH
    assert pool.available_memory == BATCH and pool.queued == 0
    pool.deallocate(held[0])
    assert len(pool.allocate(2 * BATCH, 0)) == 2 * BATCH


def test_deadline_runs_on_the_injected_clock():
    ticks = iter([0.0, 120.0])  # a one-minute deadline that is long gone at the first look
    pool = BufferPool(BATCH, BATCH, clock=lambda: next(ticks))
    fill(pool)
    with pytest.raises(BufferExhaustedError):
        pool.allocate(BATCH, 60_000)


def test_wait_time_metric_counts_the_clock_time_spent_blocked():
    script = [0.0, 0.0, 30.0]  # deadline set, wait starts, wait ends 30 s later
    pool = BufferPool(BATCH, BATCH, clock=lambda: script.pop(0) if len(script) > 1 else script[0])
    held = fill(pool)
    waiter = start_waiting(pool, BATCH, max_block_ms=60_000)
    pool.deallocate(held[0])
    assert waiter.result() is held[0]
    assert pool.wait_time_ns_total == 30_000_000_000
    assert pool.exhausted_total == 0


# -- fairness -----------------------------------------------------------------------------

def test_waiters_are_served_in_arrival_order():
    pool = BufferPool(3 * BATCH, BATCH)
    held = fill(pool)
    done = []
    waiters = [start_waiting(pool, BATCH, done=done) for _ in range(3)]
    for i, buf in enumerate(held):
        pool.deallocate(buf)
        wait_for(lambda: len(done) == i + 1)
        assert done[i] is waiters[i] and waiters[i].result() is buf
    assert pool.queued == 0


def test_large_request_at_the_head_is_not_overtaken_by_smaller_ones():
    pool = BufferPool(3 * BATCH, BATCH)
    held = fill(pool)
    done = []
    big = start_waiting(pool, 2 * BATCH, done=done)
    small = start_waiting(pool, BATCH, done=done)
    pool.deallocate(held[0])
    # The head gathers the freed batch; the small request behind it stays queued.
    wait_for(lambda: pool.available_memory == 0)
    assert pool.queued == 2 and done == []
    pool.deallocate(held[1])
    assert len(big.result()) == 2 * BATCH
    assert done == [big] and pool.queued == 1
    pool.deallocate(held[2])
    assert small.result() is held[2]
    assert done == [big, small]


def test_head_leaving_with_memory_to_spare_wakes_the_next_waiter():
    pool = BufferPool(3 * BATCH, BATCH)
    wide = pool.allocate(2 * BATCH, 0)
    pool.allocate(BATCH, 0)
    first = start_waiting(pool, BATCH)
    second = start_waiting(pool, BATCH)
    pool.deallocate(wide)  # wakes the head only; enough for both
    assert len(first.result()) == BATCH
    assert len(second.result()) == BATCH
    assert pool.available_memory == 0


def test_returned_buffer_goes_to_the_waiter_not_to_a_newcomer():
    pool = BufferPool(BATCH, BATCH)
    (buf,) = fill(pool)
    waiter = start_waiting(pool, BATCH)
    pool.deallocate(buf)
    # Whether or not the waiter has run yet, the buffer is its own.
    with pytest.raises(BufferExhaustedError):
        pool.allocate(BATCH, 0)
    assert waiter.result() is buf


def test_newcomer_queues_behind_a_waiter():
    pool = BufferPool(2 * BATCH, BATCH)
    held = fill(pool)
    head = start_waiting(pool, 2 * BATCH)
    pool.deallocate(held[0])  # the head gathers it
    wait_for(lambda: pool.available_memory == 0)
    with pytest.raises(BufferExhaustedError):
        pool.allocate(0, 0)  # even a request for nothing waits its turn
    pool.deallocate(held[1])
    assert len(head.result()) == 2 * BATCH


# -- close --------------------------------------------------------------------------------

def test_close_wakes_every_waiter_with_an_error():
    pool = BufferPool(3 * BATCH, BATCH)
    [pool.allocate(BATCH, 0), pool.allocate(BATCH, 0)]
    big = start_waiting(pool, 2 * BATCH)  # gathers the last free batch, then waits
    small = start_waiting(pool, 100)
    wait_for(lambda: pool.available_memory == 0)
    pool.close()
    for waiter in (big, small):
        with pytest.raises(BufferPoolClosedError) as e:
            waiter.result()
        assert e.value.retriable is False
    assert pool.closed and pool.queued == 0
    assert pool.available_memory == BATCH  # the head's gathered memory came back


def test_closed_pool_refuses_allocations_but_takes_buffers_back():
    pool = BufferPool(2 * BATCH, BATCH)
    buf = pool.allocate(BATCH, 0)
    pool.close()
    pool.close()
    with pytest.raises(BufferPoolClosedError):
        pool.allocate(BATCH, LONG_MS)
    with pytest.raises(BufferPoolClosedError):
        pool.allocate(100, LONG_MS)
    pool.deallocate(buf)
    assert pool.available_memory == 2 * BATCH and pool.pooled_count == 1


# -- stress -------------------------------------------------------------------------------

def test_stress_threads_never_share_a_buffer_and_memory_adds_up():
    """Threads allocate and free at random; at each checkpoint (all threads parked on a
    barrier, so nobody is half-way through an allocation) the bytes the threads hold plus
    the pool's available memory make the total exactly, and no buffer was lent twice."""
    n_threads, rounds, ops = 4, 25, 30
    total = 8 * BATCH
    pool = BufferPool(total, BATCH)
    sizes = [BATCH] * 6 + [1, BATCH // 3, BATCH + 1, 2 * BATCH, 3 * BATCH + 7]
    barrier = threading.Barrier(n_threads + 1, timeout=30)
    holdings = [[] for _ in range(n_threads)]  # per thread: (buffer, tag)
    errors = []
    stats = {"allocated": 0, "exhausted": 0}
    stats_lock = threading.Lock()

    def give_back(held, k):
        buf, tag = held.pop(k)
        if len(buf) >= 8 and bytes(buf[:8]) != tag:
            raise AssertionError("a lent buffer was written by another owner")
        pool.deallocate(buf)

    def worker(t):
        rng = random.Random(t)
        held = holdings[t]
        try:
            for r in range(rounds):
                for i in range(ops):
                    if held and rng.random() < 0.45:
                        give_back(held, rng.randrange(len(held)))
                        continue
                    size = rng.choice(sizes)
                    try:
                        buf = pool.allocate(size, rng.choice([0, 1, 5]))
                    except BufferExhaustedError:
                        with stats_lock:
                            stats["exhausted"] += 1
                        continue
                    assert len(buf) == size
                    tag = bytes([t, r, i % 256, 0xA5]) * 2
                    if size >= 8:
                        buf[:8] = tag
                    held.append((buf, tag))
                    with stats_lock:
                        stats["allocated"] += 1
                barrier.wait()  # checkpoint: the main thread checks
                barrier.wait()
            while held:
                give_back(held, 0)
        except BaseException as e:
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(n_threads)]
    for th in threads:
        th.start()
    try:
        for _ in range(rounds):
            barrier.wait()
            held_bytes = sum(len(buf) for held in holdings for buf, _ in held)
            assert pool.queued == 0
            assert held_bytes + pool.available_memory == total
            assert pool.unallocated_memory + pool.pooled_count * BATCH == pool.available_memory
            barrier.wait()
    except threading.BrokenBarrierError:
        pass  # a worker failed; its error is in `errors`
    except BaseException:
        barrier.abort()
        raise
    for th in threads:
        th.join(30)
    assert not errors, errors
    assert not any(th.is_alive() for th in threads)
    assert pool.available_memory == total and pool.queued == 0
    assert stats["allocated"] > 0 and stats["exhausted"] > 0  # both paths were exercised
