"""Spin, then park: blocking ends of a ring.

A waiter that finds nothing to do re-checks a few hundred times (spinning costs no syscall;
a wake-up costs more: perf/README.md, "Ring waits: spin, then park"), then sets its *parked*
flag in shared memory and blocks on a named semaphore. A notifier, after publishing (a
frame, a release), posts the semaphore only when it sees the flag set, so the busy path
makes no syscall at all.

Why no wake-up is lost. Waiter: store parked = 1; full fence; re-check the condition; block.
Notifier: publish (store); full fence; load parked; post if set. With the two fences, x86's one
reordering (a load passing an earlier store) cannot make both sides miss each other: either the
waiter's re-check sees the publication, or the notifier sees the flag and posts. Python has no
fence instruction, so full_fence() acquires and releases a lock (glibc implements it with LOCK
CMPXCHG, a full barrier on x86). The post itself is a full barrier too, so a woken waiter sees
what was published before it. A notifier clears the flag before posting, so a waiter gets one
post per park; a stale post only costs the waiter one more loop.

Held posts. A post wakes a peer that is usually lighter on the CPU than the poster, and the
scheduler then runs the woken process at once on the poster's core: the post returns only
after the peer ran, and on a loaded machine the poster may wait for the CPU much longer
(measured: perf/README.md, "Held posts"). A thread that answers many peers per turn (the
broker's loop) calls hold_posts() once: its posts are noted and made together by
release_posts() when its turn's work is done, so the answers of the whole turn are written
before any peer takes the core. The flag is cleared at once, as for a post made at once; a
held post only arrives later, and a waiter's block is bounded (poll_interval) anyway.
wait_until releases the thread's held posts before it waits, so nobody waits on a post held
by a thread that sleeps.

Blocking waits never trust a peer to wake them: each block lasts at most poll_interval, and
after a block that timed out the waiter runs its liveness check (the peer's pid and start time),
so a SIGKILLed peer raises PeerDiedError instead of hanging anyone. Timeouts loop on a monotonic
deadline; the clock is injectable.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import posix_ipc

from shm_ring import accel, ring_descriptor as rd
from shm_ring.errors import PeerClosedError, PeerDiedError
from shm_ring.liveness import is_alive
from shm_ring.ring import READER_END, WRITER_END, Ring

_fence_lock = threading.Lock()
_lock = _fence_lock.acquire
_unlock = _fence_lock.release

READER_PARKED_WORD = rd.READER_PARKED_OFFSET // rd.WORD_LENGTH
"""Index of the reader's parked flag in Ring.header_words."""

WRITER_PARKED_WORD = rd.WRITER_PARKED_OFFSET // rd.WORD_LENGTH
"""Index of the writer's parked flag in Ring.header_words."""


class _Held(threading.local):
    posts: dict[int, posix_ipc.Semaphore] | None = None
    """Semaphores to post when the thread's turn ends (by id), or None: post at once."""


_held = _Held()


def hold_posts() -> None:
    """From now on, hold this thread's posts until release_posts() (see the module doc)."""
    if _held.posts is None:
        _held.posts = {}


def release_posts() -> None:
    """Make this thread's held posts, in the order they were asked for (those of a
    semaphore closed meanwhile are dropped)."""
    posts = _held.posts
    if posts:
        semaphores = list(posts.values())
        posts.clear()
        for semaphore in semaphores:
            try:
                semaphore.release()
            except posix_ipc.ExistentialError:
                pass  # closed since (the connection dropped): nobody left to wake


def stop_holding() -> None:
    """Release this thread's held posts and post at once from now on."""
    release_posts()
    _held.posts = None


def full_fence() -> None:
    """Order every earlier store before every later load (a locked instruction on x86)."""
    _lock()
    _unlock()


@dataclass(frozen=True)
class WaitPolicy:
    """How a blocking call waits: spin count, longest single block, clock."""

    spin: int = 200
    """Checks of the condition before parking."""

    poll_interval: float = 0.05
    """Longest single block in seconds; the peer's liveness is checked after each."""

    clock: Callable[[], float] = time.monotonic
    """Monotonic clock in seconds, for deadlines."""

    def deadline(self, timeout: float | None) -> float | None:
        """The clock value at which a wait of timeout seconds ends (None: never)."""
        return None if timeout is None else self.clock() + timeout


