"""Controller election by generations of ``D/controller.lock``, with a takeover from a
controller that holds the lock but no longer runs.

The active controller holds an exclusive flock on ``D/controller.lock``; the kernel drops it
when the holder dies. A SIGSTOPped (hung) holder keeps it, though, and with a plain flock no
one could take over: its partitions would never fail over and no metadata would change
until it ran again. Kafka's KRaft elects a new controller when the active one stops
heartbeating within the election timeout; here:

**Generations.** Every broker that becomes active installs a fresh *generation* of the
lock file: it writes ``{"broker_id": .., "epoch": ..}`` (itself and its controller epoch)
into ``D/controller.lock.next``, flocks it, and renames it over ``D/controller.lock``. A
generation's content is written before its rename and never changes, so a reader caches it
by inode. The previous holder's flock is then on an unlinked inode: it no longer holds the
controller lock, whatever it believes.

**Who may install.** A standby (every poll of a broker that is not active) looks at the
generation at the path (``stat``; it reopens when the inode changed) and may install the
next one when

1. it gets the flock of that generation (the holder died or resigned, or there has never
   been one — an empty file from before generations), or
2. the broker the generation names has a heartbeat (``broker_lock.HeartbeatReader``, the
   same file that fences brokers) older than ``broker.session.timeout.ms``: that
   controller is stopped or hung, though its process and flock are still there. A holder
   that never wrote a heartbeat (a stand-in of the tests) is never taken over from.

Installing happens under ``D/controller.takeover.lock`` (flock, non-blocking: a standby
that finds it taken tries again at its next poll), and under it the standby checks again
that the path is still the generation it judged (same inode) and, in case 2, that its
holder's heartbeat is still too old; then, still under it, the controller replays the
metadata log and renames its generation in, with an epoch one past both the log's newest
and the replaced generation's (``Claim.next_epoch``: a holder stopped before its
``controller`` record reached the log has an epoch the log does not show), so no two
generations share an epoch. In case 2 it also starts a new segment of the metadata log
before it writes (``MetadataLog.start_segment``, see the races below).
So a generation is replaced at most once, by one standby, and only for one of the two
reasons — two standbys that judge the same stale holder at once cannot both displace it,
and a standby that judged a holder stale just before another standby took over cannot
displace the newcomer (the inode it judged is no longer at the path).

**The deposed controller.** The active controller calls ``still_held()`` — one ``stat`` of
the path, compared with the inode it installed — at every poll, and again before every
metadata-log append and every page publish, together with the metadata log's own check
(``MetadataLog.written_elsewhere``: two ``stat``-s; the successor's first act is to
append its ``controller`` record of a higher epoch, in a segment that starts at the
deposed controller's log end offset). When a check fails it resigns without
writing anything: it closes its metadata log without a flush, checkpoint or clean-shutdown
marker (``MetadataLog.abandon``; the directory belongs to the successor), answers the
request in hand with NOT_CONTROLLER, and goes on as a standby — and as a normal broker,
whose partitions the successor has led elsewhere meanwhile (it fenced the stopped broker
by the same heartbeat) and whose followers truncate as after any leader change.

**Races, and what remains.**

- *The old controller resumes in the middle of an append.* A write(2) is not split by
  SIGSTOP: the batch is in the page cache whole, or not at all, before the successor's
  replay (which runs ``session timeout`` after the stop), so the successor replays it and
  writes its higher epoch after it. The resumed controller's next fence (before it
  publishes) fails: the request in hand gets NOT_CONTROLLER although its change is in the
  log, as in Kafka when a controller moves under a request (the client retries, and finds
  the topic exists). The torn tail a crash leaves is truncated by the log's recovery when
  the successor opens it.
- *The old controller resumes between its check and its write* (a window of a few
  microseconds, in which it must stay stopped for a whole session timeout): this is the
  check-then-write race no file lock can close without giving up progress while the old
  holder is stopped. Its batch is written (pwrite) where it believes the log ends: past
  the end of the segment the successor sealed when it took over, never over the
  successor's records, which are in the next segment. The late batch is fenced by the
  controller epoch: every batch carries its writer's epoch in partitionLeaderEpoch, and
  ``MetadataLog.replay`` (or ``metadata_copies.scan`` at the open) refuses a log whose
  batch epochs go down or whose offsets do not run on — the late batch's offsets are the
  successor's first ones — with a KafkaStorageError naming the segment: a loud stop that
  needs an operator (cut the sealed segment at its old end), never a silent mix. An
  append that rolls the deposed controller's own log fails on the successor's segment
  file (created exclusively). The successor, which read the sealed segment's size when
  it opened the log, does not see the late batch until it opens the log again.
- *Page publishing by two processes.* Every publish is fenced like an append. A publisher
  stopped mid-publish (between its two stores of the sequence) and resumed after its
  successor published finishes with a sequence the successor never uses
  (``page_descriptor``), and the successor compares the page's sequence with its own last
  one at every poll (one load from shared memory) and publishes again: a stale image
  lives on the page for at most one poll interval. A reader that copies the image while
  the resumed writer rewrites its bytes can see torn bytes under an unchanged even
  sequence (the seqlock assumes one writer): its ``read()`` then raises on the JSON, or
  returns the old controller's image, within that same poll interval. This needs the old
  controller to stop for a session timeout inside a memcpy.
- *A standby stopped while it holds the takeover lock* (a few syscalls and a replay) holds
  up every takeover until it runs again or dies; a dead one's flock is dropped by the
  kernel, and its ``controller.lock.next`` is removed by the next installer.
- *A hung controller thread whose heartbeat thread still runs* is not noticed: the
  heartbeat is the process's, as for broker fencing.
- A generation without content (the empty file a first start creates, or one an older
  ringlog left; an installer that dies before its rename leaves only
  ``controller.lock.next``) names nobody, so only case 1 can replace it.

Cost on the common path: a standby's poll is a ``stat``, a non-blocking ``flock`` and one
heartbeat ``pread`` (the generation's content is read, and the file opened, once per
generation); an active controller's poll is one ``stat`` and one load of the page's
sequence; a commit adds two fences (before its append and its publish), two or three
``stat``-s each.

Ownership: a ControllerLock belongs to its Controller (the broker's loop thread).
``close()`` releases everything and is safe to call twice.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import NamedTuple

from cluster.metadata import data_dir as dd

_CONTENT_BYTES = 4096
"""Most bytes of a generation's content read (it is a few dozen)."""


