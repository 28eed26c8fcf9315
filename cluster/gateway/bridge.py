"""One Kafka client's TCP connection bridged to one ring connection of one broker.

A ``Bridge`` owns a client socket accepted on the listener of broker B and, from the first
request that goes to B, one ``shm_ring`` connection to B. Two threads move the frames:

- the **request thread** reads size-prefixed frames from the socket and writes each one
  into the request ring as it arrived; a request the gateway serves itself
  (``wire.LOCAL_VERSIONS``) is answered here instead;
- the **response thread** takes the requests in order from ``pending`` and writes their
  answers to the socket: the broker's frame straight from the response ring (no copy; only
  ``wire.REWRITTEN`` APIs are decoded and re-encoded with the gateway's addresses), or the
  gateway's own answer, in request order as Kafka promises.

Kafka's network layer, per connection: at most ``queued.max.requests`` requests wait for
their answers (``_slots``: the request thread stops reading the socket while they are all
taken) and the request ring bounds the bytes in flight, so a client that never reads its
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
        self._slots = threading.Semaphore(config.queued_max_requests)  # one per request out
        self._ring = None
        self._max_frame = max_frame_length(config.ring_bytes)
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

    def _recv_into(self, view):
        """Fill ``view`` from the socket; False if the client closed before the first
        byte (or the connection is closing), _Closed if it closed in the middle."""
        got = 0
        while got < len(view):
            if not self._wait_readable():
                return False
            count = self.sock.recv_into(view[got:])
            if count == 0:
                if got:
                    raise _Closed(f"client closed the connection in the middle of a frame "
                                  f"({got} of {len(view)} bytes)", logging.INFO)
                return False
            got += count
            self._last_active = time.monotonic()
        return True

    def _read_frame(self):
        """The next whole request frame (a bytearray, size prefix included), or None."""
        prefix = bytearray(d.SIZE_PREFIX_LENGTH)
        if not self._recv_into(memoryview(prefix)):
            return None
        (size,) = d.INT32.unpack_from(prefix, 0)
        minimum = d.MIN_REQUEST_FRAME_LENGTH - d.SIZE_PREFIX_LENGTH
        if size < minimum or size > self._max_request:
            self.gateway.stats.count("invalid-frames")
            raise _Closed(f"request size {size} is outside {minimum}.."
                          f"{self._max_request} (socket.request.max.bytes): not a Kafka "
                          f"request", logging.WARNING)
        if d.SIZE_PREFIX_LENGTH + size > self._max_frame:  # before allocating it
            raise _Closed(f"request of {d.SIZE_PREFIX_LENGTH + size} bytes exceeds the "
                          f"{self._max_frame} bytes a ring frame carries "
                          f"(ringlog.ring.bytes {self.gateway.config.ring_bytes})",
                          logging.WARNING)
        frame = bytearray(d.SIZE_PREFIX_LENGTH + size)
        frame[:d.SIZE_PREFIX_LENGTH] = prefix
        with memoryview(frame) as view:
            if not self._recv_into(view[d.SIZE_PREFIX_LENGTH:]):
                raise _Closed("client closed the connection in the middle of a frame",
                              logging.INFO)
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
        while not self._slots.acquire(timeout=WAIT_SLICE):
            if self.closed:
                raise _Closed("gateway closing the connection")
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
            while True:
                pending = self._pending.get()
                if pending is None or self.closed:
                    return
                if pending.local is not None:
                    self._send(pending.api_key, pending.local)
                else:
                    self._relay(pending)
                self._answered += 1
                self._slots.release()
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

    def _relay(self, pending):
        ring = self._ring
        frame = None
        while frame is None:
            frame = ring.recv(timeout=WAIT_SLICE, stop=lambda: self.closed)
            if frame is None and self.closed:
                return
        try:
            answered = frames.response_correlation_id(frame)
            if answered != pending.correlation_id:
                raise KafkaProtocolError(
                    f"broker {self.broker_id} answered correlation id {answered}, expected "
                    f"{pending.correlation_id}")
            if pending.api_key in wire.REWRITTEN:
                gateway = self.gateway
                frame = wire.rewrite_response(frame, pending.api_key, pending.api_version,
                                              gateway.host, gateway.port_for)
            self._send(pending.api_key, frame)
        finally:
            del frame
            ring.release()

    def _send(self, api_key, frame):
        self.sock.sendall(frame)
        self._last_active = time.monotonic()
        self.gateway.stats.response(api_key, len(frame))