DEFAULT_POLICY = WaitPolicy()


class WakeCore:
    """A wake slot's flag word and pending flags, and the notifier's side of the handshake
    (module doc), in pure Python: the base of WakeSlot. Its compiled twin
    (shm_ring/_ring_accel.pyx, ``accel``) does the same stores in the same order, with
    ``__atomic_thread_fence(__ATOMIC_SEQ_CST)`` where this calls full_fence() (inlined);
    WAKE_CORE is the one WakeSlot inherits."""

    __slots__ = ("words", "index", "pending")

    def notify(self) -> None:
        """After publishing: set the pending flag if the slot has one, then wake the waiter
        if it is parked (no syscall when it is not)."""
        pending = self.pending
        if pending is not None:
            pending[2][pending[3]] = 1  # the byte before the word (listener_descriptor)
            pending[0][pending[1]] = 1
        _lock()
        _unlock()
        if self.words[self.index]:
            self.post()


#: The compiled module (shm_ring/_ring_accel.pyx), or None (``accel``).
_COMPILED = accel.load("shm_ring._ring_accel")
#: The base WakeSlot inherits: the compiled twin when it is available.
WAKE_CORE = WakeCore if _COMPILED is None else _COMPILED.WakeCore


class WakeSlot(WAKE_CORE):
    """One waiter's parked flag (a word in shared memory) and the semaphore it blocks on.

    Ownership: one thread at a time waits on a slot (wait_until); any number of threads and
    processes notify it. The slot does not own the memory or the semaphore.

    Companion flags: a waiter may be woken through this slot's semaphore by writers that
    look at other parked flags (a broker's outbound connections whose peers post the
    broker's doorbell, see connection). ``companions`` holds those flags as (words, index)
    pairs; wait_until raises and clears them together with its own flag, in the same
    set-fence-recheck order, so a writer that published and saw any of them set posts.

    Pending flag: a waiter that watches many rings (a broker's doorbell) may give its
    notifiers a word to set after publishing, before the fence, and a byte of theirs to set
    just before it (``pending``: (words, index, flags, flag), or None); its wait then looks
    at that word instead of every ring, and at the rings of the set bytes only
    (connection.Listener; the order: listener_descriptor).

    The flag check of a notify is the base's: WakeCore, or its compiled twin (WAKE_CORE),
    which does the same stores, with a C fence for full_fence().
    """

    __slots__ = ("_semaphore", "companions")

    def __init__(self, words: memoryview, index: int, semaphore: posix_ipc.Semaphore,
                 pending: tuple | None = None) -> None:
        self.words = words
        """The shared words holding the flag (hot paths read words[index] themselves)."""
        self.index = index
        self._semaphore = semaphore
        self.companions: list[tuple[memoryview, int]] = []
        """Other parked flags raised while this slot's waiter is parked (see the class doc);
        changed only by the waiting thread, between waits."""
        self.pending = pending
        """(words, index, flags, flag): the word and the byte notifiers set after publishing
        (see the class doc; flags may be a scratch buffer while there is no byte), or None."""

    def post(self) -> None:
        """Wake the waiter, clearing its flag first (for callers that fenced and saw the flag);
        held until release_posts() if this thread holds its posts."""
        self.words[self.index] = 0
        posts = _held.posts
        if posts is None:
            self._semaphore.release()
        else:
            posts[id(self._semaphore)] = self._semaphore

    def wait_until(self, ready: Callable[[], bool], deadline: float | None,
                   policy: WaitPolicy, check: Callable[[], None] | None) -> bool:
        """Return True as soon as ready() is true, False once the deadline passed.

        check(), if given, runs after every block that timed out (and may raise, e.g.
        PeerDiedError). This thread's held posts are made first.
        """
        if _held.posts:
            release_posts()
        for _ in range(policy.spin):
            if ready():
                return True
        words, index, semaphore = self.words, self.index, self._semaphore
        companions = self.companions
        clock, poll_interval = policy.clock, policy.poll_interval
        while True:
            if deadline is None:
                block = poll_interval
            else:
                block = deadline - clock()
                if block <= 0:
                    return ready()
                if block > poll_interval:
                    block = poll_interval
            words[index] = 1
            for flag_words, flag in companions:
                flag_words[flag] = 1
            _lock()
            _unlock()
            if ready():
                words[index] = 0
                for flag_words, flag in companions:
                    flag_words[flag] = 0
                return True
            try:
                semaphore.acquire(block)
                posted = True
            except posix_ipc.BusyError:
                posted = False
            words[index] = 0
            for flag_words, flag in companions:
                flag_words[flag] = 0
            if ready():
                return True
            if not posted and check is not None:
                check()