class Holder(NamedTuple):
    """Who installed a generation of the controller lock, and at which controller epoch."""

    broker_id: int
    epoch: int


def read_holder(data_dir):
    """The Holder the current generation of ``D/controller.lock`` names, or None (no file,
    or no content: see the module doc)."""
    try:
        fd = os.open(os.path.join(os.fspath(data_dir), dd.CONTROLLER_LOCK),
                     os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        return _parse(os.pread(fd, _CONTENT_BYTES, 0))
    finally:
        os.close(fd)


def _parse(data):
    try:
        raw = json.loads(data)
        return Holder(int(raw["broker_id"]), int(raw["epoch"]))
    except (ValueError, TypeError, KeyError):
        return None


def _identity(st):
    return st.st_dev, st.st_ino


class ControllerLock:
    """Broker ``broker_id``'s part in the election (see the module doc).

    ``heartbeats`` is the controller's ``HeartbeatReader``; ``session_timeout_ns`` the
    broker.session.timeout.ms in nanoseconds. Times are monotonic nanoseconds.
    """

    def __init__(self, data_dir, broker_id, heartbeats, session_timeout_ns):
        self.data_dir = os.fspath(data_dir)
        self.path = os.path.join(self.data_dir, dd.CONTROLLER_LOCK)
        self.broker_id = broker_id
        self._heartbeats = heartbeats
        self._session_timeout_ns = session_timeout_ns
        self._fd = None  # the generation this broker looks at, or installed
        self._identity = None  # (st_dev, st_ino) of self._fd's file
        self._holder = None  # what self._fd's generation names (read once per inode)
        self._installed = False

    @property
    def held(self):
        """Whether this broker installed the generation it holds (no check: see
        ``still_held``)."""
        return self._installed

    def still_held(self):
        """Whether ``D/controller.lock`` is still the generation this broker installed:
        one stat."""
        if not self._installed:
            return False
        try:
            return _identity(os.stat(self.path)) == self._identity
        except FileNotFoundError:
            return False

    # -- a standby's poll -------------------------------------------------------------------

    def claim(self, now_ns):
        """A ``Claim`` if this broker may install the next generation now (module doc),
        held under the takeover lock; else None. Not while ``held``."""
        if self._installed:
            raise RuntimeError(f"broker {self.broker_id} holds the controller lock already")
        self._follow_path()
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            displaced = None
        except BlockingIOError:
            displaced = self._stale_holder(now_ns)
            if displaced is None:
                return None
        takeover = self._lock_takeover()
        if takeover is None:
            self.drop_unclaimed(displaced)
            return None
        try:
            same = _identity(os.stat(self.path)) == self._identity
        except FileNotFoundError:
            same = False
        if not same or (displaced is not None and self._stale_holder(now_ns) is None):
            os.close(takeover)
            self.drop_unclaimed(displaced)
            return None
        return Claim(self, takeover, displaced, self._generation_holder())

    def _follow_path(self):
        """Point ``_fd`` at the generation now at the path (creating an empty file if
        there is none)."""
        try:
            current = _identity(os.stat(self.path))
        except FileNotFoundError:
            current = None
        if self._fd is not None and current == self._identity:
            return
        self._close_fd()
        os.makedirs(self.data_dir, exist_ok=True)
        with dd.private_umask():
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                               dd.FILE_MODE)
        self._identity = _identity(os.fstat(self._fd))
        self._holder = None

    def _generation_holder(self):
        """The Holder the generation at ``_fd`` names (read once per generation)."""
        if self._holder is None:
            self._holder = _parse(os.pread(self._fd, _CONTENT_BYTES, 0))
        return self._holder

    def _stale_holder(self, now_ns):
        """The Holder of the generation at ``_fd`` if its heartbeat is older than the
        session timeout, else None."""
        holder = self._generation_holder()
        if holder is None or holder.broker_id == self.broker_id:
            return None
        if self._heartbeats.older_than(holder.broker_id, now_ns - self._session_timeout_ns):
            return holder
        return None

    def _lock_takeover(self):
        with dd.private_umask():
            fd = os.open(os.path.join(self.data_dir, dd.CONTROLLER_TAKEOVER_LOCK),
                         os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, dd.FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def drop_unclaimed(self, displaced):
        """Let go of the flock ``claim`` got (case 1) when it led to no install (a
        Claim's exit)."""
        if displaced is None and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def install(self, epoch):
        """Rename this broker's generation (``epoch``) over the path: only inside a Claim
        (``Claim.install``)."""
        next_path = os.path.join(self.data_dir, dd.CONTROLLER_LOCK_NEXT)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(next_path)  # left by an installer that died
        with dd.private_umask():
            fd = os.open(next_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                         dd.FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            content = json.dumps({"broker_id": self.broker_id, "epoch": epoch}).encode()
            os.pwrite(fd, content, 0)
            os.rename(next_path, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(next_path)
            raise
        self._close_fd()  # the flock of the generation replaced, if this broker had it
        self._fd, self._identity = fd, _identity(os.fstat(fd))
        self._holder = Holder(self.broker_id, epoch)
        self._installed = True

    # -- letting go -------------------------------------------------------------------------

    def release(self):
        """Let go of the generation (resigning, or found replaced): a standby again."""
        self._close_fd()

    def _close_fd(self):
        self._installed = False
        if self._fd is not None:
            fd, self._fd, self._identity, self._holder = self._fd, None, None, None
            os.close(fd)

    def close(self):
        """Release everything; safe to call twice."""
        self._close_fd()

    def __repr__(self):
        return (f"ControllerLock({self.path!r}, broker={self.broker_id}, "
                f"held={self._installed})")


class Claim:
    """A standby's right to install the next generation, held under the takeover lock
    (``ControllerLock.claim``). Use as a context manager and call ``install(epoch)``
    inside it at most once; leaving it releases the takeover lock (and the generation's
    flock of case 1 if nothing was installed)."""

    def __init__(self, lock, takeover_fd, displaced, previous):
        self._lock = lock
        self._takeover_fd = takeover_fd
        #: The Holder of the generation taken over from (case 2), or None (case 1).
        self.displaced = displaced
        #: The Holder the generation being replaced names, or None (it names nobody).
        self.previous = previous

    def next_epoch(self, log_epoch):
        """The epoch of the generation to install: one past both the metadata log's newest
        ``log_epoch`` and the replaced generation's (whose holder may have stopped before
        its ``controller`` record reached the log), so no two generations share one."""
        return max(log_epoch, self.previous.epoch if self.previous is not None else 0) + 1

    def install(self, epoch):
        """Install this broker's generation naming controller ``epoch``."""
        self._lock.install(epoch)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self._lock.held:
            self._lock.drop_unclaimed(self.displaced)
        os.close(self._takeover_fd)
