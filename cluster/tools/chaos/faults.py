"""The fault injector: plays a schedule (``schedule``) against the brokers (``brokers``).

``FaultInjector.run(stop)`` runs in a thread of the ``chaos`` command: for each step it
waits until the step is due (or ``stop`` is set), chooses the brokers from the metadata
page as they are at that moment (the leader of the step's partition, its followers), does
what the scenario says, and records every action in the fault log, a JSON line each
(``{"t": epoch seconds, "step", "fault", "broker", "pid", "partition", ...}``), flushed
line by line. A step whose target does not exist (a follower when the replication factor
is 1, a leader while the partition is offline) is recorded as ``skipped`` with the reason.
Steps run one after another; one that runs late delays the next (``played`` and
``pending`` say how far it got: the command extends the run until every step was
played). The unclean-election steps, which stop every replica of a partition, end once
its ISR is full again (at most
``ISR_WAIT`` seconds, recorded as an ``isr`` event), as replication_test waits between
bounces: otherwise the next step kills the followers before they rejoin, and the whole
run is spent below min.insync.replicas.

``truncate_to_recovery_point`` is the page-cache-loss fault: what a broker's files look
like after a power cut lost every page written since the last fsync (Kafka's recovery
point, KIP-966's last-replica-standing case). It is applied only to a killed broker.

Owner: the injector's thread; ``brokers`` is handed back to the main thread once ``run``
has returned.
"""
from __future__ import annotations

import contextlib
import os
import random
import time

from cluster import ConfigResource, ConfigResourceType, KafkaAdminClient, KafkaProducer
from cluster.metadata import data_dir as dd
from cluster.tools.chaos.schedule import choose
from segments.checkpoint import OffsetCheckpoint
from segments.log import RECOVERY_POINT_CHECKPOINT
from segments.record.batch_descriptor import ATTRIBUTES_OFFSET, HEADER_SIZE
from segments.record.batch_header import BatchHeader
from segments.segment import (
    LOG_SUFFIX,
    base_offset_from_name,
    iter_file_batches,
    segment_paths,
)
from segments.txn_index import TXN_INDEX_SUFFIX

#: acks=1 records the divergence scenario writes to a leader whose followers are stopped.
DIVERGENT_RECORDS = 50
#: Seconds past the followers' fetch max wait before the divergent records are written.
FETCH_WAIT_SLACK = 0.25
#: Seconds to wait for a partition to have a leader again before a step goes on.
LEADER_WAIT = 10.0
#: Seconds an unclean-election step waits for its partition's ISR to be full again.
ISR_WAIT = 10.0
_POLL = 0.05


