"""AddPartitionsToTxn and AddOffsetsToTxn calls that wait for the completion of their
transactional id's previous transaction instead of being answered CONCURRENT_TRANSACTIONS.

EndTxn is answered once PrepareCommit / PrepareAbort is written; the markers and the
CompleteCommit / CompleteAbort record follow (a few appends, each waiting for its
replication). A producer that begins its next transaction at once sends its first
AddPartitionsToTxn or AddOffsetsToTxn meanwhile; Kafka's coordinator answers it
CONCURRENT_TRANSACTIONS and the client tries again after a backoff (20 ms, or
``retry_backoff_ms``: longer than the completion it waits for). Here such a call waits
instead, its channel muted, and is run again as soon as a write of its id is done —
the Complete* record ends the completion — and answered then. It is answered as Kafka's
(CONCURRENT_TRANSACTIONS, the client retries) once ``wait`` seconds have passed with the
completion still under way (its markers are being retried: a leader moved or is down),
and at once when the completion is not what refused it.

``call(transactional_id, operation, respond)`` runs ``operation()`` (a coordinator
operation: a Result) and hands its Result to ``run(result, respond)``, or keeps the call;
``written(transactional_id)`` (a write of the id is done), ``unloaded(partition)`` (the
coordinator dropped a ``__transaction_state`` partition: its calls are answered, with
NOT_COORDINATOR) and ``expire(now)`` run kept calls again; ``next_deadline()`` is the
earliest time ``expire`` has work.

Owner: the TransactionRuntime (the broker's loop thread), the only caller.
"""
from __future__ import annotations

from cluster.errors import ConcurrentTransactionsError


class CompletionWaits:
    """The calls waiting for a transaction's completion (module doc). ``coordinator``:
    the TransactionCoordinator; ``run(result, respond)``: does a Result's I/O;
    ``clock``: monotonic seconds; ``wait``: the longest a call waits, in seconds."""

    def __init__(self, coordinator, run, clock, wait):
        self._coordinator = coordinator
        self._run = run
        self._clock = clock
        self._wait = wait
        self._waiting = {}  # transactional id -> [(deadline, operation, respond)]

    def call(self, transactional_id, operation, respond):
        """Run ``operation`` for ``respond`` now, or once the id's transaction completed."""
        self._try(transactional_id, operation, respond, self._clock() + self._wait)

    def _try(self, transactional_id, operation, respond, deadline):
        result = operation()
        answer = result.response
        if (answer is not None and answer.error == ConcurrentTransactionsError.errno
                and not result.writes and not result.markers
                and self._coordinator.completing(transactional_id)
                and self._clock() < deadline):
            self._waiting.setdefault(transactional_id, []).append(
                (deadline, operation, respond))
            return
        self._run(result, respond)

    def written(self, transactional_id):
        """A write of ``transactional_id`` is done: run its calls again."""
        if self._waiting:
            for deadline, operation, respond in self._waiting.pop(transactional_id, ()):
                self._try(transactional_id, operation, respond, deadline)

    def unloaded(self, partition):
        """``__transaction_state``-``partition`` was dropped: run its ids' calls again."""
        for transactional_id in [t for t in self._waiting
                                 if self._coordinator.partition_of(t) == partition]:
            self.written(transactional_id)

    def expire(self, now):
        """Answer the calls that waited their longest by ``now``."""
        if not self._waiting:
            return
        for transactional_id, calls in list(self._waiting.items()):
            if any(deadline <= now for deadline, _, _ in calls):
                self.written(transactional_id)

    def next_deadline(self):
        """The earliest deadline of a waiting call (monotonic seconds), or None."""
        if not self._waiting:
            return None
        return min(deadline for calls in self._waiting.values() for deadline, _, _ in calls)
