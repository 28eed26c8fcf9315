"""One client connection as the broker's request loop sees it: requests answered in order.

Kafka mutes a channel while one of its requests is in flight, so responses leave in request
order; so does a ``Channel``. It is *muted* while

- one of its requests waits for a delayed response (``parked``: a Fetch in the fetch
  purgatory, a group request waiting for the group coordinator: ``delayed_response``), or
- a response could not be written because the client's response ring is full
  (``unsent``; retried after the client frees room, which rings the broker's doorbell), or
- a request other than Produce arrives while acks=all Produce requests of the channel wait
  in the produce purgatory (``produces``; ``blocked`` until they are all answered), or
  ``MAX_WAITING_PRODUCES`` answers are owed (``blocked`` until one fewer is).

acks=all Produce requests are the exception to the muting (``wait_for``): while one waits
for the followers, the channel goes on reading the Produce requests the producer has in
flight (up to ``max_in_flight_requests_per_connection``), so their batches are appended and
replicated together instead of one request per replication round trip. Every answer still
leaves in request order: a response written while produces wait is queued behind them
(``produces``), and a delayed produce's answer (``answer``) releases the answers queued
behind it. The appends are in request order as before; only the waiting overlaps.

Frames that arrive meanwhile are read into ``backlog`` (views of the request ring, not
copies: a 1 MB produce behind a muted channel costs no copy) and left unreleased in the
ring, so the client feels back-pressure once its ring is full and the broker's wait is
not woken again and again by frames it cannot handle yet. When the channel is unmuted the
backlog is handled first, then the ring; the ring's frames are released once every frame
read so far has been handled — never while the backlog holds some, whose views would
then point at bytes the client may overwrite.

Responses: ``send(frame)`` for an encoded frame, ``send_fetch(response)`` for a
``FetchResponseFrame``, which is written straight into a claimed response-ring slot (log
bytes read from the segment files into the shared memory); when no slot can be claimed now,
the frame is materialised into bytes and sent like any other. A response longer than the
ring's largest frame goes as fragments filled straight from the files too
(``try_send_filled``); what does not fit in the ring now is read into a buffer by the ring
before the call returns, so the log slices need not stay valid until it is sent.

Needing service. A channel the loop must look at again without a request of its own —
``closing`` (to drop it), ``unsent`` (to retry), unmuted with frames in ``backlog`` or
unreleased (``needs_service``) — puts itself in the loop's ``service`` set when it gets
there: ``parked`` cleared, ``closing`` set, a response kept, a waiting produce answered or
forgotten. The loop looks at the channels of that set and at those whose connection has
requests (``Listener.ready``), never at every channel (``replica_proc.broker``); a channel
stays in the set while it needs service.

Owner: the broker's loop thread, the only caller.
"""
from __future__ import annotations

import collections
import logging

from cluster.protocol.fetch_response import FetchResponseFrame
from cluster.protocol.frame_descriptor import API_KEY_OFFSET
from cluster.protocol.frames import ApiKey

log = logging.getLogger(__name__)

MAX_WAITING_PRODUCES = 5
"""Most acks=all Produce requests of one channel waiting in the purgatory at once (the
producer's default ``max_in_flight_requests_per_connection``); the channel is muted at that
many until they are answered."""

_PRODUCE = int(ApiKey.PRODUCE)


class CloseConnection(Exception):
    """Raised by a request handler: drop this connection (garbage on it, an API it may not
    use, or an error Kafka answers by closing); the message says why."""


