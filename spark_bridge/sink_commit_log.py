"""The ``ringlog`` streaming sink's commit decisions, kept in the query's checkpoint:
``CHECKPOINT/ringlog-sink/<batch id>`` (the decision to commit that micro-batch: the
transactions of its tasks, JSON) and ``<batch id>.done`` (every one of them committed).

Why (``spark_bridge.sink``): each task of a micro-batch leaves its records in an open
transaction; the driver decides, writes the decision here, then commits the transactions
one by one. A driver killed between the decision and the last commit leaves a decision
without ``.done``: the restarted query finishes it (``pending``) before any task runs, and
when Spark then runs that batch again (its own commit log did not get it) the sink aborts
the new copies instead of committing them twice (``decided``).

Files are written atomically (temporary file, fsync, rename, fsync of the directory); a
decision that does not parse raises ``SinkCommitLogError`` naming the file (never
skipped: skipping it could commit a batch twice). One driver writes the log; ``pending``
is read when the query starts.
"""
from __future__ import annotations

import json
import os
import re

#: The sink's directory inside the query's checkpoint.
LOG_DIR = "ringlog-sink"
#: Decisions kept behind the newest (older ones are deleted when a batch is done).
KEEP = 100
_DECISION = re.compile(r"(\d+)\Z")


class SinkCommitLogError(ValueError):
    """A decision file that cannot be read; the message names it."""


def _write_atomically(path, data):
    temp = f"{path}.tmp"
    with open(temp, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SinkCommitLog:
    """The decisions of one streaming query (module doc); ``checkpoint``: its checkpoint
    location (a local path or a ``file:`` URI)."""

    def __init__(self, checkpoint):
        if checkpoint.startswith("file:"):
            checkpoint = checkpoint[len("file:"):]
            checkpoint = "/" + checkpoint.lstrip("/")
        self.directory = os.path.join(checkpoint, LOG_DIR)

    def _path(self, batch_id):
        return os.path.join(self.directory, str(batch_id))

    def decided(self, batch_id):
        """The transactions decided for ``batch_id`` (a list of dicts), or None."""
        path = self._path(batch_id)
        try:
            with open(path, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            return None
        try:
            decision = json.loads(data)
            if decision["batch"] != batch_id:
                raise ValueError(f"holds batch {decision['batch']}")
            return decision["transactions"]
        except (ValueError, KeyError, TypeError) as exc:
            raise SinkCommitLogError(f"ringlog sink commit decision {path!r} is damaged "
                                     f"({exc}); the sink will not guess which transactions "
                                     f"of that micro-batch to commit") from None

    def done(self, batch_id):
        return os.path.exists(self._path(batch_id) + ".done")

    def decide(self, batch_id, transactions):
        """Record the decision to commit ``transactions`` (dicts) for ``batch_id``."""
        os.makedirs(self.directory, exist_ok=True)
        data = json.dumps({"batch": batch_id, "transactions": transactions}).encode()
        _write_atomically(self._path(batch_id), data)

    def mark_done(self, batch_id):
        _write_atomically(self._path(batch_id) + ".done", b"")
        for old in self._batch_ids():
            if old < batch_id - KEEP:
                for name in (str(old), f"{old}.done"):
                    try:
                        os.unlink(os.path.join(self.directory, name))
                    except FileNotFoundError:
                        pass

    def _batch_ids(self):
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for name in names if (m := _DECISION.match(name)))

    def pending(self):
        """``(batch id, transactions)`` of the newest decision not done, or None."""
        ids = self._batch_ids()
        if not ids or self.done(ids[-1]):
            return None
        return ids[-1], self.decided(ids[-1])