class FaultInjector:
    """Carries out ``schedule`` on ``brokers`` for ``topic`` (see the module doc).

    ``metadata()`` returns the newest MetadataImage; ``on_event(event)`` is called with each
    recorded event (the command prints them). ``fault_log``: a
    ``workload.HistoryWriter``.
    """

    def __init__(self, schedule, brokers, metadata, topic, data_dir, fault_log,
                 on_event=None, clock=time.monotonic):
        self.schedule = schedule
        self.brokers = brokers
        self.metadata = metadata
        self.topic = topic
        self.data_dir = data_dir
        self.log = fault_log
        self.on_event = on_event or (lambda event: None)
        self.clock = clock
        self.error = None  # what stopped the injector early, if anything
        self.played = 0    # steps carried out (or skipped with a reason) so far

    def pending(self):
        """Steps of the schedule not played yet (none once the injector failed)."""
        return 0 if self.error is not None else len(self.schedule) - self.played

    def run(self, stop, started=None):
        """Play the schedule from ``started`` (clock time; default now) until it is done or
        ``stop`` (a threading.Event) is set."""
        started = self.clock() if started is None else started
        try:
            for step in self.schedule:
                if stop.wait(max(0.0, started + step.at - self.clock())):
                    return
                getattr(self, "_" + step.scenario.replace("-", "_"))(step, stop)
                self.played += 1
        except Exception as exc:  # recorded, and the command reports it as a failure
            self.error = exc
            self._record("injector-error", None, error=f"{type(exc).__name__}: {exc}")

    # -- what the metadata page says now -------------------------------------------------------

    def _partition(self, step):
        return self.metadata().partition(self.topic, step.partition)

    def _leader(self, step):
        state = self._partition(step)
        return state.leader if state is not None and state.online else None

    def _followers(self, step):
        state = self._partition(step)
        if state is None:
            return []
        return [b for b in state.replicas if b != state.leader]

    def _record(self, fault, step, **fields):
        if step is not None:
            fields = {"step": step.number, "partition": step.partition, **fields}
        event = self.log.write(fault=fault, **fields)
        self.on_event(event)
        return event

    def _kill(self, step, broker_id):
        pid = self.brokers.kill(broker_id)
        return self._record("kill", step, broker=broker_id, pid=pid)

    def _start(self, step, broker_id):
        pid = self.brokers.start(broker_id)
        return self._record("start", step, broker=broker_id, pid=pid)

    def _pause(self, step, broker_id):
        pid = self.brokers.pause(broker_id)
        return self._record("pause", step, broker=broker_id, pid=pid)

    def _resume(self, step, broker_id):
        pid = self.brokers.resume(broker_id)
        return self._record("resume", step, broker=broker_id, pid=pid)

    def _wait_for_leader(self, step, stop, timeout=LEADER_WAIT):
        deadline = self.clock() + timeout
        while self._leader(step) is None and self.clock() < deadline and not stop.is_set():
            time.sleep(_POLL)
        return self._leader(step)

    def _wait_for_full_isr(self, step, stop, timeout=ISR_WAIT):
        """Wait until the step partition's ISR holds all its replicas; whether it does."""
        deadline = self.clock() + timeout
        while not self._full_isr(step) and self.clock() < deadline and not stop.is_set():
            time.sleep(_POLL)
        return self._full_isr(step)

    def _full_isr(self, step):
        state = self._partition(step)
        return state is not None and state.online and set(state.isr) == set(state.replicas)

    def _target_leader(self, step):
        """The step partition's leader, or (offline) a live broker chosen by ``pick``."""
        leader = self._leader(step)
        if leader is None:
            leader = choose(self.brokers.pids(), step.pick)
        return leader

    # -- the scenarios (schedule.SCENARIOS) ------------------------------------------------------

    def _leader_kill_storm(self, step, stop):
        target = self._target_leader(step)
        if target is None:
            self._record("skipped", step, reason="no broker is running")
            return
        self._kill(step, target)
        stop.wait(step.downtime)
        self._start(step, target)

    def _rolling_sigterm(self, step, stop):
        broker = self.brokers.broker_ids[step.broker % len(self.brokers.broker_ids)]
        pid = self.brokers.terminate(broker)
        self._record("terminate", step, broker=broker, pid=pid)
        stop.wait(step.downtime)
        self._start(step, broker)

    def _pause_for(self, step, target, stop):
        """SIGSTOP ``target`` for the step's downtime (or until the run stops), then SIGCONT."""
        self._pause(step, target)
        stop.wait(step.downtime)
        self._resume(step, target)

    def _sigstop_follower(self, step, stop):
        target = choose([b for b in self._followers(step) if self.brokers.pid(b) is not None],
                        step.pick)
        if target is None:
            self._record("skipped", step, reason="the partition has no running follower")
            return
        self._pause_for(step, target, stop)

    def _sigstop_leader(self, step, stop):
        target = self._leader(step)
        if target is None:
            self._record("skipped", step, reason="the partition has no leader")
            return
        self._pause_for(step, target, stop)

    def _divergence(self, step, stop):
        leader = self._leader(step)
        if leader is None:
            self._record("skipped", step, reason="the partition has no leader")
            return
        followers = [b for b in self._followers(step) if self.brokers.pid(b) is not None]
        fetch_wait = max((self._fetch_wait(b) for b in followers), default=0.0)
        for follower in followers:
            self._pause(step, follower)
        try:
            # a fetch a follower sent just before it stopped waits at the leader up to its
            # max wait and would be answered with the records written now, which the
            # follower (its ring outlives the SIGSTOP, as a socket buffer would) appends on
            # SIGCONT and may lead with: wait until every such fetch has been answered
            stop.wait(fetch_wait + FETCH_WAIT_SLACK)
            written = self._write_divergent(step)
            self._record("divergent-writes", step, broker=leader, **written)
            self._kill(step, leader)
        finally:  # whatever failed, the followers must not stay stopped
            for follower in followers:
                self._resume(step, follower)
        stop.wait(step.downtime)
        self._start(step, leader)

    def _fetch_wait(self, broker_id):
        """Seconds ``broker_id``'s follower fetches may wait at a leader
        (``replica.fetch.wait.max.ms``, read-only, as DescribeConfigs shows it)."""
        admin = KafkaAdminClient(bootstrap_servers=self.data_dir)
        try:
            (result,) = admin.describe_configs([ConfigResource(
                ConfigResourceType.BROKER, str(broker_id), ["replica.fetch.wait.max.ms"])])
        finally:
            admin.close()
        (entry,) = result["configs"]
        return int(entry["value"]) / 1000

    def _write_divergent(self, step):
        """acks=1 records straight to the partition's leader: {acknowledged offsets, error}."""
        offsets, error = [], None
        producer = KafkaProducer(bootstrap_servers=self.data_dir, acks=1, retries=0,
                                 enable_idempotence=False, max_block_ms=2000,
                                 request_timeout_ms=2000, delivery_timeout_ms=3000)
        try:
            futures = [producer.send(self.topic, b"x%d:%06d" % (step.number, n),
                                     partition=step.partition)
                       for n in range(DIVERGENT_RECORDS)]
            for future in futures:
                try:
                    offsets.append(future.get(timeout=5).offset)
                except Exception as exc:  # one error names them all
                    error = f"{type(exc).__name__}: {exc}"
        finally:
            producer.close(timeout=5)
        return {"acknowledged": offsets, "error": error}

    def _page_cache_loss(self, step, stop):
        target = self._target_leader(step)
        if target is None:
            self._record("skipped", step, reason="no broker is running")
            return
        self._kill(step, target)
        broker_dir = dd.broker_dir(self.data_dir, target)
        prefix = self.topic + "-"
        dropped = {}
        for name in sorted(os.listdir(broker_dir)):
            if name.startswith(prefix) and name[len(prefix):].isdigit():
                dropped[name] = truncate_to_recovery_point(os.path.join(broker_dir, name))
        self._record("truncate", step, broker=target, dropped_bytes=dropped)
        stop.wait(step.downtime)
        self._start(step, target)

    def _unclean_election_on(self, step, stop):
        leader = self._leader(step)
        if leader is None:
            self._record("skipped", step, reason="the partition has no leader")
            return
        followers = [b for b in self._followers(step) if self.brokers.pid(b) is not None]
        for follower in followers:
            self._kill(step, follower)
        stop.wait(step.downtime)  # the leader goes on alone: the followers fall behind
        self._kill(step, leader)
        for follower in followers:
            self._start(step, follower)
        self._wait_for_leader(step, stop, timeout=step.downtime)
        self._record("leader", step, broker=self._leader(step))
        self._start(step, leader)
        self._record("isr", step, full=self._wait_for_full_isr(step, stop))

    _unclean_election_off = _unclean_election_on  # the topic config makes the difference

    def _segment_flip_follower(self, step, stop):
        target = choose([b for b in self._followers(step) if self.brokers.pid(b) is not None],
                        step.pick)
        self._flip_then_restart(step, stop, target, flip_batch_byte, LOG_SUFFIX,
                                "the partition has no running follower")

    def _segment_flip_leader(self, step, stop):
        self._flip_then_restart(step, stop, self._leader(step), flip_batch_byte, LOG_SUFFIX,
                                "the partition has no leader", everyone=True)

    def _txnindex_flip(self, step, stop):
        self._flip_then_restart(step, stop, self._leader(step), flip_file_byte,
                                TXN_INDEX_SUFFIX, "the partition has no leader")

    def _flip_then_restart(self, step, stop, target, flip, suffix, nobody, everyone=False):
        """Flip a byte (``flip(path, rng)``) of one of ``target``'s ``suffix`` files of the
        step's partition while it runs (chosen by the step's pick: the same every run),
        then after the downtime SIGKILL and restart it (``everyone``: every running
        replica of the partition at once, the target first, as a power cut would)."""
        if target is None:
            self._record("skipped", step, reason=nobody)
            return
        directory = os.path.join(dd.broker_dir(self.data_dir, target),
                                 f"{self.topic}-{step.partition}")
        paths = sorted(os.path.join(directory, n) for n in _listdir(directory)
                       if n.endswith(suffix) and os.path.getsize(os.path.join(directory, n)))
        rng = random.Random(f"{step.number}/{step.pick}")
        path = choose(paths, step.pick)
        flipped = None if path is None else flip(path, rng)
        if flipped is None:
            self._record("skipped", step, broker=target,
                         reason=f"no {suffix} file of the partition has bytes to flip")
            return
        self._record("flip", step, broker=target, pid=self.brokers.pid(target),
                     file=os.path.relpath(path, self.data_dir), **flipped)
        stop.wait(step.downtime)
        others = [b for b in self._followers(step) + [self._leader(step)]
                  if everyone and b is not None and b != target
                  and self.brokers.pid(b) is not None]
        victims = [target] + sorted(set(others))
        for broker in victims:
            self._kill(step, broker)
        for broker in victims:
            self._start(step, broker)


