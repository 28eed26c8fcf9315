"""Client networking shared by the producer, the consumer and the admin client.

``KafkaClient`` plays kafka-python's ``KafkaClient`` on the rings:

* **Bootstrap.** ``bootstrap_servers`` names the cluster's data directory D: the cluster id
  comes from ``D/meta.properties``, the brokers to try first from the metadata page (the
  live ones in the controller's newest image). After that, Metadata responses say which
  brokers exist and lead which partitions (``cluster``, a ``ClusterMetadata``). When no
  broker can be asked and no broker process of D holds its lock, the cluster is stopped:
  NoBrokersAvailable says so at once, with the ``ringlog cluster start`` command to run.
* **Connections.** One ``shm_ring`` connection per broker, opened when first needed, with an
  ApiVersions exchange; a request of a version the broker does not serve fails with
  IncompatibleBrokerVersion (this client speaks ``API_VERSIONS``). A broker the metadata
  page does not list as alive is not tried (the page is mapped afresh before saying no: a
  cluster started again has a new one); a failed attempt waits ``reconnect_backoff_ms``,
  doubling up to ``reconnect_backoff_max_ms``, with 20 % jitter — and every new metadata
  version clears the waits (a restarted broker is tried as soon as the controller
  publishes it again).
* **Requests.** ``send(node_id, request)`` writes the request frame with the next
  correlation id — a Produce request is encoded straight into a claimed request-ring slot,
  its batches copied once — and returns a ``Future`` of the decoded response body. Frames
  of any length go both ways: one longer than a ring's largest frame travels as fragments
  (``shm_ring``), so neither a large request nor a large response (an all-topics Metadata
  of many partitions, a fetch of a large batch) depends on the ring's size. Responses
  come back in request order (the broker answers one connection in order); each is matched
  against the oldest request in flight by correlation id, a mismatch is a protocol error.
  A request not answered within ``request_timeout_ms`` fails with RequestTimedOutError and
  the connection is closed (its later answers could not be matched any more), as in
  kafka-python. A request without a response (Produce with acks=0) completes with None as
  soon as it is written.
* **Failures.** A broker that died or closed (``PeerDiedError`` / ``PeerClosedError`` from the
  rings) fails every request in flight on that connection with ``KafkaConnectionError``
  (retriable, invalid metadata; one WARNING in Kafka's words, "Connection to node 0 was lost:
  broker 0 (pid 123) died", the rings' names at DEBUG), drops the connection and asks for a
  metadata refresh — as
  does every failed connection attempt (Kafka's NetworkClient), so a client whose cache
  still names a dead leader keeps asking until the controller has elected another.
* **Metadata.** ``poll()`` sends a Metadata request (to the least loaded broker) when an
  update was requested — by a caller, by an invalid-metadata error, because the cache is
  older than ``metadata_max_age_ms``, or (``watch_publications``) because the controller
  published a new image on the metadata page while requests are in flight — at most once
  per ``retry_backoff_ms``.
  The last goes beyond Kafka: a leader that hangs (SIGSTOP, swapped out) answers nothing
  and closes nothing, so a Kafka client learns of its successor only when its request times
  out; here the controller's publication of the new leader (one 8-byte load of the page's
  sequence per poll) brings the new metadata at once, and the owner may act on it (the
  producer's sender moves its in-flight idempotent batches; ``watch_publications``). The
  least loaded broker passes over a busy connection to a broker the controller fenced, so
  the refresh does not queue behind a hung broker's requests.

Thread safety: one thread owns a KafkaClient and makes every call (the producer's sender
thread; the consumer's or the admin client's calling thread), as kafka-python's client
and the rings require. Other threads talk to it only through ``cluster`` (the metadata
cache) and whatever wake-up their owner provides.
"""
from __future__ import annotations

import collections
import importlib.metadata
import logging
import os
import shlex
import threading
import time

from cluster.client.future import Future
from cluster.client.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from cluster.client.reconnect_backoff import ReconnectBackoff
from cluster.errors import (
    CorrelationIdError,
    IncompatibleBrokerVersion,
    KafkaConnectionError,
    KafkaProtocolError,
    KafkaTimeoutError,
    NoBrokersAvailable,
    RequestTimedOutError,
    for_code,
)
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import broker_is_alive
from cluster.metadata.page import MetadataPage
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from shm_ring import PeerClosedError, PeerDiedError, connect, ring_descriptor as rd
from shm_ring.connection import DEFAULT_CAPACITY
from shm_ring.liveness import process_start_time

log = logging.getLogger(__name__)

#: The version of each API this client sends: the highest ringlog serves.
API_VERSIONS = {key: high for key, (_, high) in protocol.SUPPORTED_VERSIONS.items()}
_PRODUCE_VERSION = API_VERSIONS[ApiKey.PRODUCE]

#: What this client names itself in ApiVersions v3 (KIP-511; Kafka's Java client sends
#: "apache-kafka-java" and its version): the package's name and version.
CLIENT_SOFTWARE_NAME = "ringlog-python"
CLIENT_SOFTWARE_VERSION = importlib.metadata.version("ringlog")

