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
"""
from __future__ import annotations

import fcntl
import os
import time

from cluster.metadata import data_dir as dd
from cluster.metadata.lock_holders import describe_holders

REGISTER_TIMEOUT = 1.0
"""Seconds ``register_broker`` keeps trying for the lock before it gives up."""

_RETRY_SLEEP = 0.005


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

    def set_state(self, state):
        """Write broker.json: ``starting``, then ``serving`` once the broker's listener
        accepts connections (the controller counts it alive from then on), ``stopping``
        when it begins to shut down (the controller moves leadership away)."""
        dd.write_broker_state(self.data_dir, self.broker_id, state)

    def close(self):
        """Release the lock (the broker is gone as far as probes can tell)."""
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