class Channel:
    """The broker's state for one accepted ``shm_ring.Connection`` (see the module doc)."""

    __slots__ = ("conn", "name", "backlog", "_parked", "unsent", "_closing", "max_frame",
                 "produces", "blocked", "_unreleased", "_service")

    def __init__(self, conn, service=None):
        self.conn = conn
        self.name = conn.name
        self.backlog = collections.deque()
        self._parked = None  # its DelayedFetch or DelayedResponse, while one waits
        self.unsent = None  # a response frame waiting for room in the response ring
        self._closing = None  # why the broker drops this connection, once it decided to
        # The loop's channels needing service (module doc); a set of its own when alone.
        self._service = set() if service is None else service
        # Largest response the client's ring takes in one frame (longer ones go as
        # fragments, which cannot be claimed: send_fetch materialises those).
        self.max_frame = conn.max_response_frame
        # The answers owed while acks=all produces wait, in request order: [DelayedProduce,
        # None] until it is answered, then [DelayedProduce or None, frame].
        self.produces = collections.deque()
        self.blocked = False  # muted until the waiting produces are answered
        self._unreleased = False

    def __repr__(self):
        state = ("closing" if self.closing else "parked" if self.parked is not None
                 else "unsent" if self.unsent is not None else "blocked" if self.blocked
                 else "open")
        return (f"Channel({self.name!r}, {state}, backlog={len(self.backlog)}, "
                f"produces={len(self.produces)})")

    @property
    def parked(self):
        """The DelayedFetch or DelayedResponse of this channel that waits, or None."""
        return self._parked

    @parked.setter
    def parked(self, delayed):
        self._parked = delayed
        if delayed is None:  # unmuted: the backlog may wait (module doc)
            self._service.add(self)

    @property
    def closing(self):
        """Why the broker drops this connection, once it decided to (else None)."""
        return self._closing

    @closing.setter
    def closing(self, why):
        self._closing = why
        if why:
            self._service.add(self)

    @property
    def muted(self):
        """Whether no request is handled now (see the module doc)."""
        return self._parked is not None or self.unsent is not None or self.blocked

    # -- requests -------------------------------------------------------------------------

    def next_request(self):
        """The next request frame to handle (the backlog's first, else the ring's next), or
        None when muted, closing or there is none."""
        if (self._parked is not None or self.unsent is not None or self.blocked
                or self._closing):
            return None
        if self.backlog:
            frame = self.backlog.popleft()
        else:
            frame = self.conn.recv()
            if frame is None:
                return None
            self._unreleased = True
        if self.produces and (len(frame) < API_KEY_OFFSET + 2 or int.from_bytes(
                frame[API_KEY_OFFSET:API_KEY_OFFSET + 2], "big") != _PRODUCE):
            self.blocked = True  # answered after the produces that wait
            self.backlog.appendleft(frame)
            return None
        return frame

    def settle(self):
        """After handling: release the ring's frames if nothing is pending and every frame
        read was handled, else read the frames that arrived into the backlog (without
        releasing them); unmuted with a backlog left, the channel needs service."""
        if self._closing:
            return
        if not self.muted:
            if self.backlog:  # left for the next turn (needing service)
                self._service.add(self)
            elif self._unreleased:
                self._unreleased = False
                self.conn.release()
            return
        conn = self.conn
        while (frame := conn.recv()) is not None:
            self._unreleased = True
            self.backlog.append(frame)

    @property
    def needs_service(self):
        """Unmuted with requests in the backlog, or handled frames still to release."""
        return (not self.muted and not self._closing
                and (bool(self.backlog) or self._unreleased))

    @property
    def wants_turn(self):
        """Whether the loop must look at this channel without a request of its own: to drop
        it, retry its unsent response, or serve what it holds (module doc)."""
        return (bool(self._closing) or self.unsent is not None
                or (bool(self.backlog) or self._unreleased) and not self.muted)

    # -- responses ------------------------------------------------------------------------

    def send(self, frame):
        """Write ``frame`` (an encoded response frame) or keep it until there is room;
        queue it behind the produces that wait, if any."""
        if self.produces:
            self.produces.append([None, frame])
            return
        self._write(frame)

    def _write(self, frame):
        if self.unsent is None and self.conn.try_send(frame):
            return
        self._keep(frame)

    def wait_for(self, produce):
        """``produce`` (a DelayedProduce of this channel) waits in the purgatory: its
        answer (``answer``) goes before those of the requests after it."""
        self.produces.append([produce, None])
        if len(self.produces) >= MAX_WAITING_PRODUCES:
            self.blocked = True

    def answer(self, produce, frame):
        """The answer of a produce given to ``wait_for``: written once every request before
        it is answered, and the answers queued behind it with it."""
        for entry in self.produces:
            if entry[0] is produce:
                entry[1] = frame
                break
        else:
            raise AssertionError(f"{self.name}: {produce!r} does not wait on this channel")
        self._drain()

    def forget_produces(self):
        """The waiting produces (the client went away: the caller cancels them)."""
        waiting = [entry[0] for entry in self.produces if entry[0] is not None]
        self.produces.clear()
        self.blocked = False
        self._service.add(self)
        return waiting

    def _drain(self):
        """Write the answers at the head of ``produces`` that are ready (until one waits, or
        the response ring is full: ``retry_send`` goes on)."""
        produces = self.produces
        while produces and produces[0][1] is not None and self.unsent is None:
            self._write(produces.popleft()[1])
        if len(produces) < MAX_WAITING_PRODUCES:
            # Unmuted: a request other than Produce at the head of the backlog mutes the
            # channel again while produces still wait (next_request).
            self.blocked = False
            self._service.add(self)

    def send_fetch(self, response):
        """Write a ``FetchResponseFrame`` into a claimed response slot (or keep its bytes
        until there is room); queued behind the produces that wait, if any."""
        if self.produces:
            self.send(response.tobytes())
            return
        if response.size > self.max_frame:
            if self.unsent is None and self.conn.try_send_filled(
                    response, response.size, response.write_range_into):
                return
            # Part way out, the ring holding the rest (retry_send finishes it); else bytes.
            self._keep(response if self.conn.sending is response else response.tobytes())
            return
        if self.unsent is None:
            view = self.conn.claim(response.size)
            if view is not None:
                try:
                    response.write_into(view)
                except BaseException:
                    view.release()
                    self.conn.abort()
                    raise
                view.release()
                self.conn.commit()
                return
        self._keep(response.tobytes())

    def _keep(self, frame):
        if self.unsent is not None:
            raise AssertionError(f"{self.name}: a second response while one is unsent")
        self.unsent = frame
        self._service.add(self)

    def retry_send(self):
        """Try the unsent response again; True once it is sent."""
        unsent = self.unsent
        if unsent.__class__ is FetchResponseFrame:  # the rest of one part way out
            sent = self.conn.try_send_filled(unsent, unsent.size, unsent.write_range_into)
        else:
            sent = self.conn.try_send(unsent)
        if sent:
            self.unsent = None
            if self.produces:
                self._drain()
            return self.unsent is None
        return False

    # -- closing --------------------------------------------------------------------------

    def close(self, listener):
        """Drop the connection: the client's next call raises PeerClosedError (it unlinks
        the connection's names, which it owns)."""
        self.backlog.clear()
        self.unsent = None
        self.produces.clear()
        self._service.discard(self)
        listener.drop(self.conn)
