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
    """Records what is sent; acknowledges at once when ``auto_ack``, else when told.
    ``send`` makes a batch per record, ``send_batch`` one per call (or per ``batch_size``
    records, when given)."""

    def __init__(self, auto_ack=True, partitions=3):
        self.auto_ack = auto_ack
        self.config = {"batch_size": None}
        self.partitions = partitions
        self.sent = []  # (topic, value, key, headers dict)
        self.partitions_sent = []  # the partition asked for, per record (None: the producer's)
        self.calls = {"send": 0, "send_batch": 0}
        self.batches = []
        self.batch_of = []  # the batch of each record sent

    def partitions_for(self, topic):
        return set(range(self.partitions))

    def _batch(self):
        batch = FakeBatch()
        batch.is_done = self.auto_ack
        self.batches.append(batch)
        return FakeFuture((batch,))

    def send(self, topic, value, key=None, headers=None, partition=None):
        self.calls["send"] += 1
        self.sent.append((topic, value, key, dict(headers)))
        self.partitions_sent.append(partition)
        future = self._batch()
        self.batch_of.append(future[0])
        return future

    def send_batch(self, topic, values, keys=None, partition=None, headers=None,
                   batch_size=None):
        self.calls["send_batch"] += 1
        size = batch_size or max(1, len(values))
        futures = [self._batch() for _ in range(0, len(values), size)]
        for i, value in enumerate(values):
            self.sent.append((topic, value, None if keys is None else keys[i],
                              dict(headers[i] or ())))
            self.partitions_sent.append(partition)
            self.batch_of.append(futures[i // size][0])
        return futures

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

    def delivered(self):
        """The values of the records whose batch did not fail, in the order sent."""
        return [value for (_, value, _, _), batch in zip(self.sent, self.batch_of)
                if batch.exception is None]

    def values(self):
        return [value for _, value, _, _ in self.sent]
