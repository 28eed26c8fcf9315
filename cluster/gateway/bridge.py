"""One Kafka client's TCP connection bridged to one ring connection of one broker.

A ``Bridge`` owns a client socket accepted on the listener of broker B and, from the first
request that goes to B, one ``shm_ring`` connection to B. One thread moves the frames both
ways, in rounds:

1. **read**: the socket into a buffer of its own (``READ_BUFFER`` bytes, reused: a
   pipelining client's requests come in with one ``recv_into``; a frame larger than the
   buffer gets one of its own). It blocks (``poll``) only when no request waits for an
   answer; otherwise it takes what the socket already holds (``MSG_DONTWAIT``);
2. **forward**: each whole size-prefixed frame goes into the request ring as it arrived;
   a request the gateway serves itself (``wire.LOCAL_VERSIONS``) is answered here
   instead. The requests waiting for an answer are ``_waiting``, in request order;
3. **answer**: wait for the first waiting request's answer, then take every answer already
   there after it (up to ``MAX_BATCH``) and write them to the socket with one
   ``sendmsg``, in request order as Kafka promises: the broker's frames straight from the
   response ring (no copy; only ``wire.REWRITTEN`` APIs are decoded and re-encoded with the
   gateway's addresses), their ring frames released together after it.

A request is never held back waiting for the socket while the broker has work: the
requests read in a round all go to the broker before the thread waits for an answer. A
pipelined request that arrives while the thread waits for an answer is read in the next
round, as Kafka's network layer reads a connection's next request once it answered the
one before (a muted channel). One thread per connection and no hand-off between threads:
a request costs one wake-up for its bytes and one for its answer at most (fewer when
requests come in together), and no GIL hand-over (perf/README.md, "Gateway threads").

Kafka's network layer, per connection: at most ``queued.max.requests`` requests wait for
their answers (at the limit the thread forwards no more and reads at most the buffer), the
read buffer and the request ring bound the bytes in flight, so a client that never reads
its responses stalls only itself (its thread blocks in ``sendmsg``, the broker defers that
connection only). A full request ring is drained by answering first (the broker needs
room in the response ring to take more requests). A size prefix that is negative, shorter
than a request header or over ``socket.request.max.bytes``, and a frame the ring cannot
carry, close this connection only, with a warning naming the client's address; so does a
broker that closes the ring connection (it does so for a request that does not decode). A
connection with no bytes either way and no request in flight for
``connections.max.idle.ms`` is closed.

Threads: the bridge's own; ``close()`` may be called from any thread (the server's
shutdown); ``outstanding`` is read by the stats publisher.
"""
from __future__ import annotations

import collections
import logging
import mmap
import select
import socket
import threading
import time

import posix_ipc

from cluster.errors import InvalidRequestError, KafkaProtocolError
from cluster.gateway import wire
from cluster.protocol import frame_descriptor as d, frames
from shm_ring import PeerClosedError, PeerDiedError, connect, max_frame_length
from shm_ring.wakeup import hold_posts, release_posts, stop_holding

log = logging.getLogger(__name__)

#: Seconds between two looks at ``closed`` and the idle clock while the thread waits.
WAIT_SLICE = 0.5

#: Seconds to wait for a broker to accept the ring connection.
CONNECT_TIMEOUT = 5.0

#: Bytes of a connection's read buffer: requests up to this size are read in place (its
#: pages are taken as bytes arrive: a thousand idle connections do not hold it all).
READ_BUFFER = 256 * 1024

#: Answers written with one sendmsg at most (well under the kernel's IOV_MAX).
MAX_BATCH = 64

_MIN_SIZE = d.MIN_REQUEST_FRAME_LENGTH - d.SIZE_PREFIX_LENGTH


class _Pending:
    """A request waiting for its answer."""

    __slots__ = ("correlation_id", "api_key", "api_version", "local")

    def __init__(self, correlation_id, api_key, api_version, local):
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.local = local  # the gateway's own response frame, or None: the broker answers


class _Closed(Exception):
    """The connection is done; the message says why (logged by the bridge's thread)."""

    def __init__(self, message, level=logging.DEBUG):
        super().__init__(message)
        self.level = level


