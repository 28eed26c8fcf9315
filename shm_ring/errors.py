"""Errors of the transport: the other end of a ring or connection went away.

Both are ConnectionErrors (OSError subclasses), so code written for sockets handles them: a
peer that died looks like a reset connection, a peer that closed like a broken pipe. The
message always names the ring or connection and, for a connection, the cluster and broker.
Back-pressure and timeouts are not errors: they are return values (False / None).
"""
from __future__ import annotations


class PeerDiedError(ConnectionResetError):
    """The process at the other end exited or was killed (noticed by its pid and start time).

    Retriable in Kafka's sense: a new connection (to a restarted broker) may succeed.
    """

    retriable = True

    def __init__(self, message: str, *, pid: int = 0) -> None:
        super().__init__(message)
        self.pid = pid


class PeerClosedError(BrokenPipeError):
    """The other end closed its side of the ring or connection in an orderly way."""

    retriable = True

    def __init__(self, message: str, *, pid: int = 0) -> None:
        super().__init__(message)
        self.pid = pid