def _listdir(directory):
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def flip_batch_byte(path, rng):
    """Flip one byte that a batch's CRC covers (attributes to its end) in a whole batch
    of segment ``path`` chosen by ``rng``: ``{"position", "was", "now", "batch_base"}``,
    or None when the file holds no whole batch."""
    fd = os.open(path, os.O_RDWR)
    try:
        batches = [(position, len(view), BatchHeader(view).base_offset)
                   for position, view in iter_file_batches(fd, 0, os.fstat(fd).st_size)
                   if len(view) > HEADER_SIZE]
        if not batches:
            return None
        start, length, base = batches[rng.randrange(len(batches))]
        return dict(_flip_at(fd, start + rng.randrange(ATTRIBUTES_OFFSET, length), rng),
                    batch_base=base)
    finally:
        os.close(fd)


def flip_file_byte(path, rng):
    """Flip one byte anywhere in ``path``: ``{"position", "was", "now"}`` (None: empty)."""
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        return _flip_at(fd, rng.randrange(size), rng) if size else None
    finally:
        os.close(fd)


def _flip_at(fd, position, rng):
    (was,) = os.pread(fd, 1, position)
    now = was ^ (1 << rng.randrange(8))
    os.pwrite(fd, bytes([now]), position)
    return {"position": position, "was": was, "now": now}


