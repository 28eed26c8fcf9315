"""The broker's doorbell: one wake-up for all of a broker's connections.

The broker blocks in one place, whatever it waits for: a request in any request ring, room
freed in a response ring it could not write, a new connection announced, a client closing.
Every client rings the doorbell after such an event, and — like every wake-up here (see
wakeup) — posts the semaphore only when the broker set its parked flag, so a busy broker costs
clients no syscall. Several clients may see the flag and post before the broker clears it; the
extra posts only cost the broker an extra look at its connections. Clients also set the
listener's requests pending flag before they look at the parked flag, so the broker's wait
checks one word instead of every connection's rings (connection.Listener.wait), and, just
before it, their connection's byte of the requests pending flags (use_flag), so the broker's
turn looks at the connections with work only (listener_descriptor: the order).
"""
from __future__ import annotations

from collections.abc import Callable

from shm_ring.naming import NamedSemaphore, doorbell_name
from shm_ring.wakeup import DEFAULT_POLICY, WaitPolicy, WakeSlot


class Doorbell:
    """A semaphore named /ringlog.<cluster>.b<id>.doorbell plus the broker's parked flag.

    Ownership: the broker creates it and unlinks it; it alone waits (one thread). Clients open
    it and ring it from any thread. The parked flag is a word of the listener's memory (words,
    index); the doorbell does not own that memory.
    """

    def __init__(self, semaphore: NamedSemaphore, words: memoryview, index: int,
                 pending: int | None = None) -> None:
        self.name = semaphore.name
        self._semaphore = semaphore
        self.semaphore = semaphore.semaphore
        """The posix_ipc handle (other wake-ups may post it, e.g. room in a response ring)."""
        self.slot = WakeSlot(words, index, semaphore.semaphore,
                             None if pending is None else (words, pending, bytearray(1), 0))
        self.ring: Callable[[], None] = self.slot.notify
        """Set the connection's pending byte and the requests pending flag (if the doorbell
        has them), then wake the broker if it is parked (call after publishing)."""

    def use_flag(self, flags: memoryview, flag: int) -> None:
        """Set byte ``flag`` of ``flags`` (the listener's requests pending flags) before the
        requests pending flag from now on: the connection's slot, given at its accept. Call
        before making writers over this doorbell (they keep its pending tuple)."""
        pending = self.slot.pending
        if pending is None:
            raise ValueError(f"doorbell {self.name} has no requests pending flag")
        self.slot.pending = (pending[0], pending[1], flags, flag)

    @classmethod
    def create(cls, cluster_id: str, broker_id: int, words: memoryview,
               index: int, pending: int | None = None) -> Doorbell:
        """Create the doorbell semaphore (FileExistsError if it exists); ``pending``: the
        index in ``words`` of the requests pending flag (listener_descriptor), if any."""
        return cls(NamedSemaphore.create(doorbell_name(cluster_id, broker_id)), words, index,
                   pending)

    @classmethod
    def open(cls, cluster_id: str, broker_id: int, words: memoryview, index: int,
             pending: int | None = None) -> Doorbell:
        """Open a broker's doorbell (FileNotFoundError if the broker is not there)."""
        return cls(NamedSemaphore.open(doorbell_name(cluster_id, broker_id)), words, index,
                   pending)

    def wait(self, ready: Callable[[], bool], timeout: float | None,
             policy: WaitPolicy = DEFAULT_POLICY) -> bool:
        """Spin, then park until ready() is true; False after timeout seconds (None: never).

        ready() must cover every event a client rings for, since it is the re-check made after
        setting the parked flag. It watches no single peer: Listener.reap does.
        """
        return self.slot.wait_until(ready, policy.deadline(timeout), policy, None)

    def close(self) -> None:
        """Drop this process's handle; safe to call twice."""
        self._semaphore.close()

    def unlink(self) -> None:
        """Remove the name (the broker does this); safe to call twice."""
        self._semaphore.unlink()