class Bridge:
    """A client connection (see the module doc). ``gateway`` is the owning ``Gateway``:
    its ``config``, ``namespace``, ``instance``, ``host``, ``port_for``, ``image()``,
    ``stats`` and ``forget(bridge)``."""

    def __init__(self, gateway, sock, address, broker_id):
        self.gateway = gateway
        self.sock = sock
        self.peer = f"{address[0]}:{address[1]}"
        self.broker_id = broker_id
        config = gateway.config
        self._max_request = config.socket_request_max_bytes
        self._idle = config.connections_max_idle_ms / 1000
        self._queued_max = config.queued_max_requests
        self._waiting = collections.deque()  # _Pending, in request order
        self._ring = None
        self._max_frame = max_frame_length(config.ring_bytes)
        # reused; anonymous memory, so a connection of small requests (read from the front
        # each time) holds a page or two of it, not all
        self._buffer = mmap.mmap(-1, READ_BUFFER)
        self._view = memoryview(self._buffer)
        self._start = self._end = 0  # the bytes read and not yet forwarded: [start, end)
        self._eof = False  # the client closed its end (seen by a read)
        self.closed = False
        self._stop = lambda: self.closed
        self._last_active = time.monotonic()
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"gateway-{self.peer}")

    def start(self):
        self._thread.start()

    def close(self):
        """Ask the thread to stop (any thread; idempotent)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        ring = self._ring
        if ring is not None:
            ring.interrupt()

    @property
    def outstanding(self):
        """Requests read and not answered yet: this connection's queue depth."""
        return len(self._waiting)

    def join(self, timeout=None):
        self._thread.join(timeout)

    # -- the thread ---------------------------------------------------------------------------

    def _run(self):
        reason = _Closed("client closed the connection")
        hold_posts()  # the broker is woken once per round's requests (_forward_buffered)
        try:
            while not self.closed:
                if not self._read(wait=not self._waiting and not self._frame_buffered()):
                    break
                self._forward_buffered()
                if self._waiting:
                    self._answer_some()
        except _Closed as exc:
            reason = exc
        except OSError as exc:
            reason = _Closed(f"socket error: {exc}")
        except (PeerDiedError, PeerClosedError) as exc:
            reason = _Closed(f"broker {self.broker_id} closed its ring connection ({exc}); "
                             f"a request that does not decode makes it do so", logging.INFO)
        except KafkaProtocolError as exc:
            reason = _Closed(str(exc), logging.WARNING)
        except Exception as exc:  # a bug must cost this connection only, and say so
            log.exception("closing connection from %s to broker %d", self.peer,
                          self.broker_id)
            reason, self.closed = _Closed(str(exc)), True
        finally:
            if not self.closed:
                log.log(reason.level, "closing connection from %s to broker %d: %s",
                        self.peer, self.broker_id, reason)
            self.close()
            stop_holding()
            self._close_ring()
            self.sock.close()
            self.gateway.forget(self)

    def _close_ring(self):
        """Close the ring connection; the broker may have closed it meanwhile (then the
        error the thread saw already unlinked its objects)."""
        if self._ring is None:
            return
        try:
            self._ring.close()
        except (OSError, ValueError, posix_ipc.Error) as exc:
            log.debug("ring connection of %s already gone: %s", self.peer, exc)

    # -- reading -------------------------------------------------------------------------------

    def _frame_buffered(self):
        """Whether the buffer holds a whole frame's bytes (or the start of one too large
        for it, or a size prefix to refuse): something to forward without reading."""
        have = self._end - self._start
        if have < d.SIZE_PREFIX_LENGTH:
            return False
        (size,) = d.INT32.unpack_from(self._buffer, self._start)
        return have >= d.SIZE_PREFIX_LENGTH + size or size + d.SIZE_PREFIX_LENGTH > READ_BUFFER

    def _read(self, wait):
        """Read what the socket holds into the buffer, waiting for bytes when ``wait``
        (no request waits for an answer, no whole frame is buffered); False once the
        client closed (its answers are not written, as Kafka drops them) or the connection
        is closing. _Closed if it closed in the middle of a frame."""
        if self._eof:
            if self._end > self._start:
                raise _Closed(f"client closed the connection with {self._end - self._start} "
                              f"bytes of requests not forwarded", logging.INFO)
            return False
        if self._start and self._end == READ_BUFFER:  # room behind what is left: compact
            held = bytes(self._view[self._start:self._end])
            self._buffer[:len(held)] = held
            self._start, self._end = 0, len(held)
        if self._end == READ_BUFFER:
            return True  # full of frames still to forward (at queued.max.requests)
        while True:
            try:
                count = self.sock.recv_into(self._view[self._end:], 0, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                if not wait:
                    return True
                if not self._wait_readable():
                    return False
                continue
            if count:
                self._end += count
                self._last_active = time.monotonic()
            else:
                self._eof = True
                return self._read(wait)
            return True

    def _wait_readable(self):
        """Block until the socket has bytes (True) or the connection is closing (False);
        _Closed once it has been idle for ``connections.max.idle.ms``."""
        release_posts()
        while not self.closed:
            if self._poll.poll(WAIT_SLICE * 1000):
                return True
            if time.monotonic() - self._last_active >= self._idle:
                raise _Closed(f"idle for more than connections.max.idle.ms "
                              f"({self._idle * 1000:.0f} ms)", logging.INFO)
        return False

    def _fill_frame(self, length):
        """A request frame of ``length`` bytes, larger than the buffer: the bytes buffered
        and the rest read from the socket into a bytearray of its own."""
        frame = bytearray(length)
        have = self._end - self._start
        frame[:have] = self._view[self._start:self._end]
        self._start = self._end = 0
        with memoryview(frame) as view:
            while have < length:
                if self._eof:
                    raise _Closed(f"client closed the connection in the middle of a frame "
                                  f"({have} of {length} bytes)", logging.INFO)
                try:
                    got = self.sock.recv_into(view[have:], 0, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    if not self._wait_readable():
                        raise _Closed("gateway closing the connection") from None
                    continue
                if got == 0:
                    self._eof = True
                have += got
            self._last_active = time.monotonic()
        return frame

    # -- forwarding ----------------------------------------------------------------------------

    def _forward_buffered(self):
        """Forward every whole frame in the buffer, up to ``queued.max.requests`` waiting
        for answers; a frame larger than the buffer is read whole first. The broker is
        woken (if it is parked) once they are all in its ring: its turn takes them together,
        and the post, which may hand this core to the broker, comes once per round."""
        try:
            self._forward_whole_frames()
        finally:
            release_posts()

    def _forward_whole_frames(self):
        buffer, view = self._buffer, self._view
        while len(self._waiting) < self._queued_max and not self.closed:
            start = self._start
            have = self._end - start
            if have < d.SIZE_PREFIX_LENGTH:
                break
            (size,) = d.INT32.unpack_from(buffer, start)
            if size < _MIN_SIZE or size > self._max_request:
                self.gateway.stats.count("invalid-frames")
                raise _Closed(f"request size {size} is outside {_MIN_SIZE}.."
                              f"{self._max_request} (socket.request.max.bytes): not a Kafka "
                              f"request", logging.WARNING)
            length = d.SIZE_PREFIX_LENGTH + size
            if length > self._max_frame:  # before allocating it
                raise _Closed(f"request of {length} bytes exceeds the "
                              f"{self._max_frame} bytes a ring frame carries "
                              f"(ringlog.ring.bytes {self.gateway.config.ring_bytes})",
                              logging.WARNING)
            if length > READ_BUFFER:
                self._forward(self._fill_frame(length))
                continue
            if have < length:
                if start + length > READ_BUFFER:  # the rest would not fit behind it
                    held = bytes(view[start:self._end])
                    buffer[:have] = held
                    self._start, self._end = 0, have
                break
            self._forward(view[start:start + length])
            self._start += length
            if self._start == self._end:
                self._start = self._end = 0

    def _forward(self, frame):
        """Send ``frame`` to the broker (or answer it here) and note what answers it."""
        api_key, api_version, correlation_id = wire.peek_request(frame)
        gateway = self.gateway
        gateway.stats.request(api_key, len(frame))
        if api_key in wire.LOCAL_VERSIONS:
            try:
                answer = wire.local_response(frame, api_key, api_version, correlation_id,
                                             gateway.host, gateway.port_for, gateway.image())
            except InvalidRequestError as exc:
                gateway.stats.count("invalid-frames")
                raise _Closed(str(exc), logging.WARNING) from None
            self._waiting.append(_Pending(correlation_id, api_key, api_version, answer))
            return
        ring = self._ring_connection()
        if not ring.send(frame, timeout=0):
            self._send_when_room(ring, frame)
        if wire.expects_response(frame, api_key):
            self._waiting.append(_Pending(correlation_id, api_key, api_version, None))

    def _send_when_room(self, ring, frame):
        """The request ring is full: answer what waits (the broker takes no more requests
        while its answers have no room), else wait for room."""
        release_posts()
        while True:
            if self._waiting:
                self._answer_some()
                if ring.send(frame, timeout=0):
                    return
            elif ring.send(frame, timeout=WAIT_SLICE):
                return
            if self.closed:
                raise _Closed("gateway closing the connection")

    def _ring_connection(self):
        if self._ring is None:
            config = self.gateway.config
            try:
                self._ring = connect(self.gateway.namespace, self.broker_id,
                                     instance=self.gateway.instance,
                                     timeout=CONNECT_TIMEOUT, capacity=config.ring_bytes,
                                     policy=config.wait_policy)
            except (ConnectionError, TimeoutError) as exc:
                raise _Closed(f"broker {self.broker_id} is not reachable: {exc}",
                              logging.INFO) from None
            if self.closed:  # close() ran before the ring existed: nobody interrupts it
                self._ring.interrupt()
        return self._ring

    # -- answering -----------------------------------------------------------------------------

    def _answer_some(self):
        """Write the first waiting request's answer (waiting for it), and the answers after
        it already there (up to MAX_BATCH), with one sendmsg."""
        frames_out, apis, from_ring = [], [], False
        try:
            for pending in self._waiting:
                if pending.local is not None:
                    frame = pending.local
                else:
                    frame = self._relay(pending, wait=not frames_out)
                    if frame is None:  # not in yet, or closing while waiting
                        break
                    from_ring = True
                frames_out.append(frame)
                apis.append(pending.api_key)
                if len(frames_out) == MAX_BATCH:
                    break
            if frames_out:
                self._send(apis, frames_out)
                popleft = self._waiting.popleft
                for _ in frames_out:
                    popleft()
        finally:
            del frames_out
            if from_ring:
                self._ring.release()

    def _relay(self, pending, wait):
        """The broker's answer to ``pending`` from the response ring (rewritten if its API
        carries addresses), waiting for it when ``wait``; None if not there (``wait``
        false) or once the connection is closing."""
        ring = self._ring
        if wait:
            frame = None
            while frame is None:
                frame = ring.recv(timeout=WAIT_SLICE, stop=self._stop)
                if frame is None and self.closed:
                    return None
        else:
            frame = ring.recv(timeout=0)
            if frame is None:
                return None
        answered = frames.response_correlation_id(frame)
        if answered != pending.correlation_id:
            raise KafkaProtocolError(
                f"broker {self.broker_id} answered correlation id {answered}, expected "
                f"{pending.correlation_id}")
        if pending.api_key in wire.REWRITTEN:
            gateway = self.gateway
            frame = wire.rewrite_response(frame, pending.api_key, pending.api_version,
                                          gateway.host, gateway.port_for)
        return frame

    def _send(self, apis, frames_out):
        """Write ``frames_out`` (answers to requests of ``apis``) to the socket, in order."""
        if len(frames_out) == 1:
            self.sock.sendall(frames_out[0])
        else:
            views = [memoryview(frame).cast("B") for frame in frames_out]
            first = 0
            while first < len(views):
                sent = self.sock.sendmsg(views[first:])
                while first < len(views) and sent >= views[first].nbytes:
                    sent -= views[first].nbytes
                    first += 1
                if sent:
                    views[first] = views[first][sent:]
        self._last_active = time.monotonic()
        stats = self.gateway.stats
        for api_key, frame in zip(apis, frames_out):
            stats.response(api_key, len(frame))
