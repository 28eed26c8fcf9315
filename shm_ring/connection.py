"""Connections between client processes and a broker process.

A connection is two rings: the request ring (the client writes, the broker reads) and the
response ring (the broker writes, the client reads). The broker waits for all its connections
on one doorbell; a client waits on its connection's own semaphores.

Opening a connection (any time while the broker runs):

1. The broker's Listener creates the doorbell ``/ringlog.<c>.b<id>.doorbell`` and the listener
   ``/ringlog.<c>.b<id>.listener`` (layout in listener_descriptor), writing its pid last.
2. connect() maps the listener (retrying until it exists and its broker is alive), creates the
   connection's objects — ``/ringlog.<c>.b<id>.c<pid>-<token>`` + ``.req``, ``.rsp``,
   ``.req.space``, ``.rsp.data`` — records itself as request writer and response reader,
   then, holding an flock on the listener, writes ``c<pid>-<token>`` into the accept ring and
   rings the doorbell.
3. Listener.accept_pending() maps the announced rings, records the broker as request reader
   and response writer — its pid in the response ring is the "accepted" signal — and wakes the
   client, which was waiting for that.

Who wakes whom::

    request frame written    -> doorbell            (broker waits there)
    request frames released  -> .req.space          (client waits there when the ring is full)
    response frame written   -> .rsp.data           (client waits there when the ring is empty)
    response space released  -> doorbell            (only after a try_send found the ring full)
    client closed            -> doorbell

Outbound connections of a broker. A broker may itself be a client of another broker (a
follower fetching from its leader). Its loop blocks in one place, its Listener's doorbell, so
a response arriving on such a connection must ring that doorbell, not the connection's
``.rsp.data`` semaphore. ``connect(..., waker=listener)`` makes such a connection:

- before announcing, the client writes ``1 + its own broker id`` in the reader end of the
  response ring (ring_descriptor.END_DOORBELL_OFFSET); the accepting broker reads it once and
  posts that broker's doorbell semaphore instead of ``.rsp.data`` for "response frame
  written" (and when it closes the connection). The parked flag it checks first stays the
  response ring's reader-parked flag: the protocol of wakeup is unchanged, only the
  semaphore differs;
- the waker Listener watches the connection: its wait predicate also holds while a response
  frame is there to read or the accepting broker closed its end, and while it parks it
  raises the response ring's reader-parked flag together with its doorbell flag
  (WakeSlot.companions), in the same set-fence-recheck order. A response written while the
  listener's broker is parked therefore wakes it at once; one written while it is busy costs
  the writer no syscall;
- connect() returns as soon as the connection is announced, without waiting for it to be
  accepted (a waiting broker would stall its own loop; two brokers connecting to each other
  at once would each wait for the other). Requests sent before the accept wait in the
  request ring; ``accepted`` says whether it happened; until then liveness checks look at the
  listener's broker pid. The connection is meant for non-blocking use from the loop
  (``send(..., timeout=0)``, ``recv(timeout=0)``, ``check()``); it must be closed before its
  waker Listener.

A damaged listener (another process of the same user wrote over it) damages only the
connections it carried: the broker checks its listener on every accept_pending() — its own
words (magic, pid, start time, closed flag), the accept ring's header (magic, capacity, a
head it alone moves, a tail within one capacity of it) and every announcement it reads (a
data frame of 1..MAX_ANNOUNCEMENT bytes) — and on a mismatch rebuilds it in place under the
accept lock: its words rewritten, the accept ring formatted empty, and every connection
still waiting to be accepted found by its names (an announcement the damage erased is not
lost) and accepted. A client that finds the accept ring unreadable meanwhile retries until
its timeout, then gets ConnectionRefusedError (retriable) naming the damage.

Ownership of names: the client creates and unlinks its connection's four objects; the broker
creates and unlinks the listener and the doorbell. When a client dies, the broker's reap()
notices it (pid and start time) and unlinks the client's objects; when the broker dies, the
client's next blocking call notices (within one poll interval) and raises PeerDiedError naming
the broker and the connection, after unlinking the connection's objects. When neither end is
left to do it (a client that died before it was accepted, or one that died together with the
broker incarnation it had connected to), the broker id's next Listener unlinks the objects
within its orphan_interval (Listener.reap).
"""
from __future__ import annotations

import errno
import fcntl
import heapq
import logging
import secrets
import time
from collections.abc import Callable

import posix_ipc

from shm_ring import listener_descriptor as ld, ring_descriptor as rd
from shm_ring.doorbell import Doorbell
from shm_ring.errors import PeerClosedError, PeerDiedError
from shm_ring.liveness import current_process, is_alive
from shm_ring.naming import (
    NamedSemaphore,
    SharedRegion,
    broker_part,
    check_connection_part,
    connection_part,
    connection_parts,
    doorbell_name,
    listener_name,
    object_name,
    refuse_squatted,
    unlink_orphan_connections,
)
from shm_ring.ring import READER_END, WRITER_END, Ring, format_ring
from shm_ring.wakeup import (
    DEFAULT_POLICY,
    READER_PARKED_WORD,
    WRITER_PARKED_WORD,
    RingReader,
    RingWriter,
    WaitPolicy,
    WakeSlot,
    end_watch,
    full_fence,
)

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 1 << 20
"""Data bytes of each ring of a connection (the largest frame is about half of it)."""

