"""One Kafka client's TCP connection bridged to one ring connection of one broker.

A ``Bridge`` owns a client socket accepted on the listener of broker B and, from the first
request that goes to B, one ``shm_ring`` connection to B. Two threads move the frames:

- the **request thread** reads the socket into a buffer of its own (``READ_BUFFER``
  bytes, reused: a pipelining client's requests come in with one ``recv_into``; a frame
  larger than the buffer gets one of its own) and writes each size-prefixed frame into the
  request ring as it arrived; a request the gateway serves itself (``wire.LOCAL_VERSIONS``)
  is answered here instead;
- the **response thread** takes the requests in order from ``pending`` and writes their
  answers to the socket: the broker's frame straight from the response ring (no copy; only
  ``wire.REWRITTEN`` APIs are decoded and re-encoded with the gateway's addresses), or the
  gateway's own answer, in request order as Kafka promises. Answers already there when
  one is written go with it: up to ``MAX_BATCH`` in one ``sendmsg``, their ring frames
  released together after it.

Kafka's network layer, per connection: at most ``queued.max.requests`` requests wait for
their answers (``outstanding``: the request thread stops reading the socket while it is
at the limit, parked on ``_room`` until the response thread writes an answer) and the
request ring bounds the bytes in flight, so a client that never reads its
responses stalls only itself (its response thread blocks in ``sendall``, its rings fill, the
broker defers that connection only). A size prefix that is negative, shorter than a request
header or over ``socket.request.max.bytes``, and a frame the ring cannot carry, close this
connection only, with a warning naming the client's address; so does a broker that closes
the ring connection (it does so for a request that does not decode). A connection with no
bytes either way and no request in flight for ``connections.max.idle.ms`` is closed.

Threads: the two threads above; ``close()`` may be called from any thread (the server's
shutdown). The request thread closes the ring and the socket once the response thread
has ended.
"""
from __future__ import annotations

import logging
import mmap
import queue
import select
import socket
import threading
import time

import posix_ipc

from cluster.errors import InvalidRequestError, KafkaProtocolError
from cluster.gateway import wire
from cluster.protocol import frame_descriptor as d, frames
from shm_ring import PeerClosedError, PeerDiedError, connect, max_frame_length

log = logging.getLogger(__name__)

#: Seconds between two looks at ``closed`` and the idle clock while a thread waits.
WAIT_SLICE = 0.5

#: Seconds to wait for a broker to accept the ring connection.
CONNECT_TIMEOUT = 5.0

#: Bytes of a connection's read buffer: requests up to this size are read in place (its
#: pages are taken as bytes arrive: a thousand idle connections do not hold it all).
READ_BUFFER = 256 * 1024

#: Answers written with one sendmsg at most (well under the kernel's IOV_MAX).
MAX_BATCH = 64


class _Pending:
    """A request whose answer the response thread writes next."""

    __slots__ = ("correlation_id", "api_key", "api_version", "local")

    def __init__(self, correlation_id, api_key, api_version, local):
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.local = local  # the gateway's own response frame, or None: the broker answers


class _Closed(Exception):
    """The connection is done; the message says why (logged by the request thread)."""

    def __init__(self, message, level=logging.DEBUG):
        super().__init__(message)
        self.level = level


