"""Rebuild the transaction indexes of a log's segments from the batches themselves.

The ``.txnindex`` files are derived data (``txn_index``): each entry is an ABORT marker
of the segment, the first offset of the transaction it ended and the last stable offset
once it was appended. All of that follows from the batch headers and the control
records, read in order from the start of the log:

- a transactional data batch of producer P opens P's transaction at its base offset
  (unless one is open already);
- a control batch of P closes it: an ABORT marker at offset M adds
  ``AbortedTxn(P, first offset of P's transaction — M itself if none was open, M,
  LSO)``, where LSO is the smallest first offset of the transactions still open (other
  producers') or M + 1 when none is (Kafka's ProducerStateManager.lastStableOffset of a
  completed transaction).

A transaction that began before the first segment still on disk (retention deleted its
start) is seen from its first batch that is left, so its first offset is at worst too
high by what retention removed, which no reader can fetch anyway.

The log rebuilds the indexes of the segments from a given one on (those an unclean
shutdown recovered, or from the first whose index fails its sanity check); the scan
always starts at the first segment, because a transaction can span segments. It reads
every batch of every segment once, which is why the log does it only then.

``verify_txn_index`` is the check at first use (``PartitionLog.
collect_aborted_transactions``): a segment's entries against what its batches say,
given the transactions open at its start (the log carries that state from one segment
to the next), the index rewritten from the batches when they differ. A
byte flipped in an index that keeps every rule of the strict parse (another producer
id, first offset or last stable offset) would otherwise make a read_committed consumer
drop committed records or keep aborted ones.

Owner: the ``PartitionLog``'s thread, while it opens the log.
"""
from __future__ import annotations

from segments.index import CorruptIndexError
from segments.record.batch_header import BatchHeader
from segments.record.control_record import ABORT, read_control_record
from segments.segment import iter_file_batches
from segments.txn_index import AbortedTxn


def scan_aborted(segment, ongoing):
    """The AbortedTxns of ``segment``'s ABORT markers, in order, given ``ongoing`` —
    ``{producer id: first offset}`` of the transactions open when the segment begins,
    updated in place to those open when it ends."""
    found = []
    # Holds the raw descriptor: nothing in the loop opens a file (the entries are
    # written by the caller afterwards), so the file cache cannot release it meanwhile.
    for _, view in iter_file_batches(segment.fd, 0, segment.size):
        header = BatchHeader(view)
        producer_id = header.producer_id
        if producer_id < 0 or not header.is_transactional:
            continue
        if not header.is_control_batch:
            ongoing.setdefault(producer_id, header.base_offset)
            continue
        marker = header.base_offset
        first = ongoing.pop(producer_id, marker)
        if read_control_record(view, header).control_type == ABORT:
            lso = min(ongoing.values(), default=marker + 1)
            found.append(AbortedTxn(producer_id, first, marker, lso))
    return found


def rebuild_txn_indexes(segments, first_rebuilt):
    """Rewrite the transaction indexes of ``segments[first_rebuilt:]`` from the batches of
    all ``segments`` (a log's, in order); return how many entries were written."""
    ongoing = {}
    written = 0
    for n, segment in enumerate(segments):
        aborted = scan_aborted(segment, ongoing)
        if n < first_rebuilt:
            continue
        segment.txn_index.reset()
        for txn in aborted:
            segment.txn_index.append(txn)
        segment.txn_index.flush()
        segment.txn_index.verified = True
        written += len(aborted)
    return written


def verify_txn_index(segment, ongoing):
    """Check ``segment``'s transaction index against its ABORT markers, given ``ongoing``
    (as ``scan_aborted``, updated in place); on a difference rewrite the index from the
    batches and return what differed (None: it matched). The index is ``verified``
    after either. OSError if the rewrite fails."""
    expected = scan_aborted(segment, ongoing)
    index = segment.txn_index
    try:
        found = index.entries()
    except CorruptIndexError as exc:  # changed on disk since the open parsed it
        found, problem = None, str(exc)
    else:
        problem = None if found == expected else _difference(index.path, found, expected)
    if problem is not None:
        index.reset()
        for txn in expected:
            index.append(txn)
        index.flush()
    index.verified = True
    return problem


def _difference(path, found, expected):
    for n, (have, want) in enumerate(zip(found, expected)):
        if have != want:
            return f"transaction index {path}: entry {n} is {have}, the batches say {want}"
    return (f"transaction index {path}: {len(found)} entries, the batches' ABORT markers "
            f"make {len(expected)}")
