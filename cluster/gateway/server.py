"""The Kafka wire gateway: one TCP listener per broker id, each client bridged to its broker.

``Gateway(data_dir, kafka_port, host="127.0.0.1")`` serves a running ringlog cluster to any
Kafka client (Java, librdkafka and kcat, kafka-python, aiokafka):

- **Listeners.** Broker ``b`` listens on ``kafka_port + b`` (``kafka_port`` 0: each on a
  free port, the ports of the previous gateway of the data directory first, so clients
  reconnect after a restart); the bootstrap address is the lowest broker id's. The brokers
  are the ids the metadata page and the data directory know at start; a broker that
  appears later gets its listener when a Metadata answer first names it (``port_for``).
  Bound to loopback unless ``host`` says otherwise (the protocol is PLAINTEXT: no
  authentication, no encryption; the CLI warns).
- **Connections** (``bridge``): each accepted socket is bridged to a ring connection of the
  listener's broker; frames pass unchanged but for the addresses (``wire``).
- **One per data directory**: ``start()`` takes an exclusive flock on ``D/gateway.lock``
  (released when the process ends, however it ends); a second gateway of D fails at once
  naming the pid that serves.
- **Record.** ``D/gateway.json`` says ``{"pid", "start_time", "host", "ports": {id: port},
  "bootstrap": "host:port", "state": "serving|stopped"}`` for ``ringlog cluster status``,
  the supervisor and the tests.
- **Stats.** A stats page of role ``gateway`` (``stats``).

Threads: ``serve()`` runs on the caller's thread until ``stop()`` (any thread, or a
signal); one accept thread per listener, one per connection (``bridge``).
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import resource
import socket
import threading

from cluster.errors import NoBrokersAvailable
from cluster.gateway.bridge import Bridge
from cluster.gateway.stats import GatewayStats
from cluster.metadata import data_dir as dd
from cluster.metadata.page import MetadataPage
from cluster.stats.publisher import process_stats
from shm_ring.liveness import process_start_time

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"

#: Pending connections a listener's kernel queue holds (Kafka's acceptor uses the OS max).
BACKLOG = 1024

#: Stack of each bridge thread: one per connection, so thousands of connections must not
#: reserve 8 MiB each.
THREAD_STACK_BYTES = 512 * 1024


def record_path(data_dir):
    return os.path.join(data_dir, dd.GATEWAY_JSON)


def read_record(data_dir):
    """The gateway record of ``data_dir`` (module doc), or None."""
    return dd.read_json(record_path(data_dir))


def raise_fd_limit():
    """Each connection holds a socket and its ring's files: lift the soft limit on open
    files to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Gateway:
    """The gateway of one data directory (module doc). ``config``: a GatewayConfig."""

    def __init__(self, data_dir, kafka_port, config, host=LOOPBACK):
        self.data_dir = os.path.abspath(data_dir)
        self.cluster_id = dd.read_cluster_id(self.data_dir)
        if self.cluster_id is None:
            raise NoBrokersAvailable(f"{self.data_dir} is not a ringlog data directory (no "
                                     f"{dd.META_PROPERTIES}); start a cluster there first")
        self.namespace = None  # of the cluster's start, read with the metadata page
        self.instance = dd.instance_of(self.data_dir)  # D's brokers only (connect checks)
        self.kafka_port = kafka_port
        self.host = host
        self.config = config
        self.stats = GatewayStats(self.connections)
        self._page = None
        self._page_lock = threading.Lock()
        self._lock = threading.Lock()  # listeners, ports, bridges
        self._listeners = {}  # broker id -> listening socket
        self._ports = {}  # broker id -> port
        self._bridges = set()
        self._stopped = threading.Event()
        previous = read_record(self.data_dir) or {}
        self._previous_ports = ({int(b): p for b, p in previous.get("ports", {}).items()}
                                if kafka_port == 0 and previous.get("host") == host else {})
        self._registration = None
        self._lock_fd = None

    # -- metadata -------------------------------------------------------------------------------

    def image(self):
        """The controller's newest MetadataImage (NoBrokersAvailable: cluster stopped)."""
        with self._page_lock:
            if self._page is None:
                self.namespace = dd.read_shm_namespace(self.data_dir, self.cluster_id)
                try:
                    self._page = MetadataPage.open(self.namespace)
                except FileNotFoundError:
                    raise NoBrokersAvailable(
                        f"cluster {self.cluster_id} in {self.data_dir} is not running "
                        f"(no metadata page)") from None
            return self._page.read()

    # -- listeners ------------------------------------------------------------------------------

    def _bind(self, broker_id):
        wanted = [self.kafka_port + broker_id] if self.kafka_port else []
        wanted += [p for p in [self._previous_ports.get(broker_id)] if p] + [0]
        error = None
        for port in wanted:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._size_buffers(sock)  # before listen: accepted sockets inherit them
            try:
                sock.bind((self.host, port))
            except OSError as exc:
                sock.close()
                error = exc
                if self.kafka_port:
                    raise OSError(exc.errno, f"broker {broker_id}'s listener cannot bind "
                                             f"{self.host}:{port} (--kafka-port "
                                             f"{self.kafka_port} + broker id): "
                                             f"{exc.strerror}") from None
                continue
            sock.listen(BACKLOG)
            return sock
        raise error

    def _size_buffers(self, sock):
        """``socket.receive.buffer.bytes`` / ``socket.send.buffer.bytes`` (-1: the OS's)."""
        config = self.config
        if config.socket_receive_buffer_bytes != -1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF,
                            config.socket_receive_buffer_bytes)
        if config.socket_send_buffer_bytes != -1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF,
                            config.socket_send_buffer_bytes)

    def port_for(self, broker_id):
        """The TCP port of ``broker_id``'s listener, opened now if it has none yet."""
        with self._lock:
            port = self._ports.get(broker_id)
            if port is not None or self._stopped.is_set():
                return -1 if port is None else port
            sock = self._bind(broker_id)
            self._listeners[broker_id] = sock
            port = self._ports[broker_id] = sock.getsockname()[1]
        threading.Thread(target=self._accept_loop, args=(broker_id, sock), daemon=True,
                         name=f"gateway-accept-{broker_id}").start()
        log.info("broker %d listens on %s:%d", broker_id, self.host, port)
        if self._registration is not None:
            self._write_record("serving")
        return port

    def _accept_loop(self, broker_id, listener):
        while not self._stopped.is_set():
            try:
                sock, address = listener.accept()
            except OSError:
                if self._stopped.is_set():
                    return
                log.exception("accept on broker %d's listener failed", broker_id)
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            bridge = Bridge(self, sock, address, broker_id)
            with self._lock:
                if self._stopped.is_set():
                    sock.close()
                    return
                self._bridges.add(bridge)
            self.stats.count("connection-creation-total")
            bridge.start()

    def connections(self):
        """The live bridges (a copy)."""
        with self._lock:
            return list(self._bridges)

    def forget(self, bridge):
        """A bridge's thread calls this when its connection is closed."""
        with self._lock:
            self._bridges.discard(bridge)
        self.stats.count("connection-close-total")

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self):
        """Open a listener per known broker id, publish stats, write the record."""
        self._take_lock()
        raise_fd_limit()
        threading.stack_size(THREAD_STACK_BYTES)
        known = set(dd.broker_ids(self.data_dir))
        known.update(self.image().brokers)
        if not known:
            raise NoBrokersAvailable(f"cluster {self.cluster_id} in {self.data_dir} has no "
                                     f"broker")
        try:
            for broker_id in sorted(known):
                self.port_for(broker_id)
        except BaseException:
            self.stop()
            raise
        self._registration = process_stats(self.namespace, "gateway",
                                           f"gateway:{self.bootstrap()}")
        self._registration.add_source(self.stats.figures)
        self._write_record("serving")

    def _take_lock(self):
        with dd.private_umask():
            fd = os.open(os.path.join(self.data_dir, dd.GATEWAY_LOCK),
                         os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = (read_record(self.data_dir) or {}).get("pid")
            raise OSError(errno.EBUSY, f"a Kafka gateway (pid {holder}) already serves "
                                       f"{self.data_dir}") from None
        self._lock_fd = fd  # held until the process exits

    def bootstrap(self):
        """``host:port`` of the lowest broker id's listener."""
        with self._lock:
            return f"{self.host}:{self._ports[min(self._ports)]}"

    def ports(self):
        with self._lock:
            return dict(self._ports)

    def serve_for(self, seconds):
        """Block until ``stop()`` or for ``seconds``; whether it stopped (the main thread
        waits in slices so signal handlers run)."""
        return self._stopped.wait(seconds)

    def stop(self):
        """Close the listeners and every connection (any thread; idempotent)."""
        with self._lock:
            if self._stopped.is_set():
                return
            self._stopped.set()
            listeners = list(self._listeners.values())
            bridges = list(self._bridges)
        for sock in listeners:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for bridge in bridges:
            bridge.close()
        for bridge in bridges:
            bridge.join(5.0)
        if self._registration is not None:
            self._write_record("stopped")
            self._registration.close()
        with self._page_lock:
            if self._page is not None:
                self._page.close()
                self._page = None

    def _write_record(self, state):
        pid = os.getpid()
        ports = self.ports()
        dd.write_json(record_path(self.data_dir), {
            "pid": pid, "start_time": process_start_time(pid), "host": self.host,
            "ports": {str(b): p for b, p in sorted(ports.items())},
            "bootstrap": f"{self.host}:{ports[min(ports)]}", "state": state})
