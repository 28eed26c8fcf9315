"""What the transaction coordinator's operations return: answers for the requester,
records to write to ``__transaction_state`` and transaction markers to send.

Every operation returns a ``Result``:

- ``response``: the answer to the request (an ``Answer``), or None when the answer waits
  for a write (it then comes from ``write_done`` of the result's write) or when nobody
  asked (a timeout, a marker acknowledgement);
- ``writes``: ``Write``s to append to ``__transaction_state`` partition ``partition`` (one
  record each, acks=all), in order; the broker reports each one's outcome to
  ``TransactionCoordinator.write_done(write, error_code)``, which returns the next Result;
- ``markers``: ``TxnMarker``s to send (WriteTxnMarkers) to the leaders of their
  partitions (``route`` splits them by leader); the broker reports the per-partition
  error codes to ``TransactionCoordinator.markers_done``.

Error fields are Kafka error codes (``cluster.errors.X.errno``; 0 = none).

Plain values: any thread.
"""
from __future__ import annotations

import dataclasses

from cluster.errors import InvalidProducerEpochError, ProducerFencedError
from cluster.protocol.frames import ApiKey
from replica_proc.transaction_coordinator.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

#: The first version of each API whose clients know PRODUCER_FENCED; older ones get
#: INVALID_PRODUCER_EPOCH instead (KafkaApis, KIP-588).
PRODUCER_FENCED_SINCE = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
}


def client_error(api_key, version, code):
    """``code`` as a client of ``api_key`` at ``version`` is answered it: PRODUCER_FENCED
    becomes INVALID_PRODUCER_EPOCH below the version that introduced it."""
    if code == ProducerFencedError.errno and version < PRODUCER_FENCED_SINCE[api_key]:
        return InvalidProducerEpochError.errno
    return code


@dataclasses.dataclass(frozen=True)
class Answer:
    """A request's answer: InitProducerId's carries the producer id and epoch; EndTxn's
    the id and epoch it was checked against (no field of EndTxn v0-2 carries them);
    AddPartitionsToTxn's and AddOffsetsToTxn's only the error."""

    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclasses.dataclass(frozen=True, eq=False)
class Write:
    """One record to append to ``__transaction_state``-``partition``: ``key`` and ``value``
    bytes (None: a tombstone). Compared by identity, so the broker may key a parked
    request by it. ``then`` is the coordinator's continuation (``write_done`` calls it)."""

    partition: int
    key: bytes
    value: bytes | None
    transactional_id: str
    coordinator_epoch: int
    transit: object = dataclasses.field(repr=False)
    then: object = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class TxnMarker:
    """A WriteTxnMarkers entry before it is split by leader: write a COMMIT
    (``committed``) or ABORT marker of ``producer_id`` / ``producer_epoch`` into each of
    ``partitions`` ((topic, partition), sorted), as coordinator epoch
    ``coordinator_epoch``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: tuple

    def only(self, partitions):
        """This marker for ``partitions`` (some of its own) only."""
        return dataclasses.replace(self, partitions=tuple(sorted(partitions)))


@dataclasses.dataclass(frozen=True)
class Result:
    """See the module doc."""

    response: Answer | None = None
    writes: tuple = ()
    markers: tuple = ()

    def __add__(self, other):
        if self.response is not None and other.response is not None:
            raise ValueError(f"two answers to one request: {self.response}, {other.response}")
        return Result(self.response if self.response is not None else other.response,
                      self.writes + other.writes, self.markers + other.markers)


NOTHING = Result()


@dataclasses.dataclass(frozen=True)
class Routes:
    """``route``'s answer: ``by_leader`` {broker id: [TxnMarker]} to send now;
    ``waiting``: markers of partitions without a live leader (send them once one is
    elected); ``gone``: markers of partitions that no longer exist (report them with
    ``markers_done(marker, {}, gone=marker.partitions)``)."""

    by_leader: dict
    waiting: tuple
    gone: tuple


def route(markers, leader_of):
    """Split ``markers`` by the leaders of their partitions. ``leader_of(topic, partition)``
    is the leader's broker id, -1 when the partition has no live leader, None when the
    partition does not exist."""
    by_leader, waiting, gone = {}, [], []
    for marker in markers:
        groups = {}
        for tp in marker.partitions:
            groups.setdefault(leader_of(*tp), []).append(tp)
        for leader, partitions in groups.items():
            part = marker.only(partitions)
            if leader is None:
                gone.append(part)
            elif leader < 0:
                waiting.append(part)
            else:
                by_leader.setdefault(leader, []).append(part)
    return Routes(by_leader, tuple(waiting), tuple(gone))
