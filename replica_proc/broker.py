"""The broker process: start-up, the request loop, shutdown.

``Broker(config, open_metadata=..., make_controller=...).run()`` is the whole life of a
broker (``python -m replica_proc`` builds one; tests build one with a fake metadata
source and controller). Start-up, in order:

1. the cluster id from ``D/meta.properties`` (written by the first start) and the
   shared-memory namespace of this start (``D/shm.token``, ``dd.read_shm_namespace``);
2. ``D/broker-<id>/broker.lock`` taken (another process running this broker id refuses
   the start), meta.properties checked, broker.json ``starting`` (``cluster.metadata.broker_lock``),
   the heartbeat thread started (``heartbeat``: the controller fences a broker whose
   heartbeat is older than ``broker.session.timeout.ms``);
3. the metadata source (``open_metadata(namespace)``: the metadata page), the process's
   segment file cache sized (``ringlog.max.open.segment.files``), the ReplicaManager,
   this broker's Controller (``make_controller(cluster_id, source)``) and its first poll —
   a broker that wins the election replays the metadata log and publishes before it serves;
4. the newest image applied: every partition placed on this broker is opened, which is
   where a log left by a crash is recovered and a damaged replica reported
   (``damaged_replicas``). A broker that finds no image published yet waits for one
   (``_await_first_image``) before it goes on: were it counted alive with its replicas
   unopened, the controller could make a replica that recovery is about to find damaged
   the leader, and the intact followers would truncate to it (Kafka's broker likewise
   loads its logs before it is unfenced);
5. the shm_ring Listener and the replica fetchers (``replica_fetcher``: their outbound
   connections wake this broker through the Listener's doorbell), ``gc.freeze()``
   (``ringlog.gc.freeze``: start-up's objects leave the collector's scans), then broker.json
   ``serving`` (the controller counts the broker alive from then on and makes it leader of
   its partitions; this broker's own controller looks at once, the loop's first turn does
   not wait), and a ``start-up:`` log line with each phase's wall and CPU time
   (``startup_timing``);
6. once the metadata page lists it alive under a controller, one byte to ``ready_fd`` (if
   the supervisor gave one: ``RINGLOG_READY_FD``), which the supervisor's start waits on.

The loop (one thread does everything; no lock anywhere): wait on the Listener's doorbell —
at most ``POLL_INTERVAL``, less when a parked fetch, a delayed produce, a log timer or a
replica fetcher's back-off is due sooner; a leader's answer to a replica fetch rings the
doorbell — then poll the controller, apply a new image if the metadata page moved, give the
replica fetchers their turn (follow the new image, append what the leaders sent, send the
next fetches; never blocking), accept connections, serve every connection with requests (in
order per connection, see ``channel``; at most ``REQUESTS_PER_TURN`` of each per turn, so no
client waits behind another's stream), answer parked fetches and delayed produces whose time
ran out, look at the channels needing service (``channel``: drop those closing, retry
responses that found a full ring, serve backlogs left by a mute), wake the clients of every
answer written in
the turn at once (the loop holds its wake-ups while it writes: ``shm_ring.wakeup``, "Held
posts"), run the log timers, every ``replica.lag.time.max.ms`` / 2 the ISR-shrink check of
the partitions it leads, read the controller's answers (forwarded CreateTopics, ISR changes)
and send the ISR changes pending, and drop connections whose client closed or died
(``Listener.reap``, which unlinks a dead client's rings). A turn touches only the
connections with work: those whose client set its byte of the listener's requests pending
flags (``Listener.ready``, ``reap``; ``shm_ring.listener_descriptor``) and the channels in
the service set; the one look at every connection is the liveness check's, every
``LIVENESS_INTERVAL``.

A request that cannot be served — garbage, an unknown API, a bug in a handler — drops
that connection only, with a log line naming it; the broker keeps serving. An exception
outside the requests (the controller cannot read its metadata log, say) ends ``run()``
after the same orderly shutdown, and ``python -m replica_proc`` exits with status 1.

Shutdown (``stop()``, from SIGTERM or SIGINT) is Kafka's controlled shutdown: broker.json
``stopping`` at once — the controller no longer counts the broker alive and moves its
leaderships to other in-sync replicas — while the broker keeps serving, until the metadata
shows it leads no partition that another live in-sync replica could lead (a broker alone,
or leading RF-1 partitions only, does not wait), for at most
``controlled.shutdown.max.retries`` × ``controlled.shutdown.retry.backoff.ms`` (no wait
with ``controlled.shutdown.enable=false``). Then the replica fetchers' connections are
closed (their rings unlinked), the listener closed (clients see PeerClosedError), the
controllership resigned, every log flushed and closed with its
clean-shutdown marker, the heartbeats stopped, the metadata page unmapped, the lock
released. A SIGKILL skips all of it; the next start recovers the logs and takes the
listener over.

Owner: the thread that calls ``run()`` does everything; ``stop()`` may be called from a
signal handler or another thread.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import time

import posix_ipc

from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import register_broker
from cluster.stats.publisher import process_stats
from replica_proc.broker_metadata import BrokerMetadata
from replica_proc.broker_stats import BrokerStatsSource
from replica_proc.channel import Channel, CloseConnection
from replica_proc.controller_channel import ControllerChannel
from replica_proc.heartbeat import HeartbeatThread
from replica_proc.log_manager import LogManager
from replica_proc.replica_fetcher import ReplicaFetcherManager
from replica_proc.replica_manager import ReplicaManager
from replica_proc.request_handler import RequestHandler
from replica_proc.startup_timing import StartupTiming
from replica_proc.truncation import EpochTruncation
from segments import durability
from segments.file_cache import FILES
from shm_ring import Listener, connect
from shm_ring.wakeup import hold_posts, release_posts, stop_holding

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.05
"""Longest wait of the loop, in seconds: how late a new metadata image or a controller
duty may be noticed."""

FIRST_IMAGE_POLL = 0.005
"""Seconds between looks at the metadata page while a starting broker waits for the first
published image."""

REQUESTS_PER_TURN = 4
"""Most requests of one connection handled in one turn of the loop. Without a bound, a
producer whose requests arrive faster than the broker handles them (several in flight, a
busy machine) keeps the loop on its connection and every other client waits: a
consumer's fetch went unread behind a stream of produce requests (for how long:
perf/README.md, "Requests per turn")."""

LIVENESS_INTERVAL = 0.5
"""Seconds between checks that each client process is still alive."""


class Broker:
    """One broker (see the module doc).

    ``config``: its ``BrokerConfig`` (``broker.id`` and ``data_dir`` set).
    ``open_metadata(namespace)`` returns the metadata source (``version``, ``read()``,
    ``close()``); ``make_controller(cluster_id, source)`` this broker's controller
    (``poll(now)``, ``active``, ``create_topics``, ``delete_topics``,
    ``create_partitions``, ``close()``), or pass None for a broker that never is one.
    ``log_clock``: wall-clock milliseconds for the logs (None: the system's);
    ``clock``: monotonic seconds for the loop's waits and timers (and replica lag).
    """

    def __init__(self, config, *, open_metadata, make_controller=None, log_clock=None,
                 clock=time.monotonic,
                 liveness_interval=LIVENESS_INTERVAL, startup=None, ready_fd=None):
        if config.data_dir is None or config["broker.id"] < 0:
            raise ValueError(f"a broker needs a data directory and a broker.id >= 0; found "
                             f"data_dir={config.data_dir!r}, broker.id={config['broker.id']}")
        self.config = config
        self.broker_id = config["broker.id"]
        self.data_dir = config.data_dir
        self.cluster_id = None
        self._open_metadata = open_metadata
        self._make_controller = make_controller
        self._log_clock = log_clock
        self._clock = clock
        self._liveness_interval = liveness_interval
        self._stopping = False
        self._channels = {}  # Connection -> Channel
        self._service = set()  # the channels needing service (channel's module doc)
        self._startup = StartupTiming() if startup is None else startup
        self._ready_fd = ready_fd

    def stop(self):
        """Ask the loop to stop (safe from a signal handler or another thread)."""
        self._stopping = True

    # -- life -------------------------------------------------------------------------------

    def run(self):
        """Start, serve until ``stop()``, shut down (see the module doc)."""
        self.cluster_id = cluster_id = dd.ensure_cluster_id(self.data_dir)
        # the shared-memory namespace of this start of the cluster (shm_ring.naming)
        self.namespace = namespace = dd.read_shm_namespace(self.data_dir, cluster_id)
        durability.set_enabled(self.config["ringlog.fsync"])  # before any log is opened
        if not durability.ENABLED:
            log.warning("broker %d does not fsync (ringlog.fsync=false): a machine crash may "
                        "lose acknowledged records; for tests only", self.broker_id)
        with contextlib.ExitStack() as stack:  # closes in the reverse order of opening
            registration = register_broker(self.data_dir, self.broker_id, cluster_id)
            stack.callback(registration.close)
            heartbeat = HeartbeatThread(registration,
                                        self.config["broker.heartbeat.interval.ms"] / 1000)
            stack.callback(heartbeat.start().close)
            log.info("broker %d of cluster %s starting (pid registered in %s)",
                     self.broker_id, cluster_id, registration.path)
            self._startup.mark("registration")
            source = self._open_metadata(namespace)
            stack.callback(source.close)
            bound, why = self.config.max_open_segment_files()
            FILES.max_open_files = bound
            log.info("broker %d keeps at most %d segment files open "
                     "(ringlog.max.open.segment.files, %s)", self.broker_id, bound, why)
            forwarder = ControllerChannel(namespace, self.broker_id)
            stack.callback(forwarder.close)
            replicas = ReplicaManager(self.broker_id, self.config["log.dirs"], self.config,
                                      self._log_clock, loop_clock=self._clock)
            stack.callback(replicas.close)
            controller = None
            if self._make_controller is not None:
                controller = self._make_controller(cluster_id, source)
                stack.callback(controller.close)
                controller.poll(self._clock())
            self._startup.mark("metadata")
            listener = Listener(namespace, self.broker_id,
                                instance=dd.instance_of(self.data_dir),
                                policy=self.config.wait_policy(self._clock),
                                liveness_interval=self._liveness_interval)
            stack.callback(listener.close)
            # the coordinator's markers: answers from other brokers ring this doorbell
            handler = RequestHandler(self.broker_id, self.config, replicas,
                                     BrokerMetadata(source, cluster_id, namespace), controller,
                                     forwarder, self._clock,
                                     connector=functools.partial(connect, waker=listener))
            stack.callback(handler.transactions.close)  # before the listener
            handler.refresh_metadata()
            self._await_first_image(handler, controller)
            fetchers = ReplicaFetcherManager(namespace, self.broker_id, replicas,
                                             self.config, listener, self._clock,
                                             epoch_truncation=EpochTruncation())
            stack.callback(fetchers.close)  # before the listener: it watches their rings
            log_manager = LogManager(replicas, self.config, self._clock() * 1000)
            stats = process_stats(namespace, "broker", f"broker-{self.broker_id}")
            stack.callback(stats.close)
            stats.add_source(BrokerStatsSource(handler, listener))
            frozen = ""
            if self.config["ringlog.gc.freeze"]:
                gc.freeze()  # start-up's objects live as long as the process
                frozen = f", {gc.get_freeze_count()} start-up objects out of the GC's scans"
            self._startup.mark("listener")
            registration.set_state(dd.STATE_SERVING)
            self._startup.mark("serving")
            log.info("broker %d serving: %d partition(s), listener %s%s", self.broker_id,
                     len(replicas), listener.name, frozen)
            log.info("broker %d start-up: %s", self.broker_id, self._startup.line())
            if controller is not None:
                controller.poll_now()  # it counts this broker alive at once
            try:
                self._loop(listener, handler, log_manager, controller, forwarder, fetchers,
                           registration)
            finally:
                registration.set_state(dd.STATE_STOPPING)
                log.info("broker %d stopping", self.broker_id)
                self._channels.clear()
                self._service.clear()
        log.info("broker %d stopped", self.broker_id)

    def _await_first_image(self, handler, controller):
        """Wait until a published metadata image is applied (module doc, step 4), polling
        this broker's controller meanwhile (it may be the one to publish); a stop ends it.
        A broker without a controller (tests' ``broker_runner``: the test publishes the
        images, once the broker serves) does not wait."""
        if controller is None:
            return
        while handler.metadata.image.version == 0 and not self._stopping:
            controller.poll(self._clock())
            if not handler.refresh_metadata():
                time.sleep(FIRST_IMAGE_POLL)

    # -- the loop ---------------------------------------------------------------------------

    def _loop(self, listener, handler, log_manager, controller, forwarder, fetchers,
              registration):
        clock = self._clock
        channels = self._channels
        service = self._service
        replicas = handler.replicas
        isr_check_interval = self.config["replica.lag.time.max.ms"] / 2000
        next_isr_check = clock() + isr_check_interval
        shutdown_deadline = None
        # Posts are held while a turn writes its answers (shm_ring.wakeup, "Held posts"):
        # a woken client takes this core at once, and the rest of the turn would wait for it.
        hold_posts()
        first_turn = True
        try:
            while True:
                now = clock()
                if self._stopping:
                    if shutdown_deadline is None:
                        shutdown_deadline = self._begin_shutdown(registration, now)
                    if self._may_close(handler.metadata.image, now, shutdown_deadline):
                        return
                timeout = min(POLL_INTERVAL, log_manager.next_due() / 1000 - now)
                deadline = handler.next_deadline()
                if deadline is not None:
                    timeout = min(timeout, deadline - now)
                deadline = fetchers.next_deadline()
                if deadline is not None:
                    timeout = min(timeout, deadline - now)
                if first_turn:
                    first_turn = False  # the controller's first look at this broker serving
                elif timeout > 0 and not any(c.needs_service for c in service):
                    try:
                        listener.wait(timeout)
                    except posix_ipc.SignalError:
                        pass  # a signal (SIGTERM: stop) interrupted the wait
                if controller is not None:
                    controller.poll(clock())
                handler.refresh_metadata()
                if self._ready_fd is not None:
                    self._tell_ready(handler.metadata.image)
                fetchers.poll(clock())
                for conn in listener.accept_pending():
                    channels[conn] = Channel(conn, service)
                for conn in listener.ready():
                    channel = channels.get(conn)
                    if channel is not None:
                        self._serve(listener, handler, channel)
                handler.expire(clock())
                if service:
                    self._service_turn(listener, handler, service)
                release_posts()  # the turn's answers are written: wake their clients now
                log_manager.tick(clock() * 1000)
                if clock() >= next_isr_check:
                    replicas.maybe_shrink_isr()
                    next_isr_check = clock() + isr_check_interval
                forwarder.poll()
                handler.alter_partitions.poll()
                handler.producer_ids.poll()
                for conn in listener.reap():
                    channel = channels.pop(conn, None)
                    if channel is not None:
                        handler.cancel(channel)
                        service.discard(channel)  # after: cancelling may unpark it
        finally:
            stop_holding()

    def _tell_ready(self, image):
        """Write the supervisor's ready byte once the page lists this broker alive under a
        controller (``RINGLOG_READY_FD``)."""
        info = image.brokers.get(self.broker_id)
        if image.controller_id < 0 or info is None or not info.alive or info.pid != os.getpid():
            return
        fd, self._ready_fd = self._ready_fd, None
        try:
            os.write(fd, b"r")
        except OSError as exc:  # the supervisor is gone or stopped waiting
            log.info("broker %d: cannot tell the supervisor it is ready: %s", self.broker_id,
                     exc)
        finally:
            os.close(fd)

    # -- controlled shutdown ----------------------------------------------------------------

    def _begin_shutdown(self, registration, now):
        """Say ``stopping`` (the controller moves this broker's leaderships away); the
        deadline of the wait for that."""
        registration.set_state(dd.STATE_STOPPING)
        wait = (self.config["controlled.shutdown.max.retries"]
                * self.config["controlled.shutdown.retry.backoff.ms"] / 1000)
        if self.config["controlled.shutdown.enable"]:
            log.info("broker %d stopping: waiting up to %.1f s for its leaderships to move",
                     self.broker_id, wait)
        return now + wait

    def _may_close(self, image, now, deadline):
        """Whether the controlled shutdown is over: this broker leads no partition that
        another live in-sync replica could lead, or the deadline passed."""
        if not self.config["controlled.shutdown.enable"]:
            return True
        waiting = [state for state in image.partitions_led_by(self.broker_id)
                   if any(b != self.broker_id and b in state.isr
                          and getattr(image.brokers.get(b), "alive", False)
                          for b in state.replicas)]
        if not waiting:
            log.info("broker %d leads no partition another replica could lead; closing",
                     self.broker_id)
            return True
        if now >= deadline:
            log.warning("broker %d closing while it still leads %d partition(s) other "
                        "replicas could lead (controlled shutdown timed out): %s",
                        self.broker_id, len(waiting),
                        [f"{s.topic}-{s.partition}" for s in waiting[:10]])
            return True
        return False

    def _service_turn(self, listener, handler, service):
        """Look at the channels needing service (channel's module doc): drop those closing,
        retry unsent responses, serve what unmuted channels hold; a channel leaves the set
        once it needs nothing more."""
        for channel in list(service):
            if channel.closing:
                self._drop(listener, handler, channel)
                continue
            if channel.unsent is not None:
                if channel.retry_send():
                    self._serve(listener, handler, channel)
            elif channel.needs_service:
                self._serve(listener, handler, channel)
            if not channel.wants_turn:
                service.discard(channel)

    def _serve(self, listener, handler, channel):
        """Handle up to ``REQUESTS_PER_TURN`` of the channel's requests (fewer if it runs out
        or is muted); what is left waits for the next turn of the loop."""
        handle = handler.handle
        for _ in range(REQUESTS_PER_TURN):
            frame = channel.next_request()
            if frame is None:
                break
            try:
                handle(channel, frame)
            except CloseConnection as exc:
                channel.closing = str(exc)
            except Exception as exc:
                log.exception("%s: request failed", channel.name)
                channel.closing = f"internal error {exc!r}"
            frame = None  # the ring view must be gone before the connection may close
            if channel.closing:
                break
        if channel.closing:
            self._drop(listener, handler, channel)
        else:
            channel.settle()

    def _drop(self, listener, handler, channel):
        log.warning("dropping connection %s (client pid %d): %s", channel.name,
                    channel.conn.client_pid, channel.closing)
        handler.cancel(channel)
        self._channels.pop(channel.conn, None)
        channel.close(listener)  # out of the service set too