#: Longest wait for a broker to accept a connection, in seconds. It blocks the owning
#: thread (a producer's sender: every broker's traffic), and a broker killed a moment ago may
#: still be alive on the page, so it is short; a slow accept is simply tried again.
CONNECT_TIMEOUT = 0.5

#: While requests are in flight on several connections, each wait on one of them lasts at
#: most this long before the others are looked at (the rings have no select()).
MULTI_WAIT_SLICE = 0.001

#: Longest a poll parks on one broker's response while the owner's ``Wakeup`` is not set.
#: New work arriving meanwhile does not interrupt the wait (``Wakeup``), so this bounds how
#: long a hung broker (stopped, swapped out) delays batches bound for the other brokers.
PARKED_WAIT_SLICE = 0.01


def ring_capacity_for(frame_length):
    """The smallest ring capacity (a power of two, at least shm_ring's default) whose largest
    frame holds ``frame_length`` bytes."""
    capacity = DEFAULT_CAPACITY
    while rd.max_frame_length(capacity) < frame_length:
        capacity <<= 1
    return capacity


def locate_cluster(bootstrap_servers):
    """``(data_dir, cluster_id)`` of the first of ``bootstrap_servers`` that is a ringlog
    data directory; NoBrokersAvailable naming them all otherwise."""
    for server in bootstrap_servers:
        cluster_id = dd.read_cluster_id(server) if os.path.isdir(server) else None
        if cluster_id is not None:
            return os.path.abspath(server), cluster_id
    raise NoBrokersAvailable(
        f"bootstrap_servers {list(bootstrap_servers)!r}: none is a ringlog data directory "
        f"with a {dd.META_PROPERTIES} (start a cluster there first)")


def not_running_message(data_dir, cluster_id):
    """What to tell the user of a data directory none of whose brokers runs: the command
    that starts it again, with as many brokers as it has ``broker-<id>`` directories."""
    brokers = dd.broker_ids(data_dir)
    count = f" --brokers {max(brokers) + 1}" if brokers and max(brokers) > 0 else ""
    return (f"cluster {cluster_id} in {data_dir} is not running (no broker process is "
            f"alive); start it with: ringlog cluster start --data-dir {shlex.quote(data_dir)}"
            f"{count} --detach")


class Wakeup:
    """The owner's "new work" signal for ``KafkaClient.poll(timeout, wakeup)``.

    ``set()``: there is new work — it ends a wait while nothing is in flight; while
    requests are in flight the poll still waits up to ``MULTI_WAIT_SLICE`` for the first
    response (new batches then go out together in the next request: interrupting the
    wait to send each batch at once cost the producer more CPU per record in one A/B run
    and no difference in another, with no gain in latency; figures: perf/README.md,
    "Client poll batching"). A poll with nothing new parks until the response comes, in
    slices of ``PARKED_WAIT_SLICE`` (so work for another broker is not held behind a hung one).
    ``set(urgent=True)``: ends any wait at once — the poll parks on the response ring and
    this wakes its reader (``ClientConnection.interrupt``); for close and similar.

    Owner: the thread that owns the KafkaClient calls ``clear()`` and passes it to
    ``poll()``; ``set()`` and ``is_set()`` may be called from any thread. Why no wake-up is
    lost: ``set()`` raises its flags before it looks at ``waiting_on``, and the poll names
    the connection in ``waiting_on`` before its reader parks and re-checks ``urgent``; the
    GIL orders the two threads' steps, so either the reader sees the flag or ``set()`` sees
    the connection (a post that comes too late costs the next wait one more loop).
    """

    __slots__ = ("_flag", "urgent", "_gate", "waiting_on")

    def __init__(self):
        self._flag = False
        self.urgent = False
        # A bare lock as a binary semaphore, held while not set: waking a thread blocked on
        # it costs one futex call, where threading.Event (a Condition, a fresh lock per
        # wait) costs more CPU per wake-up (figures: perf/README.md, "Client wake-up gate").
        self._gate = threading.Lock()
        self._gate.acquire()
        self.waiting_on = None  # the ClientConnection the owner is parked on, if any

    def set(self, urgent=False):
        if urgent:
            self.urgent = True
            connection = self.waiting_on
            if connection is not None:
                connection.interrupt()
        if not self._flag:  # already set: the owner has not cleared it since, so it looks
            self._flag = True
            try:
                self._gate.release()
            except RuntimeError:
                pass  # another thread's set() opened it first

    def is_urgent(self):
        return self.urgent

    def is_set(self):
        return self._flag

    def clear(self):
        self._flag = False
        self.urgent = False
        self._gate.acquire(False)  # closed again (it stays open while set)

    def wait(self, timeout):
        """Block until set, at most ``timeout`` seconds (the owner, nothing in flight)."""
        if self._flag:
            return  # (a set() racing the owner's clear() may leave the gate closed)
        if self._gate.acquire(True, max(0.0, timeout)):
            self._gate.release()  # still set until the owner clears it


