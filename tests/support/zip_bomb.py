"""Zip bombs: small, CRC-valid RecordBatch v2 batches whose records inflate far past what a
batch may hold, one per codec, and the peak Python memory a call takes (tracemalloc sees
what the codec libraries allocate as Python bytes). Shared by the segments and consumer
tests of bounded decompression."""
from __future__ import annotations

import functools
import tracemalloc

from segments.record.compression import compress
from segments.record.records import pack_batch
from tests.support.clock import T0

#: Bytes a bomb inflates to: far past the 1 MiB limits the tests set.
INFLATED = 16 * 1024 * 1024


@functools.cache
def bomb_batch(codec):
    """A one-record batch (baseOffset 0) of ``codec`` whose records are INFLATED zero bytes."""
    payload = compress(codec, bytes(INFLATED))
    return bytes(pack_batch(payload, 1, T0, T0, codec, producer_id=-1, producer_epoch=-1,
                            base_sequence=-1, partition_leader_epoch=-1))


def peak_memory(function):
    """Run ``function()``; return ``(peak bytes allocated meanwhile, what it raised)``."""
    tracemalloc.start()
    try:
        try:
            function()
        except Exception as exc:  # the caller checks what was raised
            raised = exc
        else:
            raised = None
        return tracemalloc.get_traced_memory()[1], raised
    finally:
        tracemalloc.stop()
