"""A transaction coordinator under test: a fake wall clock (ms), a producer id allocator
counting from 1000, and a fake ``__transaction_state`` log that stores every write at once
(error 0) unless told to ``hold`` writes (the test ``release``s them, with an error or
not) or to fail them (``write_error``). Markers the coordinator sends are kept in
``markers`` until the test acknowledges them (``ack``)."""
from __future__ import annotations

import itertools

from cluster.config.broker import BrokerConfig
from replica_proc.transaction_coordinator import records
from replica_proc.transaction_coordinator.coordinator import TransactionCoordinator
from tests.support.clock import T0, FakeClock

PARTITIONS = 4
TIMEOUT_MS = 60_000


class Env:
    def __init__(self, load=True, **config):
        settings = {"transaction.state.log.num.partitions": PARTITIONS}
        settings.update({k.replace("_", "."): v for k, v in config.items()})
        self.config = BrokerConfig(settings)
        self.clock = FakeClock(T0)
        self.producer_ids = itertools.count(1000)
        self.allocation_error = None
        self.log = []  # (partition, key bytes, value bytes or None), as stored
        self.hold = False
        self.held = []
        self.write_error = 0
        self.markers = []
        self.coordinator = self.new_coordinator()
        if load:
            for partition in range(PARTITIONS):
                self.coordinator.begin_load(partition, 0)
                self.coordinator.load(partition, 0, [])

    def new_coordinator(self):
        return TransactionCoordinator(self.config, self.allocate, self.clock)

    def allocate(self):
        if self.allocation_error is not None:
            raise self.allocation_error
        return next(self.producer_ids)

    # -- driving results --------------------------------------------------------------------

    def run(self, result):
        """Carry out ``result`` (writes stored or held, markers kept); the answer to the
        request, or None when it waits for a held write."""
        answer = result.response
        self.markers.extend(result.markers)
        for write in result.writes:
            if self.hold:
                self.held.append(write)
                continue
            follow = self.store(write, self.write_error)
            if follow is not None and answer is None:
                answer = follow
        return answer

    def store(self, write, error):
        if error == 0:
            self.log.append((write.partition, write.key, write.value))
        return self.run(self.coordinator.write_done(write, error))

    def release(self, error=0):
        """Complete the held writes with ``error``; the answers they give."""
        held, self.held = self.held, []
        self.hold = False
        return [self.store(write, error) for write in held]

    def ack(self, errors=None, gone=()):
        """Answer every marker sent: each partition's code from ``errors`` {(topic,
        partition): code} (default 0); returns the markers answered."""
        sent, self.markers = self.markers, []
        for marker in sent:
            codes = {tp: (errors or {}).get(tp, 0) for tp in marker.partitions}
            self.run(self.coordinator.markers_done(marker, codes, gone))
        return sent

    def advance(self, ms):
        """Move the clock by ``ms`` and run the coordinator's poll."""
        self.clock.now += ms
        return self.run(self.coordinator.poll())

    # -- requests ---------------------------------------------------------------------------

    def init(self, txn="t", timeout_ms=TIMEOUT_MS, producer_id=-1, producer_epoch=-1):
        return self.run(self.coordinator.init_producer_id(txn, timeout_ms, producer_id,
                                                          producer_epoch))

    def add(self, txn, producer, partitions=(("topic", 0),)):
        return self.run(self.coordinator.add_partitions(txn, producer.producer_id,
                                                        producer.producer_epoch, partitions))

    def add_offsets(self, txn, producer, group="g"):
        return self.run(self.coordinator.add_offsets(txn, producer.producer_id,
                                                     producer.producer_epoch, group))

    def end(self, txn, producer, committed=True):
        return self.run(self.coordinator.end_txn(txn, producer.producer_id,
                                                 producer.producer_epoch, committed))

    def ongoing(self, txn="t", partitions=(("topic", 0),)):
        """An initialized producer of ``txn`` with a transaction Ongoing: its Answer."""
        producer = self.init(txn)
        assert producer.error == 0
        assert self.add(txn, producer, partitions).error == 0
        return producer

    # -- looking ----------------------------------------------------------------------------

    def state(self, txn="t"):
        metadata = self.coordinator.metadata(txn)
        return None if metadata is None else metadata.state

    def stored(self, txn="t"):
        """The decoded values written for ``txn``, in order (None = tombstone)."""
        key = records.encode_key(records.TransactionLogKey(txn))
        return [records.decode_value(value) for _, k, value in self.log if k == key]

    def partition_log(self, partition):
        """[(key, value)] of ``partition``, what a reload replays."""
        return [(k, v) for p, k, v in self.log if p == partition]