def end_watch(ring: Ring, end: int, describe: str,
              pending: Callable[[], bool] | None = None) -> Callable[[], None]:
    """A check of the process at one end of a ring, for wait_until.

    Raises PeerClosedError if that end was closed, PeerDiedError if its process is gone (pid
    and start time); does nothing while nobody has attached to the end, nor while pending()
    says frames are still there to read (a reader drains what a dead writer committed).
    describe names the peer in the message.
    """
    def check() -> None:
        closed = ring.end_closed(end)  # loaded before pending(): frames come before "closed"
        pid, start_time = ring.end_process(end)
        if not closed and (not pid or is_alive(pid, start_time)):
            return
        if pending is not None and pending():
            return
        if closed:
            raise PeerClosedError(f"{describe} closed ring {ring.name}", pid=pid)
        raise PeerDiedError(f"{describe} (pid {pid}) died; ring {ring.name}", pid=pid)
    return check


class RingWriter:
    """The writing end of a ring, with blocking writes.

    Ownership: one thread of the one process that writes the ring. data_slot is the reader's
    slot (notified after each commit); space_slot is this writer's (it parks there when the ring
    is full, and the reader notifies it after releasing). A blocked write checks the reader end
    (closed, or its process gone); peer names the reader in error messages.

    The wake-up check costs a full fence per frame; a writer that sends bursts may write them
    with self.ring.try_write (no wake-up) and call wake() once after the burst.
    """

    def __init__(self, ring: Ring, data_slot: WakeSlot, space_slot: WakeSlot,
                 peer: str = "reader", policy: WaitPolicy = DEFAULT_POLICY) -> None:
        self.ring = ring
        self._try_write = ring.try_write
        self._data_slot = data_slot
        self._notify = data_slot.notify  # after each write: the reader's pending flags, wake
        self._space_slot = space_slot
        self._check = end_watch(ring, READER_END, peer)
        self._policy = policy

    def wake(self) -> None:
        """Wake the reader if it is parked (after frames written with self.ring.try_write)."""
        self._notify()

    def try_write(self, frame, frame_type: int = rd.DATA_TYPE) -> bool:
        """Ring.try_write, then wake the reader if it is parked."""
        if self._try_write(frame, frame_type):
            self._notify()
            return True
        return False

    def write(self, frame, timeout: float | None = None, frame_type: int = rd.DATA_TYPE) -> bool:
        """Write frame, waiting up to timeout seconds (None: forever) for room, and wake the
        reader if it is parked.

        A message longer than the ring's largest frame goes as fragments, the reader woken as
        they go (Ring.try_write); after a timeout part of it may be out (ring.sending): write
        it again, or give up the ring.

        Returns False on timeout. Raises PeerDiedError / PeerClosedError when the reader is gone,
        ValueError for an oversize frame (see Ring.try_write).
        """
        if self._try_write(frame, frame_type) or self._wait_for_room(
                lambda: self._attempt(frame, frame_type), timeout):
            self._notify()
            return True
        return False

    def _attempt(self, frame, frame_type: int) -> bool:
        """One more try_write while waiting for room; fragments it wrote wake the reader."""
        if self._try_write(frame, frame_type):
            return True
        if self.ring.sending:
            self._notify()
        return False

    def _wait_for_room(self, attempt, timeout: float | None) -> bool:
        self._notify()  # frames written without a wake-up must not wait behind us
        return self._space_slot.wait_until(attempt, self._policy.deadline(timeout),
                                           self._policy, self._check)

    def claim(self, size: int, timeout: float | None = None, frame_type: int = rd.DATA_TYPE):
        """Ring.claim, waiting up to timeout seconds for room; None on timeout."""
        ring = self.ring
        view = ring.claim(size, frame_type)
        if view is not None:
            return view
        claimed = []

        def attempt() -> bool:
            claimed.append(ring.claim(size, frame_type))
            return claimed[-1] is not None
        return claimed[-1] if self._wait_for_room(attempt, timeout) else None

    def commit(self, length: int | None = None) -> None:
        """Ring.commit, then wake the reader if it is parked."""
        self.ring.commit(length)
        self._notify()

    def abort(self) -> None:
        """Ring.abort: drop the open claim."""
        self.ring.abort()

    def close(self) -> None:
        """Mark the writer end closed (the reader sees end of stream) and wake the reader."""
        self.ring.close_end(WRITER_END)
        self._notify()


