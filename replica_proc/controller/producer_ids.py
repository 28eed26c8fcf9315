"""Producer id blocks: how the controller hands out producer ids that are never reused.

Kafka's KRaft scheme (KIP-730, ``ProducerIdControlManager``): the active controller owns
the next free producer id, kept in the metadata log as ``producer_ids`` records
(``metadata_log.producer_ids_record``: ``broker_id``, ``broker_epoch``,
``next_producer_id``, Kafka's ``ProducerIdsRecord``). A broker asks it for a block
(AllocateProducerIds); the controller answers ``[next_producer_id, next_producer_id +
BLOCK_SIZE)`` only after the record moving ``next_producer_id`` past the block is in the
log, fsynced. A new controller replays the log and starts after the newest record, so a
controller failover or a full restart never hands out an id twice; a broker that dies with
part of its block unused loses those ids (never reused either).

Pure functions over the numbers; the controller (``controller.Controller``) keeps the
current value and appends the records.
"""
from __future__ import annotations

from typing import NamedTuple

from cluster.errors import UnknownError
from segments.log_config import LONG_MAX

#: Producer ids per block (Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``).
BLOCK_SIZE = 1000


class ProducerIdsBlock(NamedTuple):
    """``size`` producer ids from ``first_id``, given to broker ``broker_id``."""

    broker_id: int
    first_id: int
    size: int

    @property
    def last_id(self):
        return self.first_id + self.size - 1

    @property
    def next_block_first_id(self):
        return self.first_id + self.size


def next_block(next_producer_id, broker_id, size=BLOCK_SIZE):
    """The block of ``size`` ids starting at ``next_producer_id`` for ``broker_id``;
    UnknownError (UNKNOWN_SERVER_ERROR) when the id space (non-negative 64-bit) is used
    up, as Kafka."""
    if next_producer_id > LONG_MAX - size:
        raise UnknownError(
            f"exhausted all producer ids: the next free one is {next_producer_id}, a block "
            f"of {size} would pass {LONG_MAX}")
    return ProducerIdsBlock(broker_id, next_producer_id, size)


def replayed(next_producer_id, record):
    """``next_producer_id`` after the ``producer_ids`` ``record``; ValueError if the
    record would move it back (the log is damaged or was written by a newer ringlog)."""
    value = record["next_producer_id"]
    if value < next_producer_id:
        raise ValueError(f"producer_ids record {record!r} moves next_producer_id back from "
                         f"{next_producer_id}")
    return value