class _InFlight:
    """A request written and not yet answered."""

    __slots__ = ("correlation_id", "api_key", "api_version", "future", "deadline")

    def __init__(self, correlation_id, api_key, api_version, future, deadline):
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.future = future
        self.deadline = deadline


_NOT_SERVED = (None, None)


class _KioFrame:
    """A kio request object as ``KafkaClient._send`` writes frames (ProduceFrame's
    interface: ``write_into`` and ``encode``; ``body`` unused)."""

    __slots__ = ("request", "client_id")

    def __init__(self, request, client_id):
        self.request = request
        self.client_id = client_id

    def write_into(self, buf, size, correlation_id, body):
        protocol.encode_request_into(buf, 0, self.request, correlation_id, self.client_id)

    def encode(self, size, correlation_id, body):
        return protocol.encode_request(self.request, correlation_id, self.client_id)


class _CallerWritten:
    """Frames their caller writes (``send_frame``), as ``KafkaClient._send`` writes frames:
    ``body`` is the caller's ``write_into(buf, correlation_id)``. No instance: nothing is
    made per request."""

    @staticmethod
    def write_into(buf, size, correlation_id, write_into):
        write_into(buf, correlation_id)

    @staticmethod
    def encode(size, correlation_id, write_into):
        data = bytearray(size)
        with memoryview(data) as view:
            write_into(view, correlation_id)
        return data


class _Node:
    """What the client knows of one broker: its connection, requests in flight, backoff."""

    __slots__ = ("node_id", "connection", "versions", "in_flight", "last_error")

    def __init__(self, node_id):
        self.node_id = node_id
        self.connection = None
        self.versions = {}       # api key -> (min, max) the broker serves, from ApiVersions
        self.in_flight = collections.deque()
        self.last_error = None   # why the last attempt or connection failed



def _connection_lost(node_id, exc):
    """The KafkaConnectionError of a connection whose broker went away (``exc``: PeerDiedError
    or PeerClosedError), in Kafka's words, logged once as a WARNING: "Connection to node 0 was
    lost: broker 0 (pid 123) died". The rings and shared-memory names are internals: logged at
    DEBUG only."""
    log.debug("connection to broker %d ended: %s", node_id, exc)
    how = (f"broker {node_id} (pid {exc.pid}) died" if isinstance(exc, PeerDiedError) else
           f"broker {node_id} closed it (it is stopping)")
    error = KafkaConnectionError(f"Connection to node {node_id} was lost: {how}")
    log.warning("%s", error)
    return error