class RingReader:
    """The reading end of a ring, with blocking reads.

    Ownership: one thread of the one process that reads the ring. data_slot is this reader's
    (it parks there when the ring is empty); space_slot is the writer's (notified after each
    release). check raises when the writer is gone. Views returned by read() stay valid until
    release(); release before blocking on a ring that held frames may fill. A blocked read
    checks the writer end (closed, or its process gone) once every committed frame was read;
    peer names the writer in error messages.
    """

    def __init__(self, ring: Ring, data_slot: WakeSlot, space_slot: WakeSlot,
                 peer: str = "writer", policy: WaitPolicy = DEFAULT_POLICY) -> None:
        self.ring = ring
        self._read = ring.read
        self._release = ring.release
        self._data_slot = data_slot
        self._space_slot = space_slot
        if space_slot.pending is not None:
            raise ValueError("a reader's space slot takes no pending flag")
        self._notify_space = space_slot.notify
        """Wake the writer if it is parked, after the head moved (a space slot has no
        pending flag, so its notify() is the fence and the flag check)."""
        self._check = end_watch(ring, WRITER_END, peer, ring.readable)
        self._policy = policy

    def read(self, timeout: float | None = None, stop: Callable[[], bool] | None = None):
        """The next frame's payload as a memoryview, waiting up to timeout seconds (None:
        forever); None on timeout, or as soon as stop() (if given) is true while no frame
        is there — another thread that makes stop() true calls interrupt() after, so a
        parked reader sees it at once.

        Raises PeerClosedError once the writer closed and every frame was read, PeerDiedError
        once the writer died and every committed frame was read (a frame it claimed and never
        committed is never seen).
        """
        view = self._read()
        if view is not None:
            return view
        ring = self.ring
        if ring.assembling:  # fragments copied out and freed: the writer may wait for room
            self._notify_space()
        if timeout is not None and timeout <= 0:
            # A look, not a wait: no spin (a broker's loop looks at its outbound
            # connections every turn). The writer's end is checked as a wait would.
            if ring.end_closed(WRITER_END):
                self._check()
                return self._read()
            return None
        deadline = self._policy.deadline(timeout)
        if stop is None:
            def ready() -> bool:
                return ring.readable() or ring.end_closed(WRITER_END)
        else:
            if stop():
                return None

            def ready() -> bool:
                return ring.readable() or ring.end_closed(WRITER_END) or stop()
        while True:
            if ring.end_closed(WRITER_END):
                self._check()  # raises PeerClosedError once nothing is left to read
            if not self._data_slot.wait_until(ready, deadline, self._policy, self._check):
                return None
            view = self._read()
            if view is not None:
                return view
            if ring.assembling:
                self._notify_space()
            if stop is not None and stop():
                return None

    def interrupt(self) -> None:
        """Wake this reader if it is parked, so a read() re-checks its stop() (any thread)."""
        self._data_slot.notify()

    def release(self) -> None:
        """Ring.release (frees every frame read so far), then wake the writer if it is parked."""
        self._release()
        self._notify_space()

    def close(self) -> None:
        """Mark the reader end closed (a blocked writer raises PeerClosedError) and wake it."""
        self.ring.close_end(READER_END)
        self._space_slot.notify()