_MAGIC_WORD = ld.MAGIC_OFFSET // rd.WORD_LENGTH
_INSTANCE = slice(ld.INSTANCE_OFFSET // rd.WORD_LENGTH,
                  ld.INSTANCE_OFFSET // rd.WORD_LENGTH + ld.INSTANCE_WORDS)
NO_INSTANCE = (0, 0)
"""The instance of a listener made without one."""
_BROKER_PID_WORD = ld.BROKER_PID_OFFSET // rd.WORD_LENGTH
_BROKER_START_WORD = ld.BROKER_START_TIME_OFFSET // rd.WORD_LENGTH
_BROKER_CLOSED_WORD = ld.BROKER_CLOSED_OFFSET // rd.WORD_LENGTH
_DOORBELL_WORD = ld.DOORBELL_PARKED_OFFSET // rd.WORD_LENGTH
_PENDING_WORD = ld.REQUESTS_PENDING_OFFSET // rd.WORD_LENGTH
_SLOT_WORD = (WRITER_END + rd.END_PENDING_SLOT_OFFSET) // rd.WORD_LENGTH
"""In the response ring's header words: 1 + the connection's pending slot (0: none)."""
_LOCK_RETRY = 0.0005
"""Seconds between attempts at the accept lock or at a listener that is not there yet."""

_REBUILD_LOCK_WAIT = 0.1
"""Seconds a broker waits for the accept lock before rebuilding its listener without it (a
process holding the lock that long is not a client taking its turn)."""
_RING_MAGIC_WORD = rd.MAGIC_OFFSET // rd.WORD_LENGTH
_RING_CAPACITY_WORD = rd.CAPACITY_OFFSET // rd.WORD_LENGTH


def _describe_broker(cluster_id: str, broker_id: int) -> str:
    return f"broker {broker_id} of cluster {cluster_id}"


class _ConnectionObjects:
    """The four named objects of one connection and the Rings this process made over them.

    Ownership: created (and unlinked) by the client; opened by the broker.
    """

    def __init__(self, base: str, req: SharedRegion, rsp: SharedRegion,
                 req_space: NamedSemaphore, rsp_data: NamedSemaphore) -> None:
        self.base = base
        self.req_region = req
        self.rsp_region = rsp
        self.req_space = req_space
        self.rsp_data = rsp_data
        self.req = Ring(req.buf, base + ".req")
        self.rsp = Ring(rsp.buf, base + ".rsp")

    @classmethod
    def create(cls, base: str, capacity: int) -> _ConnectionObjects:
        made: list = []
        try:
            req = SharedRegion.create(base + ".req", rd.ring_length(capacity))
            made.append(req)
            format_ring(req.buf, capacity)
            rsp = SharedRegion.create(base + ".rsp", rd.ring_length(capacity))
            made.append(rsp)
            format_ring(rsp.buf, capacity)
            req_space = NamedSemaphore.create(base + ".req.space")
            made.append(req_space)
            rsp_data = NamedSemaphore.create(base + ".rsp.data")
            made.append(rsp_data)
            return cls(base, req, rsp, req_space, rsp_data)
        except BaseException:
            for thing in made:
                thing.unlink()
                thing.close()
            raise

    @classmethod
    def open(cls, base: str) -> _ConnectionObjects:
        opened: list = []
        try:
            req = SharedRegion.open(base + ".req")
            opened.append(req)
            rsp = SharedRegion.open(base + ".rsp")
            opened.append(rsp)
            req_space = NamedSemaphore.open(base + ".req.space")
            opened.append(req_space)
            rsp_data = NamedSemaphore.open(base + ".rsp.data")
            opened.append(rsp_data)
            return cls(base, req, rsp, req_space, rsp_data)
        except BaseException:
            for thing in opened:
                thing.close()
            raise

    def close(self) -> None:
        self.req.release_views()
        self.rsp.release_views()
        for thing in (self.req_region, self.rsp_region, self.req_space, self.rsp_data):
            thing.close()

    def unlink(self) -> None:
        for thing in (self.req_region, self.rsp_region, self.req_space, self.rsp_data):
            thing.unlink()


class Connection:
    """The broker's side of one client connection (non-blocking: the broker waits on its
    Listener).

    Ownership: made by Listener.accept_pending(), dropped by Listener.reap() or close(); only
    the broker thread that owns the Listener calls it. The named objects belong to the client.
    """

    def __init__(self, objects: _ConnectionObjects,
                 wake_doorbell: NamedSemaphore | None = None,
                 armed: set[Connection] | None = None) -> None:
        self.name = objects.base
        self._objects = objects
        self._req = objects.req
        self._rsp = objects.rsp
        self._rsp_words = objects.rsp.header_words
        self._req_space = WakeSlot(objects.req.header_words, WRITER_PARKED_WORD,
                                   objects.req_space.semaphore)
        self._wake_doorbell = wake_doorbell  # a client broker's doorbell (module doc)
        self._rsp_data = WakeSlot(self._rsp_words, READER_PARKED_WORD,
                                  (wake_doorbell or objects.rsp_data).semaphore)
        self._armed = False
        self._armed_set = set() if armed is None else armed  # the Listener's: who is armed
        self._closed = False
        self.slot = -1
        """Its byte in the listener's requests pending flags (-1: none; Listener)."""
        self.client_pid, self._client_start_time = objects.req.end_process(WRITER_END)

    def _accept(self, slot: int = -1) -> None:
        """Record this broker process at the connection's broker ends, and the connection's
        pending slot before it (listener_descriptor), and wake the client."""
        me = current_process()
        self.slot = slot
        self._rsp_words[_SLOT_WORD] = slot + 1
        self._req.set_end(READER_END, *me)
        self._rsp.set_end(WRITER_END, *me)  # the response writer's pid says "accepted"
        self._rsp_data.notify()

    def recv(self):
        """The next request frame as a read-only memoryview, or None when there is none.

        Views stay valid until release(). A request longer than the ring's largest frame
        arrives whole (Ring.read); while it is part way in, the client is woken for room.
        """
        frame = self._req.read()
        if frame is None and self._req.assembling:
            self._req_space.notify()
        return frame

    def release(self) -> None:
        """Free every request frame received so far; wakes the client if it waits for room."""
        self._req.release()
        self._req_space.notify()

    @property
    def ring_occupancy(self) -> int:
        """Bytes written and not yet released in the request and response rings (0 once
        closed). Unlike the other methods, any thread may read it (``ring_usage``)."""
        return sum(occupied for occupied, _ in self.ring_usage)

    @property
    def ring_usage(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """``(bytes written and not yet released, capacity)`` of the request ring and of
        the response ring (no bytes once closed). Unlike the other methods, any thread may
        read it (the broker's stats publisher): it is four aligned 8-byte loads, each
        atomic, so the figures may mix moments but never a torn position."""
        req, rsp = self._req, self._rsp
        try:
            return ((req.tail_position - req.head_position, req.capacity),
                    (rsp.tail_position - rsp.head_position, rsp.capacity))
        except ValueError:  # the views were released: the connection closed
            return (0, req.capacity), (0, rsp.capacity)

    @property
    def max_response_frame(self) -> int:
        """The largest response frame this connection's response ring carries in one piece
        (and the most claim() takes); try_send carries longer ones as fragments."""
        return self._rsp.max_frame_length

    def try_send(self, frame, frame_type: int = rd.DATA_TYPE) -> bool:
        """Write a response frame; False when the response ring is full.

        After False, the client's next release rings the doorbell, so Listener.wait() returns
        and the broker can try again — with the same frame: one longer than the ring's
        largest frame goes as fragments (Ring.try_write), and False may mean part of it is
        out, the client woken to take it.
        """
        rsp = self._rsp
        if rsp.try_write(frame, frame_type):
            if self._armed:
                self._disarm()
            self._rsp_data.notify()
            return True
        return self._retry_send(lambda: rsp.try_write(frame, frame_type))

    def try_send_filled(self, key, length: int, fill, frame_type: int = rd.DATA_TYPE) -> bool:
        """try_send of a response of length bytes that fill(view, start) writes straight into
        the response ring, in one frame or, longer than the largest, fragment by fragment
        (Ring.try_write_filled: fill is used during this call only). After False, call
        again with the same key."""
        rsp = self._rsp
        return self._retry_send(lambda: rsp.try_write_filled(key, length, fill, frame_type),
                                rsp.try_write_filled(key, length, fill, frame_type))

    def _retry_send(self, attempt, done=False):
        """try_send after a first attempt (``done``: it succeeded): arm, ``attempt()`` once
        more; wake the client when a frame went out, or part of a message did."""
        if done or self._arm_and_retry(attempt):
            if self._armed:
                self._disarm()
            self._rsp_data.notify()
            return True
        if self._rsp.sending:
            self._rsp_data.notify()
        return False

    @property
    def sending(self):
        """The key (try_send_filled) or frame (try_send) of the response part way out, or
        None."""
        return self._rsp.sending_message

    def claim(self, size: int, frame_type: int = rd.DATA_TYPE):
        """Reserve a response frame of up to size bytes to fill in place (e.g. straight from a
        file); None when the ring is full (retry after Listener.wait(), as for try_send)."""
        rsp = self._rsp
        view = rsp.claim(size, frame_type)
        if view is None:
            view = self._arm_and_retry(lambda: rsp.claim(size, frame_type))
        if view is not None and self._armed:
            self._disarm()
        return view

    def commit(self, length: int | None = None) -> None:
        """Publish the claimed response frame (length bytes; default all) and wake the client."""
        self._rsp.commit(length)
        self._rsp_data.notify()

    def abort(self) -> None:
        """Drop the claimed response frame."""
        self._rsp.abort()

    def _arm_and_retry(self, attempt):
        """Ask the client to ring the doorbell when it frees room, then attempt() once more
        and return its result.

        The flag is the response ring's writer-parked flag; set, fence, retry is the same
        handshake as parking (wakeup), so a release between the failure and the flag is not
        missed. While armed, Listener.wait() watches for the client clearing the flag.
        """
        words = self._rsp_words
        words[WRITER_PARKED_WORD] = 1
        full_fence()
        result = attempt()
        if result is None or result is False:
            self._armed = True
            self._armed_set.add(self)
        else:
            words[WRITER_PARKED_WORD] = 0
        return result

    def _disarm(self) -> None:
        """A send went through: stop watching for room (Listener.wait)."""
        self._armed = False
        self._armed_set.discard(self)

    def _room_freed(self) -> bool:
        """Armed after a failed send, and the client freed room since."""
        return self._armed and not self._rsp_words[WRITER_PARKED_WORD]

    @property
    def client_closed(self) -> bool:
        """True once the client closed its side."""
        return self._req.end_closed(WRITER_END)

    def client_alive(self) -> bool:
        """True while the client process that opened the connection runs."""
        return is_alive(self.client_pid, self._client_start_time)

    def close(self) -> None:
        """Drop the connection on the broker's side: the client's next call raises
        PeerClosedError. Does not unlink (the client owns the names). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._armed_set.discard(self)
        self._req.close_end(READER_END)
        self._rsp.close_end(WRITER_END)
        self._rsp_data.notify()
        self._req_space.notify()
        self._objects.close()
        if self._wake_doorbell is not None:
            self._wake_doorbell.close()

    def unlink(self) -> None:
        """Remove the connection's names (for a client that died); safe to call twice."""
        self._objects.unlink()

    def __repr__(self) -> str:
        return f"Connection({self.name!r}, client_pid={self.client_pid})"


class Listener:
    """A broker's endpoint: its listener, its doorbell and its accepted connections.

    Ownership: created by the broker process, which unlinks the listener and doorbell in
    close(); one broker thread calls every method. If a listener of the same broker id is left
    by a dead process it is taken over; if its process is alive, FileExistsError.

    Typical loop::

        while running:
            listener.wait(timeout=0.1)
            for conn in listener.accept_pending(): ...
            for conn in listener.ready():
                while (frame := conn.recv()) is not None: ...   # then conn.release()
            for conn in listener.reap(): ...                    # closed or dead clients

    ready() and reap() look at the connections whose client set its byte of the requests
    pending flags since the last look (listener_descriptor), not at every connection; reap()
    looks at every one every liveness_interval.
    """

    def __init__(self, cluster_id: str, broker_id: int, *, policy: WaitPolicy = DEFAULT_POLICY,
                 liveness_interval: float = 0.5, orphan_interval: float = 5.0,
                 instance: tuple[int, int] = NO_INSTANCE) -> None:
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self.instance = tuple(instance)  # listener_descriptor.INSTANCE_OFFSET
        if len(self.instance) != ld.INSTANCE_WORDS:
            raise ValueError(f"instance must be {ld.INSTANCE_WORDS} ints, found {instance!r}")
        self.name = listener_name(cluster_id, broker_id)
        self._policy = policy
        self._liveness_interval = liveness_interval
        self._next_liveness = policy.clock()
        self._orphan_interval = orphan_interval
        self._next_orphan_sweep = policy.clock()  # the first reap() sweeps
        self._connections: list[Connection] = []
        self._armed: set[Connection] = set()  # connections waiting for room (Connection)
        # What the requests pending flags leave to look at (wait, ready, reap): the
        # connections whose byte was set (or that were just accepted) for ready() and for
        # reap()'s closed flags, those that had requests at the last look (a turn may leave
        # some in the ring), and those without a slot, looked at whenever the flag was set.
        self._look: dict[Connection, None] = {}
        self._closes: dict[Connection, None] = {}
        self._busy: list[Connection] = []
        self._unslotted: list[Connection] = []
        self._free_slots = list(range(ld.PENDING_SLOTS))  # a heap: the lowest is given
        self._slot_owners: list[Connection | None] = [None] * ld.PENDING_SLOTS
        self._slot_limit = 0  # 1 + the highest slot given: the bytes a look reads
        self._watched: list[ClientConnection] = []  # outbound connections (module doc)
        self._watched_rings: list[Ring] = []
        self._closed = False
        self._accept_head = 0  # the accept ring's head: only this listener moves it
        self._take_over_stale()
        region = SharedRegion.create(self.name, ld.LISTENER_LENGTH, keep_fd=True)
        words = region.buf[: ld.ACCEPT_RING_OFFSET].cast("q")
        try:
            doorbell = Doorbell.create(cluster_id, broker_id, words, _DOORBELL_WORD,
                                       _PENDING_WORD)
            try:
                accept_area = region.buf[ld.ACCEPT_RING_OFFSET:ld.PENDING_SLOTS_OFFSET]
                format_ring(accept_area, ld.ACCEPT_CAPACITY)
                self._accept = Ring(accept_area, self.name + " accept ring")
                accept_area.release()
            except BaseException:
                doorbell.unlink()
                doorbell.close()
                raise
        except BaseException:
            words.release()
            region.unlink()
            region.close()
            raise
        self._region = region
        self._words = words
        self._flags = region.buf[ld.PENDING_SLOTS_OFFSET:ld.LISTENER_LENGTH]
        self.doorbell = doorbell
        self._me = current_process()
        self.rebuilds = 0
        """How many times the listener was found damaged and rebuilt."""
        self._write_identity()

    def _write_identity(self) -> None:
        words = self._words
        pid, start_time = self._me
        words[_BROKER_CLOSED_WORD] = 0
        for at, value in zip(range(_INSTANCE.start, _INSTANCE.stop), self.instance):
            words[at] = value
        words[_MAGIC_WORD] = ld.MAGIC
        words[_BROKER_START_WORD] = start_time
        words[_BROKER_PID_WORD] = pid  # last: the listener is ready

    def _damage(self) -> str | None:
        """What is wrong with the listener's words or its accept ring's header, or None."""
        words, ring = self._words, self._accept.header_words
        pid, start_time = self._me
        if (words[_MAGIC_WORD], words[_BROKER_PID_WORD], words[_BROKER_START_WORD],
                words[_BROKER_CLOSED_WORD]) != (ld.MAGIC, pid, start_time, 0) or tuple(
                words[_INSTANCE]) != self.instance:
            return (f"identity words (magic {words[_MAGIC_WORD]:#x}, pid "
                    f"{words[_BROKER_PID_WORD]}, start time {words[_BROKER_START_WORD]}, closed"
                    f" {words[_BROKER_CLOSED_WORD]}, instance {tuple(words[_INSTANCE])})")
        if ring[_RING_MAGIC_WORD] != rd.MAGIC or ring[_RING_CAPACITY_WORD] != ld.ACCEPT_CAPACITY:
            return (f"accept ring header (magic {ring[_RING_MAGIC_WORD]:#x}, capacity "
                    f"{ring[_RING_CAPACITY_WORD]})")
        head, tail = self._accept.head_position, self._accept.tail_position
        if head != self._accept_head or not 0 <= tail - head <= ld.ACCEPT_CAPACITY or tail & 7:
            return f"accept ring positions (head {head}, tail {tail})"
        return None

    def _rebuild(self, damage: str) -> list[Connection]:
        """Rewrite the listener and format its accept ring afresh (module doc), then accept
        the connections still waiting (their announcements may be gone with the damage);
        return those."""
        fd = self._region.fd
        deadline = time.monotonic() + _REBUILD_LOCK_WAIT
        locked = False
        while not locked:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(_LOCK_RETRY)
        try:
            self._write_identity()
            self._accept.release_views()
            area = self._region.buf[ld.ACCEPT_RING_OFFSET:ld.PENDING_SLOTS_OFFSET]
            format_ring(area, ld.ACCEPT_CAPACITY)
            self._accept = Ring(area, self.name + " accept ring")
            area.release()
            self._accept_head = 0
        finally:
            if locked:
                fcntl.flock(fd, fcntl.LOCK_UN)
        self.rebuilds += 1
        held = {connection.name for connection in self._connections}
        stem = object_name(self.cluster_id, broker_part(self.broker_id)) + "."
        adopted = []
        for part in connection_parts(self.cluster_id, self.broker_id):
            if stem + part not in held:
                connection = self._accept_one(part, waiting_only=True)
                if connection is not None:
                    self._connections.append(connection)
                    adopted.append(connection)
        log.warning("%s: damaged %s%s; rebuilt it and accepted the %d connection(s) waiting",
                    self.name, damage, "" if locked else " (accept lock not free)",
                    len(adopted))
        return adopted

    def _take_over_stale(self) -> None:
        """Remove a listener and doorbell of this broker id left by a dead process."""
        try:
            old = SharedRegion.open(self.name)
        except FileNotFoundError:
            pass
        else:
            words = old.buf[: ld.ACCEPT_RING_OFFSET].cast("q")
            pid, start_time = words[_BROKER_PID_WORD], words[_BROKER_START_WORD]
            closed = words[_BROKER_CLOSED_WORD]
            words.release()
            old.close()
            if pid and not closed and is_alive(pid, start_time):
                raise FileExistsError(
                    f"{_describe_broker(self.cluster_id, self.broker_id)} is already listening"
                    f" at {self.name} (pid {pid})")
            log.warning("%s: taking over the listener left by pid %d", self.name, pid)
            old.unlink()
        doorbell = doorbell_name(self.cluster_id, self.broker_id)
        refuse_squatted(doorbell, True)  # never remove another user's semaphore
        try:  # a doorbell without a listener: its broker died while starting
            posix_ipc.unlink_semaphore(doorbell)
        except posix_ipc.ExistentialError:
            pass

    @property
    def connections(self) -> list[Connection]:
        """The accepted connections not yet dropped (a copy)."""
        return list(self._connections)

    def accept_pending(self) -> list[Connection]:
        """Accept every connection announced since the last call; return the new ones.

        Checks the listener first, and each announcement: a damaged one is rebuilt (module
        doc), and the connections that were waiting are among those returned."""
        accepted = []
        damage = self._damage()
        accept = self._accept
        while damage is None and (view := accept.read()) is not None:
            if not 0 < len(view) <= ld.MAX_ANNOUNCEMENT or accept.frame_type != rd.DATA_TYPE:
                damage = f"announcement (type {accept.frame_type}, {len(view)} bytes)"
                del view
                break
            part = bytes(view).decode("ascii", "replace")
            del view
            accept.release()
            self._accept_head = accept.head_position
            if self._accept_head > accept.tail_position:
                damage = (f"accept ring frames (read to {self._accept_head}, past the tail "
                          f"{accept.tail_position})")
                break
            connection = self._accept_one(part)
            if connection is not None:
                self._connections.append(connection)
                accepted.append(connection)
        if damage is not None:
            accepted += self._rebuild(damage)
        for connection in accepted:  # requests or a close may have come before the accept
            self._look[connection] = None
            self._closes[connection] = None
        return accepted

    def _accept_one(self, part: str, waiting_only: bool = False) -> Connection | None:
        """Open and accept the connection ``part``; None if it cannot be (logged why).
        ``waiting_only``: leave it alone unless its client waits for an accept (a rebuild's
        search by names; an announcement of it may still come, and is then ignored)."""
        try:
            check_connection_part(part)
        except ValueError as exc:
            log.warning("%s: ignoring an announcement: %s", self.name, exc)
            return None
        base = object_name(self.cluster_id, broker_part(self.broker_id), part)
        if any(connection.name == base for connection in self._connections):
            log.info("%s: connection %s announced again; already accepted", self.name, base)
            return None
        try:
            objects = _ConnectionObjects.open(base)
        except FileNotFoundError:
            if not waiting_only:
                log.info("%s: client of %s gave up before it was accepted", self.name, base)
            return None
        except ValueError as exc:  # not rings laid out by connect(): refuse, keep serving
            log.warning("%s: ignoring connection %s: %s", self.name, base, exc)
            return None
        if waiting_only and (objects.rsp.end_process(WRITER_END)[0]
                             or not objects.rsp.end_process(READER_END)[0]):
            objects.close()  # accepted before (by a dead incarnation), or not ready yet
            return None
        wake = objects.rsp.end_doorbell(READER_END)
        wake_doorbell = None
        if wake is not None:
            try:
                wake_doorbell = NamedSemaphore.open(doorbell_name(self.cluster_id, wake))
            except FileNotFoundError:
                log.info("%s: client of %s asked to be woken through broker %d's doorbell,"
                         " which is not there", self.name, base, wake)
                objects.close()
                return None
        connection = Connection(objects, wake_doorbell, self._armed)
        if connection.client_closed:
            connection.close()
            return None
        if not connection.client_alive():
            log.info("%s: client of %s died before it was accepted", self.name, base)
            connection.close()
            connection.unlink()
            return None
        slot = -1
        if wake is None and self._free_slots:  # outbound clients get none (listener_descriptor)
            slot = heapq.heappop(self._free_slots)
            self._slot_owners[slot] = connection
            self._flags[slot] = 0
            if slot >= self._slot_limit:
                self._slot_limit = slot + 1
        else:
            self._unslotted.append(connection)
        connection._accept(slot)
        return connection

    def _forget(self, connection: Connection) -> None:
        """A connection dropped: its slot is free again (its byte cleared)."""
        slot = connection.slot
        if slot >= 0 and self._slot_owners[slot] is connection:
            self._slot_owners[slot] = None
            self._flags[slot] = 0
            heapq.heappush(self._free_slots, slot)
        elif connection in self._unslotted:
            self._unslotted.remove(connection)

    def _has_event(self) -> bool:
        """The doorbell's spin predicate: the requests pending flag (a request frame or a
        close on any connection), an announcement, requests left in a connection that had
        some at the last ready(), room freed after a failed try_send, or a response on a
        watched outbound connection. Plain loops, no generator per check."""
        if self._words[_PENDING_WORD] or self._accept.readable():
            return True
        for connection in self._busy:
            if not connection._closed and connection._req.readable():
                return True
        for connection in self._armed:
            if connection._room_freed():
                return True
        for ring in self._watched_rings:  # noqa: SIM110
            if ring.readable() or ring.end_closed(WRITER_END):
                return True
        return False

    def watch(self, connection: ClientConnection) -> None:
        """Wake wait() for responses on this outbound connection (connect(waker=...) calls
        it; see "Outbound connections of a broker" in the module doc)."""
        ring = connection._objects.rsp
        self._watched.append(connection)
        self._watched_rings.append(ring)
        self.doorbell.slot.companions.append((ring.header_words, READER_PARKED_WORD))

    def unwatch(self, connection: ClientConnection) -> None:
        """Stop watching an outbound connection (its close() calls it); safe to call twice."""
        if connection not in self._watched:
            return
        at = self._watched.index(connection)
        del self._watched[at], self._watched_rings[at]
        del self.doorbell.slot.companions[at]

    @property
    def watched(self) -> list[ClientConnection]:
        """The outbound connections watched (a copy)."""
        return list(self._watched)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until there is something to do: a request, an announced connection, a client
        that closed, room after a failed try_send, or a response (or the peer's close) on a
        watched outbound connection. False after timeout seconds.

        Requests and closes are seen through the listener's requests pending flag, which
        clients set after publishing (listener_descriptor), and the requests left from the
        last turn in the connections that had some (ready()), so a wait costs the same with
        one connection or a thousand. The flag is cleared when the wait ends, together with
        the connections' bytes of the requests pending flags that were set, before the
        caller looks at those connections (ready(), reap(): call them after every wait): a
        frame committed before the clear is found by that look, one committed after sets the
        flag again and ends the next wait at once.
        """
        woke = self.doorbell.wait(self._has_event, timeout, self._policy)
        if self._words[_PENDING_WORD]:
            self._take_pending()
        return woke

    def _take_pending(self) -> None:
        """Clear the requests pending flag, then the connections' bytes that were set: those
        connections (and the ones without a slot) are looked at next (ready(), reap()). The
        order, fences included, is listener_descriptor's."""
        self._words[_PENDING_WORD] = 0
        full_fence()  # the clear is visible before any byte is loaded
        look, closes = self._look, self._closes
        limit = self._slot_limit
        if limit:
            flags = self._flags
            marked = self._marked(limit)
            at = marked.find(1)
            if at >= 0:
                owners = self._slot_owners
                while at >= 0:
                    flags[at] = 0
                    owner = owners[at]
                    if owner is not None:
                        look[owner] = None
                        closes[owner] = None
                    at = marked.find(1, at + 1)
                full_fence()  # the clears are visible before any ring's tail is loaded
        for connection in self._unslotted:
            look[connection] = None
            closes[connection] = None

    def _marked(self, limit: int) -> bytes:
        """The requests pending flags of slots below limit (a client sets its byte to 1;
        any other value is not one of its sets)."""
        return self._flags[:limit].tobytes()

    def ready(self) -> list[Connection]:
        """Connections with at least one request frame to recv().

        Looks at the connections whose byte of the requests pending flags was set (wait()
        cleared them, or they are set now; listener_descriptor), those without a slot if the
        flag was set, the ones just accepted, and those that had requests at the last call: a
        frame is committed before its client sets its byte, so no other can have one."""
        if self._words[_PENDING_WORD]:
            self._take_pending()
        look = self._look
        if look:
            self._look = {}
            for connection in self._busy:
                look[connection] = None
            busy = [c for c in look if not c._closed and c._req.readable()]
        else:
            busy = [c for c in self._busy if not c._closed and c._req.readable()]
        self._busy = busy
        return busy

    def reap(self) -> list[Connection]:
        """Drop connections whose client closed, or died (then unlink its objects).

        Closed flags are checked for the connections whose byte of the requests pending
        flags was set since the last reap() (a close sets it; see wait()), and every closed
        flag and client process at most every liveness_interval seconds. Every
        orphan_interval seconds it also unlinks the objects of connections to this broker id
        that nobody owns any more (naming.unlink_orphan_connections: a client that died
        before this listener accepted it, or a dead client of this broker id's previous
        incarnation). Returns the dropped connections.
        """
        now = self._policy.clock()
        check_processes = now >= self._next_liveness
        if check_processes:
            self._next_liveness = now + self._liveness_interval
        # the flag is left for wait() and ready(): a request may have come with it
        closes = self._closes
        if closes:
            self._closes = {}
        if now >= self._next_orphan_sweep:
            self._next_orphan_sweep = now + self._orphan_interval
            held = {connection.name for connection in self._connections}
            for name in unlink_orphan_connections(self.cluster_id, self.broker_id, held):
                log.info("%s: unlinked %s, left by a dead client", self.name, name)
        dropped = []
        if check_processes:
            for connection in self._connections:
                if connection.client_closed:
                    connection.close()
                    dropped.append(connection)
                elif not connection.client_alive():
                    log.info("%s: client pid %d of %s died; dropping it", self.name,
                             connection.client_pid, connection.name)
                    connection.close()
                    connection.unlink()
                    dropped.append(connection)
        else:
            for connection in closes:
                if not connection._closed and connection.client_closed:
                    connection.close()
                    dropped.append(connection)
        if dropped:
            self._connections = [c for c in self._connections if c not in dropped]
            for connection in dropped:
                self._forget(connection)
        return dropped

    def drop(self, connection: Connection) -> None:
        """Close one connection the broker gives up on (garbage on it, or an error Kafka
        answers by closing) and stop watching it; its client's next call raises
        PeerClosedError and the client unlinks the names, which it owns."""
        if connection in self._connections:
            self._connections.remove(connection)
            self._forget(connection)
        try:
            connection.close()
        except BufferError as exc:  # a view of the rings is still referenced somewhere
            log.error("%s: closing connection %s left its mapping open: %s", self.name,
                      connection.name, exc)

    def close(self) -> None:
        """Close every connection (clients get PeerClosedError), then close and unlink the
        listener and the doorbell. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for connection in self._connections:
            connection.close()
        self._connections = []
        self._look, self._closes, self._busy, self._unslotted = {}, {}, [], []
        self._slot_owners = [None] * ld.PENDING_SLOTS
        for outbound in list(self._watched):  # their owner should have closed them first
            outbound.close()
        self._words[_BROKER_CLOSED_WORD] = 1
        self.doorbell.unlink()
        self.doorbell.close()
        self._accept.release_views()
        self._flags.release()
        self._words.release()
        self._region.unlink()
        self._region.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class ClientConnection:
    """A client's connection to one broker (made by connect()).

    Ownership: the client process that connected owns the connection's named objects and
    unlinks them in close(), or when it finds the broker gone. Not thread-safe: one thread at a
    time calls it (kafka-python's sender thread both sends and receives) — except interrupt(),
    which any thread may call to cut short that thread's recv(). After the broker died
    or closed, every call raises the same PeerDiedError / PeerClosedError.

    With a ``waker`` (connect(waker=listener): a broker's outbound connection, see the module
    doc) responses ring that Listener's doorbell, which only the Listener's thread waits on:
    use the connection from that thread, without blocking.
    """

    def __init__(self, cluster_id: str, broker_id: int, listener: SharedRegion,
                 listener_words: memoryview, doorbell: Doorbell, objects: _ConnectionObjects,
                 policy: WaitPolicy, waker: Listener | None = None) -> None:
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self.name = objects.base
        self._listener = listener
        self._listener_words = listener_words
        self._flags = None  # the listener's requests pending flags, with a slot given
        slot = objects.rsp.header_words[_SLOT_WORD] - 1
        if waker is None and 0 <= slot < ld.PENDING_SLOTS:  # given at the accept, seen
            self._flags = listener.buf[ld.PENDING_SLOTS_OFFSET:ld.LISTENER_LENGTH]
            doorbell.use_flag(self._flags, slot)  # before the writer keeps its tuple
        self._doorbell = doorbell
        self._objects = objects
        self._policy = policy
        self._error: ConnectionError | None = None
        self._closed = False
        describe = _describe_broker(cluster_id, broker_id)
        req, rsp = objects.req, objects.rsp
        self._waker = waker
        self._writer = RingWriter(
            req, doorbell.slot,
            WakeSlot(req.header_words, WRITER_PARKED_WORD, objects.req_space.semaphore),
            describe, policy)
        data = objects.rsp_data.semaphore if waker is None else waker.doorbell.semaphore
        self._reader = RingReader(
            rsp, WakeSlot(rsp.header_words, READER_PARKED_WORD, data),
            WakeSlot(rsp.header_words, WRITER_PARKED_WORD, doorbell.semaphore),
            describe, policy)
        self._check_accepted = end_watch(req, READER_END, describe)
        self._describe = describe
        self._next_check = policy.clock() + policy.poll_interval
        # The per-request calls, bound once: claim/commit go to the request ring and the
        # doorbell directly (RingWriter's waits only when the ring is full), so a request
        # costs no call per layer (perf.ring_cost).
        self._clock = policy.clock
        self._req_claim = req.claim
        self._req_commit = req.commit
        self._ring_broker = doorbell.slot.notify  # RingWriter.commit's wake-up
        self._rsp_release = rsp.release
        self._notify_rsp_space = self._reader._notify_space  # RingReader.release's
        if waker is not None:
            waker.watch(self)

    @property
    def broker_pid(self) -> int:
        """The pid of the broker process serving the connection (0 until it accepted)."""
        return self._objects.rsp.end_process(WRITER_END)[0]

    @property
    def max_request_frame(self) -> int:
        """The largest request frame the request ring carries in one piece (and the most
        claim() takes); send() carries longer ones as fragments."""
        return self._objects.req.max_frame_length

    @property
    def sending(self) -> bool:
        """True while a request longer than a frame is part way out: a send() of it timed
        out, and every later write finishes it first."""
        return self._objects.req.sending

    @property
    def accepted(self) -> bool:
        """True once the broker accepted the connection."""
        return self.broker_pid != 0

    def _check_broker(self) -> None:
        """Raise PeerClosedError / PeerDiedError if the broker is gone: the accepting
        process's ring end once accepted, the listener's broker before."""
        if self._objects.req.end_process(READER_END)[0]:
            self._check_accepted()
            return
        words = self._listener_words
        pid = words[_BROKER_PID_WORD]
        if words[_BROKER_CLOSED_WORD]:
            raise PeerClosedError(f"{self._describe} closed its listener {self._listener.name}"
                                  f" before accepting", pid=pid)
        if not is_alive(pid, words[_BROKER_START_WORD]):
            raise PeerDiedError(f"{self._describe} (pid {pid}) died before accepting", pid=pid)

    def check(self) -> None:
        """Raise PeerDiedError / PeerClosedError if the broker is gone (at most one look
        per poll interval: it reads /proc). For callers that only recv(timeout=0), which
        never blocks and so never looks."""
        self._usable()
        try:
            self._check_broker_due()
        except (PeerDiedError, PeerClosedError) as exc:
            raise self._fail(exc) from None

    def send(self, frame, timeout: float | None = None, frame_type: int = rd.DATA_TYPE) -> bool:
        """Write a request frame, waiting up to timeout seconds (None: forever) for room.

        Returns False on timeout. Raises PeerDiedError / PeerClosedError if the broker is gone
        (checked at least every poll interval, and whenever the ring is full).
        """
        self._usable()
        try:
            self._check_broker_due()
            return self._writer.write(frame, timeout, frame_type)
        except (PeerDiedError, PeerClosedError) as exc:
            raise self._fail(exc) from None

    def claim(self, size: int, timeout: float | None = None, frame_type: int = rd.DATA_TYPE):
        """Reserve a request frame of up to size bytes to encode in place; None on timeout.

        The broker's liveness is checked as for send(): at least every poll interval."""
        if self._error is not None or self._closed:
            self._usable()
        try:
            if self._clock() >= self._next_check:
                self._check_broker_due()
            view = self._req_claim(size, frame_type)
            if view is None:  # no room now: RingWriter's wait for it
                view = self._writer.claim(size, timeout, frame_type)
            return view
        except (PeerDiedError, PeerClosedError) as exc:
            raise self._fail(exc) from None

    def commit(self, length: int | None = None) -> None:
        """Publish the claimed request frame (length bytes; default all) and ring the broker
        (RingWriter.commit, without its call)."""
        if self._error is not None or self._closed:
            self._usable()
        self._req_commit(length)
        self._ring_broker()

    def abort(self) -> None:
        """Drop the claimed request frame."""
        self._usable()
        self._writer.abort()

    def recv(self, timeout: float | None = None, stop: Callable[[], bool] | None = None):
        """The next response frame as a read-only memoryview, waiting up to timeout seconds
        (None: forever); None on timeout, or once stop() is true (RingReader.read). The view
        stays valid until release()."""
        if self._error is not None or self._closed:
            self._usable()
        try:
            return self._reader.read(timeout, stop)
        except (PeerDiedError, PeerClosedError) as exc:
            raise self._fail(exc) from None

    def interrupt(self) -> None:
        """Wake a recv() parked in another thread so it re-checks its stop(). The one call
        any thread may make; a no-op once the connection is closed."""
        if self._closed or self._error is not None:
            return
        try:
            self._reader.interrupt()
        except (posix_ipc.ExistentialError, ValueError):
            pass  # closed meanwhile by the owning thread: nobody is parked any more

    def release(self) -> None:
        """Free every response frame received so far and wake the broker if it waits for
        room (RingReader.release, without its call)."""
        if self._error is not None or self._closed:
            self._usable()
        self._rsp_release()
        self._notify_rsp_space()

    def _check_broker_due(self) -> None:
        """_check_broker(), at most once per poll interval (it reads /proc, which is costly;
        figures: perf/README.md, "Broker liveness check")."""
        now = self._policy.clock()
        if now >= self._next_check:
            self._next_check = now + self._policy.poll_interval
            self._check_broker()

    def _usable(self) -> None:
        """Raise the connection's error, or ValueError once closed (the per-request methods
        test the two fields first and call this only to raise)."""
        if self._error is not None:
            raise self._error
        if self._closed:
            raise ValueError(f"connection {self.name} is closed")

    def _fail(self, exc: ConnectionError) -> ConnectionError:
        """The broker is gone: unlink our objects and remember the error for later calls."""
        message = f"{exc}; connection {self.name} closed and unlinked"
        self._error = type(exc)(message, pid=exc.pid)
        self._shut(notify_broker=False)
        return self._error

    def close(self) -> None:
        """Close the connection (the broker drops it) and unlink its objects; safe twice."""
        if self._error is None and not self._closed:
            self._shut(notify_broker=True)
        self._closed = True

    def _shut(self, notify_broker: bool) -> None:
        objects = self._objects
        objects.req.close_end(WRITER_END)
        objects.rsp.close_end(READER_END)
        if notify_broker:
            self._doorbell.ring()
        if self._waker is not None:
            self._waker.unwatch(self)
        objects.close()
        objects.unlink()
        self._listener_words.release()
        if self._flags is not None:
            self._flags.release()
        self._listener.close()
        self._doorbell.close()
        self._closed = True

    def __enter__(self) -> ClientConnection:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _open_listener(cluster_id: str, broker_id: int, deadline: float | None,
                   policy: WaitPolicy, instance: tuple[int, int] | None = None,
                   ) -> tuple[SharedRegion, memoryview]:
    """Map the broker's listener once it exists, its broker is alive and (if given) serves
    ``instance`` (until deadline)."""
    name = listener_name(cluster_id, broker_id)
    reason = "it does not exist"
    while True:
        try:
            region = SharedRegion.open(name, keep_fd=True)
        except FileNotFoundError:
            pass
        else:
            words = region.buf[: ld.ACCEPT_RING_OFFSET].cast("q")
            pid = words[_BROKER_PID_WORD]
            serves = tuple(words[_INSTANCE])
            magic = words[_MAGIC_WORD]
            live = (pid and not words[_BROKER_CLOSED_WORD]
                    and is_alive(pid, words[_BROKER_START_WORD]))
            if magic == ld.MAGIC and live:
                if instance is None or serves in (NO_INSTANCE, tuple(instance)):
                    return region, words
                reason = (f"its broker (pid {pid}) serves instance {serves}, not "
                          f"{tuple(instance)} (a copy of the data directory?)")
            elif magic & ~0xFF == ld.MAGIC_STEM and live:
                words.release()
                region.close()
                raise ConnectionRefusedError(
                    f"{_describe_broker(cluster_id, broker_id)} (pid {pid}) listens at {name}"
                    f" with listener layout version {magic & 0xFF}; this client speaks"
                    f" version {ld.VERSION} (the broker and the client come from different"
                    f" ringlog versions)")
            else:
                reason = f"it was left by pid {pid}, which is gone or closed it" if pid else \
                    "it is not ready"
            words.release()
            region.close()
        if deadline is not None and policy.clock() >= deadline:
            raise ConnectionRefusedError(
                f"{_describe_broker(cluster_id, broker_id)} is not listening at {name}:"
                f" {reason}")
        time.sleep(_LOCK_RETRY)


def _announce(listener: SharedRegion, part: str, deadline: float | None, policy: WaitPolicy,
              describe: str) -> None:
    """Write part into the listener's accept ring, taking turns with other clients by flock.

    An accept ring whose header does not read as one (damaged: its broker rebuilds it) is
    tried again until deadline, then ConnectionRefusedError names the damage."""
    frame = part.encode("ascii")
    damage = None
    while True:
        try:
            fcntl.flock(listener.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        else:
            try:
                area = listener.buf[ld.ACCEPT_RING_OFFSET:ld.PENDING_SLOTS_OFFSET]
                try:
                    ring = Ring(area, listener.name + " accept ring")
                except ValueError as exc:
                    damage, written = exc, False
                else:
                    damage, written = None, ring.try_write(frame)
                    ring.release_views()
                area.release()
            finally:
                fcntl.flock(listener.fd, fcntl.LOCK_UN)
            if written:
                return
        if deadline is not None and policy.clock() >= deadline:
            if damage is not None:
                raise ConnectionRefusedError(
                    f"{describe} cannot take connection {part}: its accept ring is damaged"
                    f" ({damage}); the broker rebuilds it, try again")
            raise TimeoutError(f"{describe} did not take connection {part} into its accept"
                               f" ring {listener.name} in time (locked or full)")
        time.sleep(_LOCK_RETRY)


def connect(cluster_id: str, broker_id: int, timeout: float | None = 5.0, *,
            capacity: int = DEFAULT_CAPACITY, policy: WaitPolicy = DEFAULT_POLICY,
            waker: Listener | None = None,
            instance: tuple[int, int] | None = None) -> ClientConnection:
    """Open a connection to a running broker and wait until it is accepted.

    capacity is the data size of each of the two rings (a power of two). Raises
    ConnectionRefusedError if no live broker listens within timeout seconds, TimeoutError if
    it does not accept in time, PeerDiedError / PeerClosedError if it goes away meanwhile; in
    every case the connection's objects are unlinked.

    instance: refuse (ConnectionRefusedError, once timeout passes) a broker whose Listener
    serves another instance (listener_descriptor.INSTANCE_OFFSET; one made without an
    instance serves any).

    waker: this process's own Listener, for a broker's outbound connection (module doc:
    responses ring its doorbell; connect returns once the connection is announced, without
    waiting for the accept; with timeout 0 it makes one attempt at the listener and at the
    accept lock, and raises ConnectionRefusedError / TimeoutError rather than wait).
    """
    if waker is not None and waker.cluster_id != cluster_id:
        raise ValueError(f"waker listens for cluster {waker.cluster_id}, not {cluster_id}")
    deadline = policy.deadline(timeout)
    describe = _describe_broker(cluster_id, broker_id)
    listener, words = _open_listener(cluster_id, broker_id, deadline, policy, instance)
    doorbell = objects = None
    try:
        doorbell = Doorbell.open(cluster_id, broker_id, words, _DOORBELL_WORD, _PENDING_WORD)
        me = current_process()
        while True:
            part = connection_part(me[0], secrets.token_hex(8))
            try:
                objects = _ConnectionObjects.create(
                    object_name(cluster_id, broker_part(broker_id), part), capacity)
                break
            except FileExistsError:
                continue
        objects.req.set_end(WRITER_END, *me)
        objects.rsp.set_end(READER_END, *me)
        if waker is not None:
            objects.rsp.set_end_doorbell(READER_END, waker.broker_id)
        _announce(listener, part, deadline, policy, describe)
        listener.close_fd()
        doorbell.ring()
        if waker is not None:
            return ClientConnection(cluster_id, broker_id, listener, words, doorbell, objects,
                                    policy, waker)
        rsp = objects.rsp
        broker_pid, broker_start = words[_BROKER_PID_WORD], words[_BROKER_START_WORD]

        def broker_check() -> None:
            if words[_BROKER_CLOSED_WORD]:
                raise PeerClosedError(f"{describe} closed its listener {listener.name}",
                                      pid=broker_pid)
            if not is_alive(broker_pid, broker_start):
                raise PeerDiedError(f"{describe} (pid {broker_pid}) died", pid=broker_pid)
        accepted = WakeSlot(rsp.header_words, READER_PARKED_WORD,
                            objects.rsp_data.semaphore).wait_until(
            lambda: rsp.end_process(WRITER_END)[0] != 0, deadline, policy, broker_check)
        if not accepted:
            raise TimeoutError(f"{describe} did not accept connection {objects.base} within"
                               f" {timeout} s")
        return ClientConnection(cluster_id, broker_id, listener, words, doorbell, objects,
                                policy)
    except BaseException:
        if objects is not None:
            objects.req.close_end(WRITER_END)
            objects.rsp.close_end(READER_END)
            objects.close()
            objects.unlink()
        if doorbell is not None:
            doorbell.close()
        words.release()
        listener.close()
        raise