class Bridge:
    """A client connection (see the module doc). ``gateway`` is the owning ``Gateway``:
    its ``config``, ``namespace``, ``instance``, ``host``, ``port_for``, ``image()``,
    ``stats`` and
    ``forget(bridge)``."""

    def __init__(self, gateway, sock, address, broker_id):
        self.gateway = gateway
        self.sock = sock
        self.peer = f"{address[0]}:{address[1]}"
        self.broker_id = broker_id
        config = gateway.config
        self._max_request = config.socket_request_max_bytes
        self._idle = config.connections_max_idle_ms / 1000
        self._pending = queue.SimpleQueue()
        self._queued_max = config.queued_max_requests
        self._room = threading.Event()  # set by the response thread for a parked request
        self._full = False  # the request thread is (about to be) parked on _room
        self._ring = None
        self._max_frame = max_frame_length(config.ring_bytes)
        # the request thread's, reused; anonymous memory, so a connection of small
        # requests (read from the front each time) holds a page or two of it, not all
        self._buffer = mmap.mmap(-1, READ_BUFFER)
        self._view = memoryview(self._buffer)
        self._start = self._end = 0  # the bytes read and not yet forwarded: [start, end)
        self._held = None  # a _Pending taken from the queue whose answer is not in yet
        self._requested = 0  # requests queued for an answer (the request thread's count)
        self._answered = 0  # answers written (the response thread's count)
        self.closed = False
        self._last_active = time.monotonic()
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
        self._responses = threading.Thread(target=self._response_loop, daemon=True,
                                           name=f"gateway-rsp-{self.peer}")
        self._requests = threading.Thread(target=self._request_loop, daemon=True,
                                          name=f"gateway-req-{self.peer}")

    def start(self):
        self._responses.start()
        self._requests.start()

    def close(self):
        """Ask both threads to stop (any thread; idempotent)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._pending.put(None)
        self._room.set()
        ring = self._ring
        if ring is not None:
            ring.interrupt()

    @property
    def outstanding(self):
        """Requests read and not answered yet: this connection's queue depth."""
        return self._requested - self._answered

    def join(self, timeout=None):
        self._requests.join(timeout)

    # -- request thread ---------------------------------------------------------------------

    def _request_loop(self):
        reason = _Closed("client closed the connection")
        try:
            while not self.closed:
                frame = self._read_frame()
                if frame is None:
                    break
                self._forward(frame)
        except _Closed as exc:
            reason = exc
        except OSError as exc:
            reason = _Closed(f"socket error: {exc}")
        except (PeerDiedError, PeerClosedError) as exc:
            reason = _Closed(f"broker {self.broker_id} went away: {exc}", logging.INFO)
        except Exception as exc:  # a bug must cost this connection only, and say so
            log.exception("closing connection from %s to broker %d", self.peer,
                          self.broker_id)
            reason, self.closed = _Closed(str(exc)), True
        finally:
            if not self.closed:
                log.log(reason.level, "closing connection from %s to broker %d: %s",
                        self.peer, self.broker_id, reason)
            self.close()
            self._responses.join()
            self._close_ring()
            self.sock.close()
            self.gateway.forget(self)

    def _close_ring(self):
        """Close the ring connection; the broker may have closed it meanwhile (then the
        response thread's error already unlinked its objects)."""
        if self._ring is None:
            return
        try:
            self._ring.close()
        except (OSError, ValueError, posix_ipc.Error) as exc:
            log.debug("ring connection of %s already gone: %s", self.peer, exc)

    def _wait_readable(self):
        """Block until the socket has bytes (True) or the connection is closing (False);
        _Closed once it has been idle for ``connections.max.idle.ms``."""
        while not self.closed:
            if self._poll.poll(WAIT_SLICE * 1000):
                return True
            if (self.outstanding == 0
                    and time.monotonic() - self._last_active >= self._idle):
                raise _Closed(f"idle for more than connections.max.idle.ms "
                              f"({self._idle * 1000:.0f} ms)", logging.INFO)
        return False

    def _recv(self, view):
        """Bytes read into ``view`` (at least one), or 0 once the client closed (or the
        connection is closing). Tries the socket first, polls only when it has nothing."""
        while True:
            try:
                count = self.sock.recv_into(view, 0, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                if not self._wait_readable():
                    return 0
                continue
            if count:
                self._last_active = time.monotonic()
            return count

    def _fill(self, count):
        """Read until the buffer holds ``count`` bytes from ``_start`` (compacting them to
        its front when they would not fit behind it). False if the client closed before
        the first of them; _Closed if it closed after."""
        while self._end - self._start < count:
            if self._start + count > READ_BUFFER:
                held = bytes(self._view[self._start:self._end])
                self._buffer[:len(held)] = held
                self._start, self._end = 0, len(held)
            got = self._recv(self._view[self._end:])
            if got == 0:
                if self._end > self._start:
                    raise _Closed(f"client closed the connection in the middle of a frame "
                                  f"({self._end - self._start} of {count} bytes)",
                                  logging.INFO)
                return False
            self._end += got
        return True

    def _read_frame(self):
        """The next whole request frame, size prefix included: a view of the read buffer
        (valid until the next call), or a bytearray of its own if larger; None once the
        client closed between frames."""
        if not self._fill(d.SIZE_PREFIX_LENGTH):
            return None
        (size,) = d.INT32.unpack_from(self._buffer, self._start)
        minimum = d.MIN_REQUEST_FRAME_LENGTH - d.SIZE_PREFIX_LENGTH
        if size < minimum or size > self._max_request:
            self.gateway.stats.count("invalid-frames")
            raise _Closed(f"request size {size} is outside {minimum}.."
                          f"{self._max_request} (socket.request.max.bytes): not a Kafka "
                          f"request", logging.WARNING)
        length = d.SIZE_PREFIX_LENGTH + size
        if length > self._max_frame:  # before allocating it
            raise _Closed(f"request of {length} bytes exceeds the "
                          f"{self._max_frame} bytes a ring frame carries "
                          f"(ringlog.ring.bytes {self.gateway.config.ring_bytes})",
                          logging.WARNING)
        if length <= READ_BUFFER:
            if not self._fill(length):
                raise _Closed("client closed the connection in the middle of a frame",
                              logging.INFO)
            frame = self._view[self._start:self._start + length]
            self._start += length
            if self._start == self._end:
                self._start = self._end = 0
            return frame
        frame = bytearray(length)  # larger than the buffer: a frame of its own
        have = self._end - self._start
        frame[:have] = self._view[self._start:self._end]
        self._start = self._end = 0
        with memoryview(frame) as view:
            while have < length:
                got = self._recv(view[have:])
                if got == 0:
                    raise _Closed(f"client closed the connection in the middle of a frame "
                                  f"({have} of {length} bytes)", logging.INFO)
                have += got
        return frame

    def _forward(self, frame):
        api_key, api_version, correlation_id = wire.peek_request(frame)
        self.gateway.stats.request(api_key, len(frame))
        if api_key in wire.LOCAL_VERSIONS:
            gateway = self.gateway
            try:
                answer = wire.local_response(frame, api_key, api_version, correlation_id,
                                             gateway.host, gateway.port_for, gateway.image())
            except InvalidRequestError as exc:
                self.gateway.stats.count("invalid-frames")
                raise _Closed(str(exc), logging.WARNING) from None
            self._enqueue(_Pending(correlation_id, api_key, api_version, answer))
            return
        ring = self._ring_connection()
        if wire.expects_response(frame, api_key):
            self._enqueue(_Pending(correlation_id, api_key, api_version, None))
        while not ring.send(frame, timeout=WAIT_SLICE):
            if self.closed:
                raise _Closed("gateway closing the connection")

    def _enqueue(self, pending):
        while self._requested - self._answered >= self._queued_max:
            # at queued.max.requests: park until an answer is written. The flag is up
            # before the count is looked at again, so an answer written in between either
            # shows in the count or sets _room (the response thread looks at the flag
            # after counting).
            self._room.clear()
            self._full = True
            if self._requested - self._answered < self._queued_max:
                break
            self._room.wait(WAIT_SLICE)
            if self.closed:
                raise _Closed("gateway closing the connection")
        self._full = False
        self._requested += 1
        self._pending.put(pending)

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

    # -- response thread ---------------------------------------------------------------------

    def _response_loop(self):
        try:
            while self._answer_some():
                pass
        except OSError:
            pass  # the client went away: the request thread sees it too
        except (PeerDiedError, PeerClosedError) as exc:
            log.info("closing connection from %s to broker %d: the broker closed its ring "
                     "connection (%s); a request that does not decode makes it do so",
                     self.peer, self.broker_id, exc)
        except KafkaProtocolError as exc:
            log.warning("closing connection from %s to broker %d: %s", self.peer,
                        self.broker_id, exc)
        except Exception:  # a bug must cost this connection only, and say so
            log.exception("closing connection from %s to broker %d", self.peer,
                          self.broker_id)
        finally:
            self.close()

    def _answer_some(self):
        """Write the next answer, and those after it that are already there (up to
        MAX_BATCH), with one sendmsg; False once the connection is closing."""
        pending, self._held = self._held, None
        if pending is None:
            pending = self._pending.get()
        frames_out, apis, from_ring, going = [], [], False, True
        while True:
            if pending is None or self.closed:
                going = False
                break
            if pending.local is not None:
                frame = pending.local
            else:
                frame = self._relay(pending, wait=not frames_out)
                if frame is None:
                    if frames_out:  # not in yet: the next round starts with it
                        self._held = pending
                    else:
                        going = False  # closing while waiting
                    break
                from_ring = True
            frames_out.append(frame)
            apis.append(pending.api_key)
            if len(frames_out) == MAX_BATCH:
                break
            try:
                pending = self._pending.get_nowait()
            except queue.Empty:
                break
        try:
            if frames_out:
                self._send(apis, frames_out)
                self._answered += len(frames_out)
                if self._full:
                    self._room.set()
        finally:
            del frames_out
            if from_ring:
                self._ring.release()
        return going

    def _relay(self, pending, wait):
        """The broker's answer to ``pending`` from the response ring (rewritten if its API
        carries addresses), waiting for it when ``wait``; None if not there (``wait``
        false) or once the connection is closing."""
        ring = self._ring
        if wait:
            frame = None
            while frame is None:
                frame = ring.recv(timeout=WAIT_SLICE, stop=lambda: self.closed)
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