class KafkaClient:
    """Connections to the brokers of one cluster, with the metadata cache (module doc).

    ``config`` is a ClientConfig (ProducerConfig, ConsumerConfig, AdminClientConfig);
    ``client_id`` overrides its ``client_id`` (the producer numbers its own).
    ``ring_capacity`` sizes both rings of each connection (see ``ring_capacity_for``).
    ``clock`` is monotonic seconds, for deadlines and backoff; ``policy`` (a WaitPolicy,
    default the config's) is how the rings wait. Metadata requests ask the
    brokers to create unknown topics when ``allow_auto_topic_creation`` (default: the
    config's ``allow_auto_create_topics``, False if it has none).
    ``watch_publications``: refresh the metadata when the controller publishes while
    requests are in flight (module doc, "Metadata"; the producer, which acts on it).
    """

    def __init__(self, config, *, client_id=None, ring_capacity=DEFAULT_CAPACITY,
                 clock=time.monotonic, policy=None, allow_auto_topic_creation=None,
                 watch_publications=False):
        self.config = config
        self.client_id = config["client_id"] if client_id is None else client_id
        self.data_dir, self.cluster_id = locate_cluster(config["bootstrap_servers"])
        #: the shared-memory namespace of the cluster's current start (shm_ring.naming):
        #: read from D, again whenever the page is mapped afresh (a restart makes a new one)
        self.namespace = dd.read_shm_namespace(self.data_dir, self.cluster_id)
        self._instance = dd.instance_of(self.data_dir)  # D's brokers only (connect checks)
        self.cluster = ClusterMetadata(self.cluster_id)
        self._clock = clock
        self._policy = config.wait_policy(clock) if policy is None else policy
        self._ring_capacity = ring_capacity
        self._max_frame_length = rd.max_frame_length(ring_capacity)
        self._request_timeout = config["request_timeout_ms"] / 1000
        self._retry_backoff = config["retry_backoff_ms"] / 1000
        self._metadata_max_age = config["metadata_max_age_ms"] / 1000
        self._reconnect = ReconnectBackoff(config["reconnect_backoff_ms"] / 1000,
                                           config["reconnect_backoff_max_ms"] / 1000, clock)
        self._auto_create = (config.get("allow_auto_create_topics", False)
                             if allow_auto_topic_creation is None else allow_auto_topic_creation)
        self._nodes = {}
        self._correlation_id = 0
        self._page = None
        self._page_image = None
        self._metadata_in_flight = False
        self._metadata_node = None  # the broker the Metadata request in flight went to
        self._metadata_attempt = 0  # numbers them: only the latest one's answer counts
        self._metadata_next_attempt = 0.0
        self._watch_publications = watch_publications
        self._page_sequence = 0  # the page's sequence when last looked at (module doc)
        self._closed = False

    # -- bootstrap and liveness -----------------------------------------------------------------

    def _image(self, reopen=False):
        """The controller's newest image from the metadata page, or None if there is none
        (the cluster is not running). ``reopen`` maps the page afresh: a cluster stopped and
        started again has a new page under the same name."""
        if reopen and self._page is not None:
            self._page.close()
            self._page = self._page_image = None
        if self._page is None:
            self.namespace = dd.read_shm_namespace(self.data_dir, self.cluster_id)
            try:
                self._page = MetadataPage.open(self.namespace)
            except FileNotFoundError:
                return None
            self._page_sequence = self._page.version
        try:
            self._page_image = self._page.read()
        except TimeoutError:
            pass  # a writer died mid-publish: keep the last image
        return self._page_image

    def bootstrap_brokers(self):
        """Ids of the brokers to try when no Metadata response said better, or none of the
        brokers it named can be reached: the live ones on the metadata page."""
        image = self._image(reopen=True)
        return [] if image is None else image.live_brokers()

    def broker_alive(self, node_id):
        """True while the metadata page lists the broker as alive (False without a page)
        and the process it lists for it has not exited. A "no" is checked again on the
        page mapped afresh (it may be a stale page).

        The page alone says "alive" until a controller notices a death — never, when the
        dead broker was the last one — and a connect() to a dead broker waits its whole
        timeout for it; a process that is gone is a refusal at once, as TCP's."""
        for reopen in (False, True):
            image = self._image(reopen)
            info = None if image is None else image.brokers.get(node_id)
            if info is not None and info.alive and (
                    info.pid <= 0 or process_start_time(info.pid) is not None):
                return True
        return False

    # -- connections ----------------------------------------------------------------------------

    def _node(self, node_id):
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = _Node(node_id)
        return node

    def connected(self, node_id):
        """True while a connection to ``node_id`` is open."""
        node = self._nodes.get(node_id)
        return node is not None and node.connection is not None

    def is_ready(self, node_id):
        """True if a request to ``node_id`` can be written now: connected, or connecting
        succeeds (not during its reconnect backoff)."""
        node = self._nodes.get(node_id)
        if node is not None and node.connection is not None:
            return True  # the common case, once per sender turn: no call
        return self._ensure_connected(self._node(node_id))

    def connection_delay(self, node_id):
        """Seconds until ``node_id`` may be tried again (0 if now)."""
        node = self._nodes.get(node_id)
        if node is None or node.connection is not None:
            return 0.0
        return self._reconnect.remaining(node_id)

    def _ensure_connected(self, node):
        if node.connection is not None:
            return True
        if self._closed:
            raise KafkaConnectionError("client is closed")
        if not self._reconnect.ready(node.node_id):
            return False
        if not self.broker_alive(node.node_id):
            self._backoff(node, ConnectionRefusedError(
                f"broker {node.node_id} is not alive on the metadata page of cluster "
                f"{self.cluster_id}"))
            return False
        try:
            connection = connect(self.namespace, node.node_id, instance=self._instance,
                                 timeout=min(CONNECT_TIMEOUT, self._request_timeout),
                                 capacity=self._ring_capacity, policy=self._policy)
        except (ConnectionError, TimeoutError) as exc:  # refused, died, closed, not accepted
            self._backoff(node, exc)  # from the failure: connect() may wait
            return False
        try:
            self._check_api_versions(node, connection)
        except (ConnectionError, KafkaTimeoutError, KafkaProtocolError) as exc:
            connection.close()
            self._backoff(node, exc)
            return False
        except BaseException:
            connection.close()
            raise
        node.connection = connection
        self._reconnect.connected(node.node_id)
        node.last_error = None
        log.debug("connected to broker %d (%s)", node.node_id, connection.name)
        return True

    def _check_api_versions(self, node, connection):
        """The ApiVersions exchange on a new connection (blocking, request timeout)."""
        version = API_VERSIONS[ApiKey.API_VERSIONS]
        fields = {}
        if version >= 3:
            fields = {"client_software_name": CLIENT_SOFTWARE_NAME,
                      "client_software_version": CLIENT_SOFTWARE_VERSION}
        request = protocol.request_class(ApiKey.API_VERSIONS, version)(**fields)
        correlation_id = self._next_correlation_id()
        frame = protocol.encode_request(request, correlation_id, self.client_id)
        if not connection.send(frame, timeout=self._request_timeout):
            raise KafkaTimeoutError(f"broker {node.node_id} took no ApiVersions request "
                                    f"within {self._request_timeout} s")
        reply = connection.recv(timeout=self._request_timeout)
        if reply is None:
            raise KafkaTimeoutError(f"broker {node.node_id} did not answer ApiVersions "
                                    f"within {self._request_timeout} s")
        try:
            answered, response = protocol.decode_response(reply, ApiKey.API_VERSIONS, version)
        finally:
            del reply
            connection.release()
        if answered != correlation_id:
            raise CorrelationIdError(f"broker {node.node_id} answered ApiVersions with "
                                     f"correlation id {answered}, expected {correlation_id}")
        if response.error_code:
            raise for_code(response.error_code)(
                f"broker {node.node_id} refused ApiVersions v{version}")
        node.versions = {entry.api_key: (entry.min_version, entry.max_version)
                         for entry in response.api_keys}

    def _backoff(self, node, error):
        """A connection attempt or connection failed: wait before the next attempt, and ask
        for a metadata refresh (Kafka's NetworkClient: a broker that cannot be reached may
        no longer lead what the cache says it leads; the refresh is rate-limited by
        ``retry_backoff_ms``)."""
        wait = self._reconnect.failed(node.node_id)
        node.last_error = error
        self.cluster.request_update()
        log.debug("broker %d unavailable for %.3f s: %s", node.node_id, wait, error)

    def _connection_failed(self, node, error):
        """Drop the connection of ``node`` and fail its requests in flight with ``error``;
        returns how many failed."""
        connection, node.connection = node.connection, None
        if connection is not None:
            connection.close()
        self._backoff(node, error)  # asks for a metadata refresh
        failed = list(node.in_flight)
        node.in_flight.clear()
        for request in failed:
            request.future.failure(error)
        return len(failed)

    # -- requests -------------------------------------------------------------------------------

    def _next_correlation_id(self):
        self._correlation_id = protocol.next_correlation_id(self._correlation_id)
        return self._correlation_id

    def send(self, node_id, request, expect_response=True):
        """Write ``request`` (a kio request object) to broker ``node_id``; return a Future
        of the decoded response body (None when ``expect_response`` is False).

        Never raises for network trouble: the future fails with KafkaConnectionError if
        the broker cannot be reached, IncompatibleBrokerVersion if it does not serve the
        request's version, or KafkaTimeoutError if its request ring stays full for
        ``request_timeout_ms``. A frame of any length goes: one longer than the ring's
        largest frame is carried as fragments (``shm_ring``).
        """
        api_key = request.__api_key__
        size = (protocol.request_frame_size(request, self.client_id)
                if api_key == ApiKey.PRODUCE else None)
        return self._send(node_id, api_key, request.__version__, expect_response, size,
                          _KioFrame(request, self.client_id), None)

    def send_produce(self, node_id, frame, topics, expect_response=True):
        """``send()`` for the producer's Produce requests, written by ``frame`` (a
        ``batch_bodies.ProduceFrame`` of this client's id) around ``topics`` (its argument)
        with no kio request object; the same future, failures and bytes as ``send()``."""
        return self._send(node_id, ApiKey.PRODUCE, _PRODUCE_VERSION, expect_response,
                          frame.size(topics), frame, topics)

    def send_frame(self, node_id, api_key, api_version, size, write_into):
        """``send()`` for a request frame its caller keeps encoded (the consumer's Fetch):
        ``write_into(buf, correlation_id)`` writes the whole frame, ``size`` bytes, at the
        start of ``buf``; the same future and failures as ``send()``."""
        return self._send(node_id, api_key, api_version, True, size, _CallerWritten,
                          write_into)

    def _send(self, node_id, api_key, api_version, expect_response, size, frame, body):
        """Write a request of ``size`` bytes (None: unknown) to ``node_id``: in place, with
        ``frame.write_into(slot, size, correlation_id, body)`` into a claimed ring slot,
        when it fits one ring frame, else as the bytes ``frame.encode(size,
        correlation_id, body)`` returns (fragments past the largest frame). One call per
        request on the producer's path: no closures, the connected case tested first."""
        future = Future()
        node = self._node(node_id)
        connection = node.connection
        if connection is None:
            if not self._ensure_connected(node):
                return future.failure(KafkaConnectionError(
                    f"broker {node_id} is not reachable: {node.last_error}"))
            connection = node.connection
        low, high = node.versions.get(api_key, _NOT_SERVED)
        if low is None or not low <= api_version <= high:
            return future.failure(IncompatibleBrokerVersion(
                f"broker {node_id} serves {ApiKey(api_key).name} versions {low}..{high}, "
                f"not v{api_version}"))
        correlation_id = self._next_correlation_id()
        try:
            if size is not None and size <= self._max_frame_length:
                # in place: a claimed request-ring slot, published by commit
                slot = connection.claim(size, timeout=self._request_timeout)
                written = slot is not None
                if written:
                    try:
                        frame.write_into(slot, size, correlation_id, body)
                    except BaseException:
                        slot.release()
                        connection.abort()
                        raise
                    slot.release()
                    connection.commit(size)
            else:  # a frame longer than the ring's largest goes as fragments (shm_ring)
                written = connection.send(frame.encode(size, correlation_id, body),
                                          timeout=self._request_timeout)
        except (PeerDiedError, PeerClosedError) as exc:
            error = _connection_lost(node_id, exc)
            self._connection_failed(node, error)
            return future.failure(error)
        if not written:
            error = KafkaTimeoutError(f"broker {node_id} read no requests for "
                                      f"{self._request_timeout} s: its request ring stayed full")
            if connection.sending:  # part of the request is out: the stream is cut mid-frame
                self._connection_failed(node, error)
            return future.failure(error)
        if not expect_response:
            return future.success(None)
        node.in_flight.append(_InFlight(correlation_id, api_key, api_version, future,
                                        self._clock() + self._request_timeout))
        return future

    def in_flight_count(self, node_id=None):
        """Requests awaiting a response, on ``node_id`` or on all connections."""
        if node_id is not None:
            node = self._nodes.get(node_id)
            return 0 if node is None else len(node.in_flight)
        return sum(len(node.in_flight) for node in self._nodes.values())

    def least_loaded_node(self, excluded=()):
        """The broker to send a request that any broker can answer: connected with the
        fewest requests in flight — passing over a busy one the metadata page says the
        controller fenced (module doc: a hung broker holds its requests, and what is sent
        after them) — else one that may be tried now; None if none can. ``excluded``:
        brokers already tried for this request (a backoff can be over by the time the
        others failed)."""
        known = (set(self.cluster.brokers) or set(self.bootstrap_brokers())) - set(excluded)
        connected = sorted((len(node.in_flight), node_id) for node_id in known
                           if (node := self._nodes.get(node_id)) is not None
                           and node.connection is not None)
        if connected:
            if not connected[0][0]:
                return connected[0][1]
            image = self._image()  # all busy: one page read, not one per request
            for _, node_id in connected:
                info = None if image is None else image.brokers.get(node_id)
                if info is None or info.alive:
                    return node_id
            fenced = {node_id for _, node_id in connected}
            candidates = self._connectable(sorted(known - fenced))
            return candidates[0] if candidates else connected[0][1]
        candidates = self._connectable(sorted(known))
        if not candidates and self.cluster.brokers:
            # The listed brokers all failed: the page may know of restarted ones.
            candidates = self._connectable([n for n in self.bootstrap_brokers()
                                            if n not in excluded])
        return candidates[0] if candidates else None

    def _connectable(self, node_ids):
        """Those of ``node_ids`` alive on the page and not waiting out a backoff."""
        return [n for n in node_ids if self._reconnect.ready(n) and self.broker_alive(n)]

    # -- receiving ------------------------------------------------------------------------------

    def poll(self, timeout=0.0, wakeup=None):
        """Do the network work: send a metadata refresh if one is due, read every response
        that arrived and complete its future, fail requests past their deadline.

        Waits up to ``timeout`` seconds for the first response when none is there yet;
        returns early once a request completed (answered, or failed), or ``wakeup`` (a
        ``Wakeup``, the owner's "new work" signal) says so: set while nothing is in flight,
        or set urgently. Returns how many requests completed.
        """
        self._maybe_update_metadata()
        handled = self._receive_ready()
        clock = self._clock
        deadline = clock() + timeout
        while not handled:
            handled = self._check_timeouts(clock())
            remaining = deadline - clock()
            if handled:
                break
            if remaining <= 0 or (wakeup is not None and wakeup.urgent):
                break
            waiting = [node for node in self._nodes.values() if node.in_flight]
            if not waiting:
                if wakeup is None or not wakeup.is_set():
                    self._idle(remaining, wakeup)
                break
            node = min(waiting, key=lambda n: n.in_flight[0].deadline)
            wait = max(0.0, min(remaining, node.in_flight[0].deadline - clock()))
            pending = wakeup is not None and wakeup.is_set()
            if len(waiting) > 1 or pending:
                wait = min(wait, MULTI_WAIT_SLICE)
            elif wakeup is not None:
                wait = min(wait, PARKED_WAIT_SLICE)
            if wakeup is None:
                handled = self._receive(node, wait)
            else:
                wakeup.waiting_on = node.connection
                try:
                    handled = self._receive(node, wait, wakeup.is_urgent)
                finally:
                    wakeup.waiting_on = None
            if len(waiting) > 1:
                handled += self._receive_ready()
            if pending and not handled:
                break  # the new work may be for another broker: not behind this one
            self._maybe_update_metadata()
        return handled + self._check_timeouts(clock())

    def _idle(self, remaining, wakeup):
        """Nothing in flight: wait for the owner's wake-up or the next metadata attempt."""
        if self.cluster.need_update:
            next_attempt = 0.0 if self.cluster.new_topics else self._metadata_next_attempt
            remaining = min(remaining, max(0.0, next_attempt - self._clock()))
        if wakeup is not None:
            wakeup.wait(remaining)
        elif remaining > 0:
            time.sleep(remaining)

    def _receive_ready(self):
        """Read what arrived on every connection with requests in flight, without waiting
        beyond the rings' short spin."""
        handled = 0
        for node in list(self._nodes.values()):
            if node.in_flight:
                handled += self._receive(node, 0.0)
        return handled

    def _receive(self, node, timeout, stop=None):
        """Read the responses waiting on ``node``'s connection (up to ``timeout`` seconds for
        the first, less once ``stop()`` is true); complete their futures after releasing the
        ring."""
        connection = node.connection
        in_flight = node.in_flight
        completed = []
        failed = 0
        try:
            frame = connection.recv(timeout, stop)
            while frame is not None:
                request = in_flight[0]
                try:
                    correlation_id, body = protocol.decode_response(
                        frame, request.api_key, request.api_version)
                finally:
                    del frame
                if correlation_id != request.correlation_id:
                    raise CorrelationIdError(
                        f"broker {node.node_id} answered correlation id {correlation_id}, "
                        f"expected {request.correlation_id} "
                        f"({ApiKey(request.api_key).name})")
                in_flight.popleft()
                completed.append((request.future, body))
                frame = connection.recv(0.0) if in_flight else None
            connection.release()
        except (PeerDiedError, PeerClosedError) as exc:
            failed = self._connection_failed(node, _connection_lost(node.node_id, exc))
        except KafkaProtocolError as exc:
            log.error("closing the connection to broker %d: %s", node.node_id, exc)
            failed = self._connection_failed(node, exc)
        for future, body in completed:
            future.success(body)
        return len(completed) + failed

    def _check_timeouts(self, now):
        """Fail the requests of connections whose oldest request is past its deadline;
        returns how many failed."""
        failed = 0
        for node in list(self._nodes.values()):
            if node.in_flight and node.in_flight[0].deadline <= now:
                request = node.in_flight[0]
                failed += self._connection_failed(node, RequestTimedOutError(
                    f"broker {node.node_id} did not answer {ApiKey(request.api_key).name} "
                    f"(correlation id {request.correlation_id}) within "
                    f"{self._request_timeout * 1000:.0f} ms; connection closed"))
        return failed

    def request(self, node_id, request, timeout=None):
        """Send ``request`` to ``node_id`` and wait for its response body (blocking; the
        owning thread), first waiting out a reconnect backoff if the broker is in one.
        Raises the request's error (KafkaConnectionError if the broker stays unreachable),
        or KafkaTimeoutError after ``timeout`` seconds (default: the request timeout)."""
        timeout = self._request_timeout if timeout is None else timeout
        deadline = self._clock() + timeout
        while not self.is_ready(node_id):
            wait = min(self.connection_delay(node_id), deadline - self._clock())
            if wait <= 0:
                break  # send() fails the future, naming why
            time.sleep(wait)
        future = self.send(node_id, request)
        self.poll_until(future, max(0.0, deadline - self._clock()))
        return future.get(0)

    def poll_until(self, future, timeout):
        """poll() until ``future`` is done; KafkaTimeoutError after ``timeout`` seconds."""
        deadline = self._clock() + timeout
        while not future.is_done:
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise KafkaTimeoutError(f"no response within {timeout} s")
            self.poll(remaining)

    # -- metadata -------------------------------------------------------------------------------

    def _maybe_update_metadata(self):
        cluster = self.cluster
        page = self._page
        if self._watch_publications and page is not None and \
                page.version != self._page_sequence:
            self._page_sequence = page.version
            self._published()
        if self._metadata_in_flight:
            return
        now = self._clock()
        due = cluster.need_update or (cluster.last_refresh is not None
                                      and now - cluster.last_refresh >= self._metadata_max_age)
        if not due or (now < self._metadata_next_attempt and not cluster.new_topics):
            return
        cluster.new_topics = False
        self._metadata_next_attempt = now + self._retry_backoff
        all_topics = cluster.need_all_topics
        module = protocol.request_module(ApiKey.METADATA, API_VERSIONS[ApiKey.METADATA])
        topics = None if all_topics else tuple(
            module.MetadataRequestTopic(name=name) for name in sorted(cluster.topics_of_interest))
        request = module.MetadataRequest(
            topics=topics, allow_auto_topic_creation=self._auto_create,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False)
        sent_for = cluster.requested
        tried = set()
        while True:  # a broker that cannot be reached is in its backoff: try the next one now
            node_id = self.least_loaded_node(excluded=tried)
            if node_id is None:
                cluster.update_failed(self._unreachable(), sent_for)
                return
            tried.add(node_id)
            future = self.send(node_id, request)
            if not (future.is_done and future.failed()):
                break
            if not isinstance(future.exception, KafkaConnectionError):
                cluster.update_failed(future.exception, sent_for)
                return
        self._metadata_in_flight = True
        self._metadata_node = node_id
        self._metadata_attempt += 1
        future.add_callback(self._handle_metadata, all_topics, sent_for, self._metadata_attempt)
        future.add_errback(self._metadata_failed, sent_for, self._metadata_attempt)

    def _published(self):
        """The controller published a new image (module doc, "Metadata"): refresh if
        requests are in flight; a Metadata request in flight to a broker the new image
        fences is given up (a hung broker may never answer it; its late answer is ignored),
        so the refresh goes elsewhere now."""
        if not any(node.in_flight for node in self._nodes.values()):
            return
        self.cluster.request_update()
        if self._metadata_in_flight:
            image = self._image()
            info = None if image is None else image.brokers.get(self._metadata_node)
            if info is not None and not info.alive:
                self._metadata_in_flight = False
                self._metadata_attempt += 1
                self._metadata_next_attempt = 0.0

    def _unreachable(self):
        """NoBrokersAvailable when no broker can be asked for metadata: if no broker process
        of the data directory runs (none holds its lock), the cluster is stopped and the
        message says how to start it; otherwise it gives each broker's last error."""
        if not self._cluster_running():
            return NoBrokersAvailable(not_running_message(self.data_dir, self.cluster_id))
        reasons = "; ".join(f"broker {n.node_id}: {n.last_error}"
                            for n in self._nodes.values() if n.last_error is not None)
        return NoBrokersAvailable(
            f"no broker of cluster {self.cluster_id} ({self.data_dir}) can be reached: "
            + (reasons or "none is live on the metadata page"))

    def _cluster_running(self):
        """Whether a broker process of the data directory runs (holds its lock)."""
        return any(broker_is_alive(self.data_dir, b) for b in dd.broker_ids(self.data_dir))

    def _metadata_failed(self, sent_for, attempt, exception):
        if attempt != self._metadata_attempt:
            return  # given up (_published)
        self._metadata_in_flight = False
        self.cluster.update_failed(exception, sent_for)

    def _handle_metadata(self, all_topics, sent_for, attempt, response):
        if attempt != self._metadata_attempt:
            return  # given up (_published): a newer request was sent since
        self._metadata_in_flight = False
        brokers = {b.node_id: BrokerMetadata(b.node_id, b.host, b.port, b.rack)
                   for b in response.brokers}
        topics = {}
        for topic in response.topics:
            partitions = [
                PartitionMetadata(topic.name, p.partition_index, p.leader_id, p.leader_epoch,
                                  tuple(p.replica_nodes), tuple(p.isr_nodes),
                                  tuple(p.offline_replicas), int(p.error_code))
                for p in topic.partitions]
            topics[topic.name] = TopicMetadata(topic.name, int(topic.error_code),
                                               topic.is_internal, partitions)
        self.cluster.update(brokers, response.controller_id, topics, self._clock(), all_topics,
                            sent_for)
        for node in self._nodes.values():  # new metadata, new chances (module doc)
            if node.connection is None:
                self._reconnect.connected(node.node_id)  # forgets its back-off
        log.debug("metadata version %d: brokers %s, controller %d, topics %s",
                  self.cluster.version, sorted(brokers), response.controller_id, topics)

    def wait_for_metadata(self, timeout, all_topics=False):
        """Refresh the metadata now and wait for the answer (the owning thread). A failed
        attempt with a retriable error (no broker accepted a connection in time on a loaded
        machine, a request timed out) is tried again, after ``retry_backoff_ms``, until
        ``timeout`` seconds have passed, as Kafka's clients wait for metadata; then
        KafkaTimeoutError naming the last failure. A cluster none of whose brokers runs
        (NoBrokersAvailable saying how to start it) and errors that are not retriable are
        raised at once."""
        deadline = self._clock() + timeout
        self._metadata_next_attempt = 0.0
        while True:
            ticket = self.cluster.request_update(all_topics)
            while self.cluster.answered < ticket:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    raise self._metadata_timeout(timeout)
                self.poll(remaining)
            error = self.cluster.last_error
            if error is None:
                return
            if not getattr(error, "retriable", False) or not self._cluster_running():
                raise error
            if deadline - self._clock() <= 0:
                raise self._metadata_timeout(timeout)
            log.debug("metadata refresh failed, retrying: %s", error)

    def _metadata_timeout(self, timeout):
        return KafkaTimeoutError(
            f"metadata of cluster {self.cluster_id} not updated within {timeout} s"
            + (f": {self.cluster.last_error}" if self.cluster.last_error else ""))

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self):
        """Close every connection (unlinking its rings) and fail what is in flight; safe to
        call twice."""
        if self._closed:
            return
        for node in self._nodes.values():
            if node.connection is not None:
                self._connection_failed(node, KafkaConnectionError("client closed"))
        self._closed = True
        if self._page is not None:
            self._page.close()
            self._page = None

    def __repr__(self):
        return (f"KafkaClient(cluster={self.cluster_id}, data_dir={self.data_dir!r}, "
                f"connected={sorted(n for n, node in self._nodes.items() if node.connection)})")

