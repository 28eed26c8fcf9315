"""Binary layout of a broker's listener: the shared memory clients open to connect.

Name: naming.listener_name(namespace, broker) = ``/ringlog.<namespace>.b<id>.listener``.
The broker creates it; clients map it for as long as they are connected, because the broker's
doorbell flag lives here.

::

      0                   1                   2                   3
      0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
     +---------------------------------------------------------------+
   0 |                     Magic and version (i64)                   |
     +---------------------------------------------------------------+
   8 |          Instance served: two i64 (0, 0: none given)          |
     +---------------------------------------------------------------+
     |                     ... to byte 128 ...                       |
     +---------------------------------------------------------------+
 128 |  Broker: pid (i64) | start time (i64) | closed flag (i64)      |
     +---------------------------------------------------------------+
 256 |     Doorbell parked flag (i64: set by the broker to block)     |
     +---------------------------------------------------------------+
 320 |  Requests pending flag (i64: set by clients, cleared by broker) |
     +---------------------------------------------------------------+
 384 |  Accept ring: a ring (ring_descriptor) of ACCEPT_CAPACITY      ...
    ...  bytes whose frames are connection names, c<pid>-<token>      |
     +---------------------------------------------------------------+

The broker writes its pid last: a zero pid means "not ready yet". The requests pending
flag is how a waiting broker learns that some connection has work without looking at every
connection's rings (connection.Listener.wait): a client sets it after every request frame it
commits and when it closes, before it looks at the doorbell's parked flag; the broker clears
it when a wait ends, before it looks at the rings (x86 store order: a frame's commit is
visible before the flag set after it). It has its own cache line: every client writes it,
the broker writes the parked flag. The accept ring has many
writers (every connecting client); they take turns under an exclusive flock(2) on the
listener's descriptor, which the kernel drops if the holder dies. Each turn maps a fresh Ring
over the area, so it starts from the published tail: a writer killed in its turn leaves
nothing committed past that tail. The broker, which holds the descriptor too, checks these
words and the accept ring's header every turn of its loop and, finding them damaged,
rewrites them under the same flock (connection.Listener).
"""
from __future__ import annotations

from shm_ring import ring_descriptor as rd

MAGIC = 0x524C_4F47_4C53_4E02
"""b'RLOGLSN' + version 2 (version 2: clients set the requests pending flag)."""

_offset = 0
MAGIC_OFFSET = _offset
"""Magic and layout version (i64)."""

INSTANCE_OFFSET = MAGIC_OFFSET + rd.WORD_LENGTH
"""The instance the broker serves: two i64 its owner chooses (ringlog's brokers: the device
and inode of their data directory, so a copy of the directory is another instance).
connect(instance=...) refuses a listener of another instance (0, 0: a listener made
without one, which serves any)."""

INSTANCE_WORDS = 2
"""i64 words of the instance."""

_offset = rd.CACHE_LINE_LENGTH * 2
BROKER_OFFSET = _offset
"""The broker: pid, start time and closed flag, laid out like a ring end."""

BROKER_PID_OFFSET = BROKER_OFFSET + rd.END_PID_OFFSET
"""Broker pid (i64), written last when the listener is ready."""

BROKER_START_TIME_OFFSET = BROKER_OFFSET + rd.END_START_TIME_OFFSET
"""Broker start time (i64), for a pid-reuse-safe liveness check."""

BROKER_CLOSED_OFFSET = BROKER_OFFSET + rd.END_CLOSED_OFFSET
"""Non-zero once the broker closed its listener."""

_offset += rd.CACHE_LINE_LENGTH * 2
DOORBELL_PARKED_OFFSET = _offset
"""Non-zero while the broker is (about to be) blocked on its doorbell."""

REQUESTS_PENDING_OFFSET = DOORBELL_PARKED_OFFSET + rd.CACHE_LINE_LENGTH
"""Non-zero once a client committed a request frame (or closed) since the broker's last
wait ended (module doc)."""

_offset += rd.CACHE_LINE_LENGTH * 2
ACCEPT_RING_OFFSET = _offset
"""Start of the accept ring (its header, then its data area)."""

ACCEPT_CAPACITY = 4096
"""Data bytes of the accept ring: about a hundred pending connection names."""

LISTENER_LENGTH = ACCEPT_RING_OFFSET + rd.HEADER_LENGTH + ACCEPT_CAPACITY
"""Total bytes of the listener."""

MAX_ANNOUNCEMENT = 64
"""Longest connection name a client may announce."""
