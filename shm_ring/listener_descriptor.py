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
5376 |  Requests pending flags: PENDING_SLOTS bytes, one per slot      ...
    ...  (set by the slot's client, cleared by the broker)            |
     +---------------------------------------------------------------+

The broker writes its pid last: a zero pid means "not ready yet". The requests pending
flag is how a waiting broker learns that some connection has work without looking at every
connection's rings (connection.Listener.wait): a client sets it after every request frame it
commits and when it closes, before it looks at the doorbell's parked flag; the broker clears
it when a wait ends, before it looks at the rings (x86 store order: a frame's commit is
visible before the flag set after it). It has its own cache line: every client writes it,
the broker writes the parked flag.

The requests pending flags say *which* connections: the broker gives each connection it
accepts a slot (ring_descriptor.END_PENDING_SLOT_OFFSET in the response ring's writer end,
written before the accept), and the slot's client sets its byte before it sets the requests
pending flag: commit, byte, flag, fence, parked flag. The broker, once it saw the flag set:
clears the flag, fence, reads the bytes, clears the set ones, fence, then looks at those
connections' rings and closed flags only. A byte a client set after the broker read the
table came with a flag set after the broker cleared it; a frame committed after the broker
looked at a ring came with a byte set after the broker cleared it: either is seen at the next
look. One byte per client (no two clients write one word; bytes are stored whole). A
connection without a slot (its client is a broker that does not wait for the accept, or the
table is full) is looked at whenever the flag was set.

The accept ring has many
writers (every connecting client); they take turns under an exclusive flock(2) on the
listener's descriptor, which the kernel drops if the holder dies. Each turn maps a fresh Ring
over the area, so it starts from the published tail: a writer killed in its turn leaves
nothing committed past that tail. The broker, which holds the descriptor too, checks these
words and the accept ring's header every turn of its loop and, finding them damaged,
rewrites them under the same flock (connection.Listener).
"""
from __future__ import annotations

from shm_ring import ring_descriptor as rd

MAGIC = 0x524C_4F47_4C53_4E03
"""b'RLOGLSN' + version 3 (version 2: clients set the requests pending flag; version 3:
and their connection's byte of the requests pending flags)."""

MAGIC_STEM = MAGIC & ~0xFF
"""The magic without its version byte: a listener of another version of this layout."""

VERSION = MAGIC & 0xFF
"""This layout's version (the magic's low byte)."""

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

PENDING_SLOTS_OFFSET = ACCEPT_RING_OFFSET + rd.HEADER_LENGTH + ACCEPT_CAPACITY
"""Start of the requests pending flags: one byte per slot (module doc)."""

PENDING_SLOTS = 4096
"""Slots in the requests pending flags: connections beyond that many have none."""

LISTENER_LENGTH = PENDING_SLOTS_OFFSET + PENDING_SLOTS
"""Total bytes of the listener."""

MAX_ANNOUNCEMENT = 64
"""Longest connection name a client may announce."""
