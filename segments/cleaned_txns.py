"""What one compaction pass decides about transactions (Kafka's CleanedTransactionMetadata).

The cleaner (``segments.cleaner``) walks the batches of the range it cleans in offset
order and asks a ``CleanedTransactions`` about each one:

- ``on_data_batch(header)``: whether the batch belongs to an aborted transaction (its
  records go, whatever their keys). The aborted transactions are those of the
  transaction indexes overlapping the range (``PartitionLog.collect_aborted_transactions``),
  given at construction: one *begins* for its producer when the walk reaches its first
  offset, and every transactional batch of that producer from there to its ABORT marker
  is aborted. Any other transactional batch is committed: the range lies below the last
  stable offset, so every transaction in it is decided.
- ``on_control_batch(buf, header)``: ``(discardable, index_entry)`` for a transaction
  marker. A marker is *discardable* once the pass met no batch of its transaction (an
  earlier pass removed them all): a COMMIT marker when no batch of its producer was
  walked since that producer's previous marker; an ABORT marker when no batch of its
  aborted transaction was. Only then may it go at all (the cleaner still keeps it until
  its delete horizon, KIP-534), so a reader never meets a transaction's records without
  its marker. ``index_entry`` is the AbortedTxn the cleaned segment's ``.txnindex`` must
  keep for an ABORT marker that stays with batches of its transaction still in the pass
  (None otherwise: no record of that transaction is left for a reader to skip).

Unlike Kafka's, an ABORT marker whose producer had batches walked as committed (an index
that missed the abort) is not discardable either: it then still ends records a reader
may see, and the marker is what a rebuild of the index would find them by.

Pure bookkeeping: no I/O besides decoding the marker's record from the buffer given;
one instance per pass, on the cleaner's thread.
"""
from __future__ import annotations

from segments.record.control_record import ABORT, COMMIT, read_control_record


class CleanedTransactions:
    """The transaction state of one pass over batches in offset order (module doc);
    ``aborted``: the AbortedTxns overlapping the range cleaned."""

    def __init__(self, aborted):
        self._pending = sorted(set(aborted), key=lambda txn: (txn.first_offset,
                                                             txn.last_offset))
        self._next = 0
        #: producer id -> [its aborted AbortedTxn, whether a batch of it was walked]
        self._aborted = {}
        #: producer ids with committed transactional batches walked since their marker
        self._committed = set()

    def _begin_up_to(self, offset):
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= offset:
            txn = pending[self._next]
            self._next += 1
            self._aborted.setdefault(txn.producer_id, [txn, False])

    def on_data_batch(self, header):
        """Whether the data batch ``header`` belongs to an aborted transaction."""
        self._begin_up_to(header.last_offset)
        if not header.is_transactional or header.producer_id < 0:
            return False
        state = self._aborted.get(header.producer_id)
        if state is not None:
            state[1] = True
            return True
        self._committed.add(header.producer_id)
        return False

    def on_control_batch(self, buf, header):
        """``(discardable, index_entry)`` for the control batch ``header`` over ``buf``
        (module doc); CorruptRecordError if its control record does not parse."""
        self._begin_up_to(header.last_offset)
        if not header.record_count:
            return True, None  # emptied by a cleaner: nothing left to end
        control_type = read_control_record(buf, header).control_type
        producer_id = header.producer_id
        if control_type == COMMIT:
            if producer_id in self._committed:
                self._committed.discard(producer_id)
                return False, None
            return True, None
        if control_type == ABORT:
            state = self._aborted.pop(producer_id, None)
            walked_as_committed = producer_id in self._committed
            self._committed.discard(producer_id)
            if state is not None and state[1]:
                return False, state[0]
            return not walked_as_committed, None
        return False, None  # a control type this code does not know: keep it
