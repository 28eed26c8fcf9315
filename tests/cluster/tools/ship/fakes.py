"""Fakes for the shipper's unit tests: a file system in memory (inodes, names, renames,
deletes, truncation, inode reuse) and a producer whose acknowledgements the test controls."""
from __future__ import annotations

import fnmatch
import itertools

from cluster.errors import KafkaTimeoutError
from cluster.tools.ship.files import FileStat


class FakeFiles:
    """Paths -> inodes -> bytes. A handle reads its inode even after a rename or delete."""

    def __init__(self):
        self.data = {}
        self.paths = {}
        self._inodes = itertools.count(100)

    def create(self, path, data=b"", ino=None):
        ino = next(self._inodes) if ino is None else ino
        self.data[ino] = bytearray(data)
        self.paths[path] = ino
        return ino

    def append(self, path, data):
        if path not in self.paths:
            self.create(path)
        self.data[self.paths[path]] += data

    def rename(self, old, new):
        self.paths[new] = self.paths.pop(old)

    def remove(self, path):
        del self.paths[path]

    def truncate(self, path):
        del self.data[self.paths[path]][:]

    def copy(self, old, new):
        self.create(new, bytes(self.data[self.paths[old]]))

    def glob(self, pattern):
        return sorted(p for p in self.paths if fnmatch.fnmatch(p, pattern))

    def _stat(self, ino):
        links = sum(1 for i in self.paths.values() if i == ino)
        return FileStat(1, ino, len(self.data[ino]), links)

    def stat(self, path):
        ino = self.paths.get(path)
        return None if ino is None else self._stat(ino)

    def open(self, path):
        if path not in self.paths:
            raise FileNotFoundError(path)
        return FakeHandle(self, self.paths[path])


class FakeHandle:
    def __init__(self, files, ino):
        self.files = files
        self.ino = ino
        self.closed = False

    def read_at(self, position, size):
        assert not self.closed
        return bytes(self.files.data[self.ino][position:position + size])

    def stat(self):
        return self.files._stat(self.ino)

    def close(self):
        self.closed = True


class FakeBatch:
    def __init__(self):
        self.is_done = False
        self.exception = None


class FakeFuture(tuple):
    """``(batch,)``, read as the shipper reads a FutureRecordMetadata."""

    @property
    def is_done(self):
        return self[0].is_done

    @property
    def exception(self):
        return self[0].exception

    def failed(self):
        return self[0].is_done and self[0].exception is not None


class FakeProducer:
    """Records what is sent; acknowledges at once when ``auto_ack``, else when told."""

    def __init__(self, auto_ack=True):
        self.auto_ack = auto_ack
        self.sent = []  # (topic, value, key, headers dict)
        self.batches = []

    def send(self, topic, value, key=None, headers=None, partition=None):
        batch = FakeBatch()
        batch.is_done = self.auto_ack
        self.batches.append(batch)
        self.sent.append((topic, value, key, dict(headers)))
        return FakeFuture((batch,))

    def ack_all(self):
        for batch in self.batches:
            batch.is_done = True

    def fail_pending(self, error=None):
        for batch in self.batches:
            if not batch.is_done:
                batch.is_done = True
                batch.exception = error or KafkaTimeoutError("expired")

    def flush(self, timeout=None):
        if not self.auto_ack and any(not b.is_done for b in self.batches):
            raise KafkaTimeoutError("flush timed out")

    def values(self):
        return [value for _, value, _, _ in self.sent]