def truncate_to_recovery_point(partition_dir):
    """Cut the partition's segment files back to its recovery-point checkpoint (the offset
    below which everything was fsynced): the batch holding it and every later one go,
    segments starting at or after it are deleted whole (the first one is kept, emptied).
    Returns the bytes of .log files dropped. Only for a partition whose broker is down."""
    name = os.path.basename(os.path.normpath(partition_dir))
    checkpoint = OffsetCheckpoint(os.path.join(partition_dir, RECOVERY_POINT_CHECKPOINT))
    recovery_point = checkpoint.read().get(name, 0)
    bases = sorted(base_offset_from_name(n) for n in os.listdir(partition_dir)
                   if n.endswith(LOG_SUFFIX))
    dropped = 0
    for base in bases:
        paths = segment_paths(partition_dir, base)
        path = paths[0]
        size = os.path.getsize(path)
        if base >= recovery_point and base != bases[0]:
            for each in paths:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(each)
            dropped += size
            continue
        cut = _position_of(path, size, recovery_point)
        if cut < size:
            os.truncate(path, cut)
            dropped += size - cut
    return dropped


def _position_of(path, size, offset):
    """The position of the first batch of ``path`` that ends at or after ``offset``, or of
    the first torn one (the file's size if there is neither)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for position, view in iter_file_batches(fd, 0, size):
            if len(view) < HEADER_SIZE or BatchHeader(view).last_offset >= offset:
                return position
    finally:
        os.close(fd)
    return size
