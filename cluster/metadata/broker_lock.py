"""Broker liveness through flock(2): a broker holds its lock; anyone can probe it.

A running broker holds an exclusive flock on ``D/broker-<id>/broker.lock`` for its whole
life (``register_broker``); the kernel drops it when the process dies, however it dies, like
a ZooKeeper ephemeral node. A prober (the controller, ``ringlog cluster status``) tries a
shared lock without blocking on its own descriptor: if it gets it nobody holds the
exclusive one — the broker is not running — and it lets go at once.

A probe holds the shared lock for a few microseconds; a broker starting at that instant
would fail a single non-blocking attempt, so ``register_broker`` retries for a moment before
it concludes another process with the same broker id is running.

flock locks belong to an open file description, not a process: a probe from the broker's
own process (the controller probing itself) still sees the lock held.

The lock says a broker process exists, not that it works: a SIGSTOPped or hung broker
holds it forever. So a running broker also beats: ``BrokerRegistration.beat(now_ns)``
writes the time into ``D/broker-<id>/broker.heartbeat`` and ``HeartbeatReader`` reads it
back. Layout: one little-endian int64 at position 0 (``HEARTBEAT``), CLOCK_MONOTONIC in
nanoseconds, which is one clock for every process of the host (so the controller compares
it with its own ``time.monotonic``) and never steps with the wall clock. The file is
rewritten in place (one pwrite, never truncated or replaced), so a reader's descriptor
stays valid across the broker's restarts and the page cache makes every write visible at
once; nothing is fsynced (a heartbeat is worth nothing after a crash). An aligned 8-byte
read of the page cache is not promised atomic against a concurrent write, so a reader that
finds a heartbeat too old reads it again before it believes it.
"""
from __future__ import annotations

import fcntl
import os
import struct
import time

from cluster.metadata import data_dir as dd
from cluster.metadata.lock_holders import describe_holders

REGISTER_TIMEOUT = 1.0
"""Seconds ``register_broker`` keeps trying for the lock before it gives up."""

_RETRY_SLEEP = 0.005

HEARTBEAT = struct.Struct("<q")
"""``broker.heartbeat``: the monotonic nanoseconds of the broker's last heartbeat."""


class BrokerRegistration:
    """The running broker's hold on ``D/broker-<id>``: the lock and broker.json.

    Owned by the broker process (its main thread); ``close()`` releases the lock and is safe
    to call twice. Made by ``register_broker``.
    """

    def __init__(self, data_dir, broker_id, cluster_id, fd):
        self.data_dir = os.fspath(data_dir)
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.path = dd.broker_dir(data_dir, broker_id)
        self._fd = fd
        self._heartbeat_fd = None

    def set_state(self, state):
        """Write broker.json: ``starting``, then ``serving`` once the broker's listener
        accepts connections (the controller counts it alive from then on), ``stopping``
        when it begins to shut down (the controller moves leadership away)."""
        dd.write_broker_state(self.data_dir, self.broker_id, state)

    def beat(self, now_ns):
        """Write the heartbeat ``now_ns`` (``time.monotonic_ns()``); from one thread at a
        time (the broker's heartbeat thread), not after ``close``."""
        if self._heartbeat_fd is None:
            with dd.private_umask():
                self._heartbeat_fd = os.open(
                    os.path.join(self.path, dd.BROKER_HEARTBEAT),
                    os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, dd.FILE_MODE)
        os.pwrite(self._heartbeat_fd, HEARTBEAT.pack(now_ns), 0)

    def close(self):
        """Release the lock (the broker is gone as far as probes can tell)."""
        if self._heartbeat_fd is not None:
            fd, self._heartbeat_fd = self._heartbeat_fd, None
            os.close(fd)
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"BrokerRegistration({self.path!r}, held={self._fd is not None})"


def register_broker(data_dir, broker_id, cluster_id, timeout=REGISTER_TIMEOUT):
    """Take broker ``broker_id``'s lock for this process and write its ``starting`` state.

    Creates ``D/broker-<id>`` and its meta.properties the first time, and checks them after
    (InconsistentClusterIdError if they belong to another cluster). Raises
    ``BlockingIOError`` naming the holder (per /proc/locks, never the possibly stale pid in
    broker.json) if another process holds the lock for longer than ``timeout`` seconds.
    """
    path = dd.broker_dir(data_dir, broker_id)
    lock_path = os.path.join(path, dd.BROKER_LOCK)
    with dd.private_umask():
        os.makedirs(path, mode=dd.DIR_MODE, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, dd.FILE_MODE)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise BlockingIOError(
                        f"broker {broker_id} is already running: {lock_path} is "
                        f"{describe_holders(lock_path)}") from None
                time.sleep(_RETRY_SLEEP)
        dd.ensure_broker_meta(data_dir, broker_id, cluster_id)
        registration = BrokerRegistration(data_dir, broker_id, cluster_id, fd)
        registration.set_state(dd.STATE_STARTING)
        return registration
    except BaseException:
        os.close(fd)
        raise


def broker_is_alive(data_dir, broker_id):
    """Whether a process holds broker ``broker_id``'s lock right now.

    Opens the lock file afresh each time (a descriptor kept between probes could outlive a
    replaced file); an open, a flock and a close: microseconds.
    """
    path = os.path.join(dd.broker_dir(data_dir, broker_id), dd.BROKER_LOCK)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        return lock_is_held(fd)
    finally:
        os.close(fd)


def lock_is_held(fd):
    """Whether another open file description holds an exclusive flock on ``fd``'s file."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


class HeartbeatReader:
    """Reads brokers' heartbeats (see the module doc), keeping a descriptor per broker.

    Single owner (the controller's thread); ``close()`` is safe to call twice.
    """

    def __init__(self, data_dir):
        self.data_dir = os.fspath(data_dir)
        self._fds = {}  # broker id -> descriptor of its broker.heartbeat

    def last(self, broker_id):
        """The broker's last heartbeat in monotonic nanoseconds, or None if it never wrote
        one (a broker of an older ringlog, a stand-in of the tests)."""
        fd = self._fds.get(broker_id)
        if fd is None:
            path = os.path.join(dd.broker_dir(self.data_dir, broker_id), dd.BROKER_HEARTBEAT)
            try:
                fd = self._fds[broker_id] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return None
        data = os.pread(fd, HEARTBEAT.size, 0)
        if len(data) < HEARTBEAT.size:
            return None
        return HEARTBEAT.unpack(data)[0]

    def older_than(self, broker_id, limit_ns):
        """Whether the broker's heartbeat is known and older than ``limit_ns`` (read twice
        before saying so, see the module doc)."""
        last = self.last(broker_id)
        if last is None or last >= limit_ns:
            return False
        last = self.last(broker_id)
        return last is not None and last < limit_ns

    def forget(self, broker_id):
        """Close the descriptor of a broker that died (its next start may make a new
        file)."""
        fd = self._fds.pop(broker_id, None)
        if fd is not None:
            os.close(fd)

    def close(self):
        for broker_id in list(self._fds):
            self.forget(broker_id)
