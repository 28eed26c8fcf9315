"""The supervisor: the broker processes of one data directory, started, watched, stopped.

``Supervisor(data_dir, broker_ids, config)`` is what ``Cluster`` and ``ringlog cluster
start`` run on. ``start()``:

1. takes the data directory's supervisor lock before anything else (``lock()``: creates D
   0700 if need be, then an exclusive flock on ``D/supervisor.lock``, held until ``stop()``
   ends): one supervisor per D, so of two starts at once exactly one goes on and the other
   gets DataDirInUseError naming the pid that holds the lock, having changed nothing;
   then refuses if a broker of D still runs (an orphan of a killed supervisor: its broker
   lock is held);
2. reads the cluster id from ``D/meta.properties``, or writes a new one the first time;
   refuses (ClusterStartError naming the other directory) if this user runs the same
   cluster id from another directory (a copy of D: ``cluster.metadata.instance``);
3. removes this user's shared-memory objects of this cluster id left by dead processes
   (``shm_ring.cleanup_stale``; a stats page only if its process is gone,
   ``cluster.stats.reader.reap_dead``), makes this start's namespace (a fresh random token
   in ``D/shm.token``: every object is ``/ringlog.<cluster-id>.<token>.*``), records the
   instance and creates the metadata page;
4. starts one process per broker, ``python -m replica_proc --data-dir D --broker-id i
   [--override key=value ...]``, in its own session (Ctrl-C on a terminal reaches the
   supervisor, which stops the brokers in order), output to ``D/broker-<i>/broker.log``:
   forked by this process's zygote (``zygote``: started at the first start, before the lock
   is even checked, so it imports while the start goes on; shared by every later start of
   this process), which saves each broker the interpreter's start and its imports; exec'd
   as that command if the broker command is not ``python -m MODULE``, with
   ``RINGLOG_ZYGOTE=0``, or if the zygote is unavailable;
5. waits (bounded) until each broker's ``broker.json`` says ``serving`` under that
   process's pid, then until the metadata page names a controller and lists every broker
   alive: woken by each broker's ready pipe (``RINGLOG_READY_FD``: one byte once the page
   lists it alive, end of file if it dies), polling every 20 ms only for a broker command
   that does not speak it. On failure it stops what it started and raises
   ``ClusterStartError`` with the tail of the failing broker's log.

A supervisor run by ``ringlog cluster start`` (foreground or detached) then keeps watching
(``watch()`` every ``WATCH_INTERVAL`` s): a broker that exits on purpose (exit code 0 after
SIGTERM, or a ``ringlog broker stop|kill`` request naming its pid) is ``stopped``; any other
exit is ``crashed`` and logged with the tail of the broker's log; with ``restart_on_failure``
the broker is started again after ``RestartBackoff`` (1 s, doubling to 60 s). It also starts
a broker a ``start`` request (``requests``: ``ringlog broker start``, or ``cluster start`` on a
partly running cluster) asks for. An embedded supervisor (``Cluster``) has no watch loop: its
program starts and kills brokers itself.

With ``kafka_port`` (``ringlog cluster start --kafka-port P``) the supervisor also runs the
Kafka wire gateway once the brokers serve (``gateway_process``): restarted whenever it
dies, stopped first by ``stop()``.

``stop()`` sends SIGTERM to every broker (graceful: logs flushed and closed, listeners
unlinked), SIGKILLs any still running after ``stop_timeout``, unlinks the metadata page and
the instance record, sweeps the namespace's shared-memory objects, removes ``D/shm.token``
and lets go of the supervisor lock. Safe to call twice.

Files and directories the supervisor creates are private (0600 / 0700): it creates them
inside ``dd.private_umask()``, and starts brokers inside it too, so they inherit the umask
(the real broker also sets it itself); the embedding program's umask is left as it was.

``D/cluster.json`` records the supervisor for ``ringlog cluster stop|status`` run from
elsewhere: ``{"cluster_id", "brokers": [ids], "config": {key: value}, "pids": {id: pid},
"state": "starting|serving|stopping|stopped", "supervisor": "embedded|foreground|detached",
"supervisor_pid", "supervisor_start_time", "restart_on_failure", "broker_states": {id:
{"state": "starting|stopped|crashed", "since": epoch seconds, "pid", "exit": how it
exited}}}`` (``broker_states``: what the supervisor last did or saw of each broker).
``stop_cluster(data_dir)`` and ``cluster_status(data_dir)`` are those commands' logic: they
work from the files and the locks alone, whether the supervisor is alive or not.

Run as ``python -m cluster.supervisor.supervisor --data-dir D [--brokers N] [--override k=v ...]
[--broker-command CMD] [--restart-on-failure]`` it is the detached supervisor of ``ringlog
cluster start --detach``: it takes the supervisor lock, and only then moves its output to
``D/supervisor.log`` (so the one line of a start that lost the lock goes to the command's
stderr, never into the winner's log), starts the cluster, watches it until SIGTERM or SIGINT,
then stops it.

Ownership: a Supervisor belongs to the thread that made it; it is the parent of the broker
processes it execs (it reaps them); a forked broker's parent is the zygote, which reaps it
and reports its exit status to the supervisor (``zygote.ForkedProcess``: Popen's interface,
signals through a pidfd).
"""
from __future__ import annotations

import argparse
import fcntl
import logging
import os
import select
import shlex
import signal
import subprocess
import sys
import time

from cluster.config.properties import parse_overrides
from cluster.errors import KafkaError, KafkaStorageError
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import broker_is_alive
from cluster.metadata.instance import Instance, running_elsewhere
from cluster.metadata.lock_holders import describe_holders
from cluster.metadata.page import MetadataPage
from cluster.stats.reader import reap_dead
from cluster.supervisor import zygote
from cluster.supervisor.gateway_process import GatewayProcess, stop_orphan
from cluster.supervisor.requests import clear_request, read_request
from shm_ring.liveness import is_alive, process_start_time
from shm_ring.naming import SquattedNameError, cleanup_stale

log = logging.getLogger("cluster.supervisor.supervisor")  # also when run as __main__

START_TIMEOUT = 30.0
"""Seconds a broker may take to report ``serving`` (and the page to list it alive)."""

STOP_TIMEOUT = 30.0
"""Seconds a broker may take to stop after SIGTERM before it is SIGKILLed."""

LOG_TAIL_LINES = 30
"""Lines of a broker's log quoted when it fails to start."""

BROKER_COMMAND = (sys.executable, "-m", "replica_proc")
"""How a broker process is started; the supervisor appends its arguments."""

KINDS = ("embedded", "foreground", "detached")
"""Who runs the supervisor: a Python program (``Cluster``), ``ringlog cluster start`` in
the foreground, or the background process of ``--detach``."""

WATCH_INTERVAL = 0.2
"""Seconds between two rounds of a watching supervisor's ``watch()``."""

WATCHING_KINDS = ("foreground", "detached")
"""Supervisors that run the watch loop (``ringlog cluster start``): they notice brokers that
exit, take requests (``requests``) and may restart crashed brokers."""

RESTART_BACKOFF = 1.0
"""Seconds before the first restart of a crashed broker (``--restart-on-failure``)."""

RESTART_BACKOFF_MAX = 60.0
"""The longest wait before a restart: the backoff doubles per crash up to this."""

RESTART_RESET_AFTER = 60.0
"""A broker that ran this many seconds before it crashed restarts after RESTART_BACKOFF
again (its earlier crashes are forgotten)."""

_WAIT_STEP = 0.02

_READY_WAIT = 0.5
"""Longest wait on brokers' ready pipes before the start looks at broker.json and the page
again (a byte or a broker's exit ends it sooner)."""


class ClusterStartError(RuntimeError):
    """The cluster (or one broker) did not come up; the message quotes the log."""


class DataDirInUseError(ClusterStartError):
    """Another supervisor holds the data directory's supervisor lock (one line: the
    directory, who holds the lock, and the commands that report and stop it)."""


class BrokerCountError(ValueError):
    """A start asked for a number of brokers other than the data directory's cluster has
    (one line naming both numbers)."""


def brokers_to_start(data_dir, brokers=None):
    """The broker ids a start of ``data_dir`` runs. The data directory knows its brokers
    (its ``broker-<id>`` directories): a cluster that ran before starts with all of them;
    ``brokers`` (a count) must then match, or BrokerCountError names both numbers (adding
    brokers to a cluster, or leaving some out, is not what a restart does: ``ringlog broker
    start|stop`` starts or stops one). A new data directory starts ``brokers`` brokers (ids
    0..brokers-1, one if None)."""
    known = dd.broker_ids(data_dir)
    if not known:
        return list(range(1 if brokers is None else brokers))
    if brokers is None or brokers == len(known):
        return known
    # a supervisor starting this directory now has made some of its broker directories:
    # that start, not a count, is what stands in the way (DataDirInUseError says whose)
    os.close(lock_data_dir(data_dir))
    raise BrokerCountError(
        f"the cluster in {data_dir} has {len(known)} broker{'s' if len(known) > 1 else ''} "
        f"(ids {', '.join(map(str, known))}), not the {brokers} asked for: leave the broker "
        f"count out to start all {len(known)}, or use a new data directory for a cluster of "
        f"{brokers}; a restart neither adds nor drops brokers")


def lock_data_dir(data_dir):
    """Create D if need be (0700) and take its supervisor lock: the descriptor holding it.

    DataDirInUseError if another open file description holds it (another supervisor, or a
    Supervisor of this process); KafkaStorageError if D is not a usable directory.
    """
    dd.make_data_dir(data_dir)
    path = os.path.join(data_dir, dd.SUPERVISOR_LOCK)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, dd.FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, BlockingIOError):
            raise DataDirInUseError(
                f"a cluster supervisor is already running on {data_dir}: {path} is "
                f"{describe_holders(path)}; `ringlog cluster status --data-dir {data_dir}` "
                f"reports it, `ringlog cluster stop --data-dir {data_dir}` stops it") from None
        raise
    return fd


def override_args(config):
    """``--override key=value`` arguments for ``config`` (Kafka's names -> values)."""
    args = []
    for key, value in config.items():
        args += ["--override", f"{key}={format_value(value)}"]
    return args


def format_value(value):
    """A config value as a properties file writes it (booleans as ``true``/``false``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def open_log(path):
    """A descriptor appending to the log file at ``path``, created 0600."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, dd.FILE_MODE)


def log_tail(path, lines=LOG_TAIL_LINES):
    """The last ``lines`` lines of the file at ``path`` ("" if there is none)."""
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - 64 * 1024))
            text = file.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class RestartBackoff:
    """When to restart one broker that keeps crashing: ``initial`` seconds after a crash,
    doubling with each further crash up to ``maximum``; a broker that had run ``reset_after``
    seconds when it crashed starts over at ``initial``. Pure arithmetic on the monotonic
    times the caller passes; owned by the Supervisor's watch loop."""

    def __init__(self, initial=RESTART_BACKOFF, maximum=RESTART_BACKOFF_MAX,
                 reset_after=RESTART_RESET_AFTER):
        self.initial, self.maximum, self.reset_after = initial, maximum, reset_after
        self.crashes = 0

    def crashed(self, started_at, now):
        """Count a crash at ``now`` of a broker started at ``started_at``; the seconds to
        wait before restarting it."""
        if now - started_at >= self.reset_after:
            self.crashes = 0
        self.crashes += 1
        return min(self.maximum, self.initial * 2 ** (self.crashes - 1))


def describe_exit(returncode):
    """``exit code 3`` or ``killed by SIGKILL`` for a Popen return code."""
    if returncode is not None and returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    if returncode == zygote.EXIT_UNKNOWN:
        return f"exit code {returncode} (or unknown: the zygote that forked it exited first)"
    return f"exit code {returncode}"


class BrokerProcess:
    """One broker child process and its log file; owned by the Supervisor that started it.
    ``exit_seen``: the supervisor has handled its exit (``Supervisor.watch``)."""

    def __init__(self, broker_id, popen, log_path, started_at):
        self.broker_id = broker_id
        self.popen = popen
        self.log_path = log_path
        self.started_at = started_at
        self.exit_seen = False
        self.ready_fd = None  # the supervisor's end of its ready pipe, while waited on
        self.ready_seen = False  # its ready byte (or end of file) came

    def close_ready(self):
        if self.ready_fd is not None:
            fd, self.ready_fd = self.ready_fd, None
            os.close(fd)

    @property
    def pid(self):
        return self.popen.pid

    def running(self):
        return self.popen.poll() is None

    def __repr__(self):
        return f"BrokerProcess({self.broker_id}, pid={self.pid}, running={self.running()})"


class Supervisor:
    """The broker processes of one data directory (see the module doc).

    ``config``: broker config for every broker, Kafka's names -> values (passed as
    ``--override``); ``broker_command``: the argv prefix that runs a broker;
    ``restart_on_failure``: ``watch()`` restarts a crashed broker after ``RestartBackoff``.
    ``clock``: monotonic seconds (the backoff's), injectable for tests.
    """

    def __init__(self, data_dir, broker_ids, config=None, *, broker_command=BROKER_COMMAND,
                 start_timeout=START_TIMEOUT, stop_timeout=STOP_TIMEOUT, kind="embedded",
                 restart_on_failure=False, clock=time.monotonic, kafka_port=None,
                 kafka_bind=None, use_zygote=True):
        if kind not in KINDS:
            raise ValueError(f"supervisor kind must be one of {KINDS}, found {kind!r}")
        self.data_dir = os.path.abspath(os.fspath(data_dir))
        self.broker_ids = sorted(broker_ids)
        if not self.broker_ids or len(set(self.broker_ids)) != len(self.broker_ids):
            raise ValueError(f"broker ids must be distinct and at least one, found "
                             f"{list(broker_ids)}")
        for broker_id in self.broker_ids:
            dd.broker_dir(self.data_dir, broker_id)  # ValueError naming a bad id
        self.config = dict(config or {})
        if "broker.id" in self.config:
            raise ValueError(f"broker.id ({self.config['broker.id']!r}) is set per broker by "
                             f"the supervisor; leave it out of the cluster's config")
        self.broker_command = list(broker_command)
        self.use_zygote = use_zygote
        # a cluster that does not fsync (the dev profile): nor do the supervisor's own files
        self.durable = format_value(self.config.get("ringlog.fsync", True)) != "false"
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.kind = kind
        self.restart_on_failure = restart_on_failure
        self.clock = clock
        self.cluster_id = None
        self.namespace = None  # of this start: <cluster id>.<token> (shm_ring.naming)
        self.page = None
        self._instance = None
        self.state = "stopped"
        self._processes = {}  # broker id -> BrokerProcess
        self._broker_states = {}  # broker id -> {"state", "since" (epoch s), "pid", "exit"}
        self._backoffs = {}  # broker id -> RestartBackoff (restart_on_failure)
        self._restart_at = {}  # broker id -> clock time its restart is due
        self._lock_fd = None  # holds D/supervisor.lock from lock() until stop() ends
        self.gateway = None if kafka_port is None else GatewayProcess(
            self.data_dir, kafka_port, kafka_bind, backoff=RestartBackoff(),
            start_timeout=start_timeout, stop_timeout=stop_timeout, tail=log_tail)

    # -- cluster lifecycle ------------------------------------------------------------------

    def lock(self):
        """Take the data directory's supervisor lock now (``start()`` does it first if not
        done): DataDirInUseError naming the holder, KafkaStorageError if D is unusable.
        Released by ``stop()``."""
        if self._lock_fd is None:
            self._lock_fd = lock_data_dir(self.data_dir)

    def start(self):
        """Start every broker and wait until the cluster serves (see the module doc)."""
        if self.state != "stopped":
            raise RuntimeError(f"cluster in {self.data_dir} is {self.state}; stop it first")
        self.lock()
        if self.use_zygote:  # it imports the broker's modules while this start goes on
            zygote.warm(self.broker_command)
        try:
            running = running_brokers(self.data_dir)
            if running:
                raise ClusterStartError(
                    f"a cluster is already running in {self.data_dir}: brokers {running} "
                    f"(id: pid) hold their locks; `ringlog cluster stop --data-dir "
                    f"{self.data_dir}` first")
            self.cluster_id = dd.ensure_cluster_id(self.data_dir)
            self._refuse_a_copy_running()
            removed = cleanup_stale(self.cluster_id) + reap_dead(self.cluster_id)
            if removed:
                log.info("removed %d stale shared-memory objects of cluster %s", len(removed),
                         self.cluster_id)
            self.namespace = dd.new_shm_namespace(self.data_dir, self.cluster_id,
                                                  durable=self.durable)
            self._instance = Instance.create(self.namespace, self.data_dir)
            self._refuse_a_copy_running()  # one that started meanwhile: both may refuse
            self.page = MetadataPage.create(self.namespace)
        except BaseException:
            self._close_instance()
            self._unlock()
            raise
        self.state = "starting"
        try:
            self._write_record()
            for broker_id in self.broker_ids:
                self._spawn(broker_id, wait=True)
            self._wait_serving(self.broker_ids)
            if self.gateway is not None:
                self.gateway.start(self.clock(), ClusterStartError)
        except BaseException:
            self.stop()
            raise
        self.state = "serving"
        self._write_record()

    def stop(self):
        """Stop every broker (SIGTERM, SIGKILL after ``stop_timeout``), unlink the page and
        the cluster's shared-memory objects, release the supervisor lock. Safe to call
        twice."""
        if self.state == "stopped":
            self._unlock()  # taken by lock() for a start that never came
            return
        self.state = "stopping"
        self._write_record()
        if self.gateway is not None:
            self.gateway.stop()  # first: its clients' connections go before the brokers
        for process in self._processes.values():
            process.close_ready()
        processes = [p for p in self._processes.values() if p.running()]
        for process in processes:
            process.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for process in processes:
            try:
                process.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("broker %d (pid %d) did not stop within %.0f s of SIGTERM; "
                            "killing it", process.broker_id, process.pid, self.stop_timeout)
                process.popen.kill()
                process.popen.wait()
            self._set_broker_state(process.broker_id, "stopped", process.pid,
                                   describe_exit(process.popen.returncode))
        self._processes.clear()
        self._restart_at.clear()
        if self.page is not None:
            self.page.unlink()
            self.page.close()
            self.page = None
        self._close_instance()
        self.state = "stopped"
        self._write_record()
        self._unlock()

    def _refuse_a_copy_running(self):
        """ClusterStartError if this user runs this cluster id from another directory."""
        others = running_elsewhere(self.cluster_id, self.data_dir)
        if others:
            where, pid = others[0]
            raise ClusterStartError(
                f"cluster {self.cluster_id} is already running from {where} (supervisor pid "
                f"{pid}); {self.data_dir} holds the same cluster id (a copy of that "
                f"directory?) and cannot run beside it: `ringlog cluster stop --data-dir "
                f"{where}` first")

    def _close_instance(self):
        """Unlink this start's instance record and its namespace's objects, remove
        D/shm.token (stop, or a start that failed)."""
        if self._instance is not None:
            self._instance.close()
            self._instance = None
        if self.namespace is not None:
            cleanup_stale(self.namespace)
            reap_dead(self.namespace)
            dd.remove_shm_token(self.data_dir)
            self.namespace = None
    # -- single brokers -----------------------------------------------------------------------

    def start_broker(self, broker_id):
        """Start broker ``broker_id`` (again) and wait until it serves."""
        if self.state != "serving":
            raise RuntimeError(f"cluster in {self.data_dir} is {self.state}, not serving")
        process = self._processes.get(broker_id)
        if process is not None and process.running():
            raise ValueError(f"broker {broker_id} is already running (pid {process.pid})")
        if broker_id not in self.broker_ids:
            self.broker_ids = sorted(self.broker_ids + [broker_id])
        self._spawn(broker_id, wait=True)
        self._wait_serving([broker_id])
        self._write_record()

    def kill_broker(self, broker_id, sig=signal.SIGKILL):
        """Send ``sig`` (SIGKILL: no shutdown at all) to broker ``broker_id`` and reap it."""
        process = self._processes.get(broker_id)
        if process is None or not process.running():
            raise ValueError(f"broker {broker_id} is not running (running: "
                             f"{sorted(self.pids())})")
        process.popen.send_signal(sig)
        process.popen.wait()
        process.exit_seen = True
        self._set_broker_state(broker_id, "stopped", process.pid,
                               describe_exit(process.popen.returncode))
        self._write_record()

    def watch(self):
        """One round of the watch loop (``serve_until_signalled`` calls it every
        ``WATCH_INTERVAL`` s; the loop thread only). Handles brokers that exited since the
        last round: ``stopped`` if on purpose (exit code 0, or a stop/kill request naming
        that pid), else ``crashed``, logged, and with ``restart_on_failure`` restarted after
        the broker's backoff; starts brokers a ``start`` request asks for. Starts do not wait
        for the broker to serve: the next rounds see it serve or exit."""
        if self.state != "serving":
            return
        now = self.clock()
        changed = False
        for process in list(self._processes.values()):
            if not process.exit_seen and not process.running():
                process.exit_seen = True
                self._on_exit(process, now)
                changed = True
        for broker_id in sorted(set(dd.broker_ids(self.data_dir)) | set(self.broker_ids)):
            changed |= self._take_request(broker_id)
        if self.gateway is not None:
            changed |= self.gateway.watch(now)
        for broker_id, due in sorted(self._restart_at.items()):
            if now >= due:
                del self._restart_at[broker_id]
                log.warning("restarting broker %d (restart %d)", broker_id,
                            self._backoffs[broker_id].crashes)
                self._spawn(broker_id)
                changed = True
        if changed:
            self._write_record()

    def pids(self):
        """{broker id: pid} of the brokers running now."""
        return {b: p.pid for b, p in sorted(self._processes.items()) if p.running()}

    # -- internals ----------------------------------------------------------------------------

    def _on_exit(self, process, now):
        broker_id, how = process.broker_id, describe_exit(process.popen.returncode)
        request = read_request(self.data_dir, broker_id)
        if process.popen.returncode == 0 or (request.get("action") in ("stop", "kill")
                                             and request.get("pid") == process.pid):
            log.info("broker %d (pid %d) stopped (%s)", broker_id, process.pid, how)
            self._set_broker_state(broker_id, "stopped", process.pid, how)
            clear_request(self.data_dir, broker_id)
            return
        self._set_broker_state(broker_id, "crashed", process.pid, how)
        if not self.restart_on_failure:
            log.warning("broker %d (pid %d) crashed (%s); last lines of %s:\n%s\n`ringlog "
                        "cluster start --data-dir %s` starts it again", broker_id, process.pid,
                        how, process.log_path, log_tail(process.log_path, 10), self.data_dir)
            return
        delay = self._backoffs.setdefault(broker_id, RestartBackoff()).crashed(
            process.started_at, now)
        self._restart_at[broker_id] = now + delay
        log.warning("broker %d (pid %d) crashed (%s); restarting it in %.0f s; last lines of "
                    "%s:\n%s", broker_id, process.pid, how, delay, process.log_path,
                    log_tail(process.log_path, 10))

    def _take_request(self, broker_id):
        """Act on the request about ``broker_id``, if any; whether anything changed."""
        request = read_request(self.data_dir, broker_id)
        action = request.get("action")
        process = self._processes.get(broker_id)
        running = process is not None and process.running()
        if action == "start":
            self._restart_at.pop(broker_id, None)
            if not running:
                if broker_id not in self.broker_ids:
                    self.broker_ids = sorted(self.broker_ids + [broker_id])
                log.info("starting broker %d (requested by pid %s)", broker_id,
                         request.get("requested_by"))
                self._spawn(broker_id)
                self._write_record()  # before the request goes: its starter reads both
            clear_request(self.data_dir, broker_id)
            return not running
        if action in ("stop", "kill"):
            self._restart_at.pop(broker_id, None)
            if not running or request.get("pid") != process.pid:
                clear_request(self.data_dir, broker_id)  # not one of ours (any more)
        return False

    def _set_broker_state(self, broker_id, state, pid, how=None):
        self._broker_states[broker_id] = {"state": state, "since": time.time(), "pid": pid,
                                          "exit": how}

    def _unlock(self):
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            os.close(fd)

    def _spawn(self, broker_id, wait=False):
        """Start broker ``broker_id``; with ``wait`` (the caller waits for it to serve) give
        a real broker a ready pipe (``RINGLOG_READY_FD``) that ``_wait_serving`` waits on."""
        directory = dd.broker_dir(self.data_dir, broker_id)
        log_path = os.path.join(directory, dd.BROKER_LOG)
        args = ["--data-dir", self.data_dir, "--broker-id", str(broker_id)] + override_args(
            self.config)
        ready_r = ready_w = None
        if wait and zygote.zygote_module(self.broker_command) == BROKER_COMMAND[2]:
            ready_r, ready_w = os.pipe()
        with dd.private_umask():  # the directory, the log and the process (it inherits it)
            os.makedirs(directory, mode=dd.DIR_MODE, exist_ok=True)
            output = open_log(log_path)
            try:
                popen, how = None, "started"
                if self.use_zygote:
                    popen = zygote.fork(self.broker_command + args, output, ready_w)
                    how = "forked by its zygote"
                if popen is None:
                    env = None if ready_w is None else dict(
                        os.environ, **{zygote.READY_FD_ENV: str(ready_w)})
                    popen, how = subprocess.Popen(
                        self.broker_command + args, stdin=subprocess.DEVNULL, stdout=output,
                        stderr=subprocess.STDOUT, start_new_session=True, env=env,
                        pass_fds=() if ready_w is None else (ready_w,)), "started"
            except BaseException:
                if ready_r is not None:
                    os.close(ready_r)
                raise
            finally:
                os.close(output)
                if ready_w is not None:
                    os.close(ready_w)
        if broker_id in self._processes:
            self._processes[broker_id].close_ready()
        process = BrokerProcess(broker_id, popen, log_path, self.clock())
        process.ready_fd = ready_r
        self._processes[broker_id] = process
        self._set_broker_state(broker_id, dd.STATE_STARTING, popen.pid)
        log.info("%s broker %d (pid %d): %s", how, broker_id, popen.pid,
                 " ".join(self.broker_command + args))

    def _wait_serving(self, broker_ids):
        """Wait until each broker's broker.json says serving under its pid, then until the
        page lists them alive under a controller; woken by the brokers' ready pipes."""
        try:
            self._wait_serving_pipes(broker_ids)
        finally:
            for broker_id in broker_ids:
                self._processes[broker_id].close_ready()

    def _wait_serving_pipes(self, broker_ids):
        deadline = time.monotonic() + self.start_timeout
        pending = list(broker_ids)
        while pending:
            for broker_id in list(pending):
                process = self._processes[broker_id]
                if not process.running():
                    raise ClusterStartError(
                        f"broker {broker_id} (pid {process.pid}) exited with code "
                        f"{process.popen.returncode} while starting; last lines of "
                        f"{process.log_path}:\n{log_tail(process.log_path)}")
                state = dd.read_broker_state(self.data_dir, broker_id) or {}
                if state.get("pid") == process.pid and state.get("state") == dd.STATE_SERVING:
                    pending.remove(broker_id)
            if pending:
                if time.monotonic() >= deadline:
                    raise ClusterStartError(self._timeout_message(
                        pending, "did not report serving in broker.json"))
                self._wait_ready_bytes(pending, deadline)
        while True:
            image = self.page.read()
            missing = [b for b in broker_ids
                       if b not in image.brokers or not image.brokers[b].alive
                       or image.brokers[b].pid != self._processes[b].pid]
            if image.controller_id >= 0 and not missing:
                return
            if time.monotonic() >= deadline:
                what = (f"are not alive in the metadata page (controller "
                        f"{image.controller_id}, page version {image.version})")
                raise ClusterStartError(self._timeout_message(missing or broker_ids, what))
            self._wait_ready_bytes(missing or broker_ids, deadline)

    def _wait_ready_bytes(self, broker_ids, deadline):
        """Wait until one of ``broker_ids`` says it is ready (its ready byte, or end of file
        if it died), at most ``_READY_WAIT`` s; ``_WAIT_STEP`` s if one of them has no ready
        pipe (a broker command that does not speak it: then broker.json and the page are
        polled)."""
        fds = {}
        for broker_id in broker_ids:
            process = self._processes[broker_id]
            if process.ready_seen:
                continue
            if process.ready_fd is None:
                fds = None
                break
            fds[process.ready_fd] = process
        timeout = max(0.0, min(deadline - time.monotonic(),
                               _WAIT_STEP if not fds else _READY_WAIT))
        if not fds:
            time.sleep(timeout)
            return
        for fd in select.select(list(fds), [], [], timeout)[0]:
            os.read(fd, 1)  # b"r", or b"" from a broker that exited: the next check says
            fds[fd].ready_seen = True
            fds[fd].close_ready()

    def _timeout_message(self, broker_ids, what):
        parts = [f"brokers {broker_ids} {what} within {self.start_timeout} s"]
        for broker_id in broker_ids:
            path = self._processes[broker_id].log_path
            parts.append(f"last lines of {path}:\n{log_tail(path)}")
        return "\n".join(parts)

    def _write_record(self):
        pid, start_time = os.getpid(), process_start_time(os.getpid())
        dd.write_json(os.path.join(self.data_dir, dd.CLUSTER_JSON), {
            "cluster_id": self.cluster_id, "brokers": self.broker_ids,
            "config": {k: format_value(v) for k, v in self.config.items()},
            "pids": {str(b): p for b, p in self.pids().items()}, "state": self.state,
            "broker_states": {str(b): s for b, s in sorted(self._broker_states.items())},
            "restart_on_failure": self.restart_on_failure,
            "supervisor": self.kind, "supervisor_pid": pid,
            "supervisor_start_time": start_time,
            "gateway_pid": None if self.gateway is None else self.gateway.pid},
            durable=self.durable)

    def __repr__(self):
        return (f"Supervisor({self.data_dir!r}, brokers={self.broker_ids}, "
                f"state={self.state!r})")


# -- from another process: stop and status -----------------------------------------------------

def read_record(data_dir):
    """``D/cluster.json`` ({} if there is none)."""
    return dd.read_json(os.path.join(os.fspath(data_dir), dd.CLUSTER_JSON)) or {}


def supervisor_alive(record):
    """Whether the supervisor ``record`` (cluster.json) names is still running."""
    pid, start_time = record.get("supervisor_pid"), record.get("supervisor_start_time")
    return isinstance(pid, int) and start_time is not None and is_alive(pid, start_time)


def supervising(record):
    """Whether the supervisor ``record`` names runs and still holds its cluster (an embedded
    one's program lives on after ``stop()``)."""
    return supervisor_alive(record) and record.get("state") != "stopped"


def running_brokers(data_dir):
    """{broker id: pid per broker.json} of the brokers whose lock is held now."""
    return {b: (dd.read_broker_state(data_dir, b) or {}).get("pid")
            for b in dd.broker_ids(data_dir) if broker_is_alive(data_dir, b)}


def stop_cluster(data_dir, timeout=STOP_TIMEOUT):
    """Stop the cluster of ``data_dir`` from any process; return the broker ids stopped.

    A foreground or detached supervisor is asked to stop (SIGTERM) and waited for; brokers
    still running after that (an embedded or dead supervisor) get SIGTERM by the pid in
    their broker.json, SIGKILL after ``timeout``, and their processes are waited for until
    they are gone (SIGKILL at the same deadline); then the metadata page and the cluster's
    shared-memory objects are removed. KafkaStorageError (one line) if D is not a usable
    directory.
    """
    data_dir = os.path.abspath(os.fspath(data_dir))
    dd.check_data_dir(data_dir)
    namespace = dd.read_shm_namespace(data_dir)  # before a stopping supervisor removes it
    record = read_record(data_dir)
    before = running_brokers(data_dir)
    # A broker releases its lock a moment before its process exits: "stopped" means gone.
    processes = [(pid, process_start_time(pid)) for pid in before.values()
                 if isinstance(pid, int) and pid > 0]
    if (record.get("supervisor") in ("foreground", "detached") and supervisor_alive(record)
            and record["supervisor_pid"] != os.getpid()):
        os.kill(record["supervisor_pid"], signal.SIGTERM)
        deadline = time.monotonic() + timeout + START_TIMEOUT
        while supervisor_alive(record) and time.monotonic() < deadline:
            time.sleep(_WAIT_STEP)
    stop_orphan(data_dir, timeout)  # a gateway whose supervisor is gone
    remaining = running_brokers(data_dir)
    for pid in remaining.values():
        if isinstance(pid, int) and pid > 0:
            _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while remaining and time.monotonic() < deadline:
        time.sleep(_WAIT_STEP)
        remaining = running_brokers(data_dir)
    for pid in remaining.values():
        if isinstance(pid, int) and pid > 0:
            _signal(pid, signal.SIGKILL)
    alive = [(pid, start) for pid, start in processes
             if start is not None and is_alive(pid, start)]
    while alive and time.monotonic() < deadline:
        time.sleep(_WAIT_STEP)
        alive = [(pid, start) for pid, start in alive if is_alive(pid, start)]
    for pid, _start in alive:
        _signal(pid, signal.SIGKILL)
    if namespace is not None:  # the page, the listeners, ...: this user's objects only
        cleanup_stale(namespace)
        reap_dead(namespace)
        dd.remove_shm_token(data_dir)
    record = read_record(data_dir)  # a supervisor that stopped wrote its last record
    if record and record.get("state") != "stopped":
        record.update(state="stopped", pids={})
        dd.write_json(os.path.join(data_dir, dd.CLUSTER_JSON), record)
    return sorted(before)


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass  # it exited meanwhile


def cluster_status(data_dir):
    """What ``ringlog cluster status`` reports: a dict with ``cluster_id``, ``supervisor``
    ({kind, pid, alive} or None), ``brokers`` ({id: ``broker_status``}), and from the
    metadata page when it exists, ``controller_id``, ``version`` and ``topics`` (name ->
    partitions) and ``offline`` (partitions without a leader). KafkaStorageError (one line)
    if D is not a readable directory."""
    data_dir = os.path.abspath(os.fspath(data_dir))
    dd.check_data_dir(data_dir, writable=False)
    record = read_record(data_dir)
    status = {"data_dir": data_dir, "cluster_id": dd.read_cluster_id(data_dir),
              "supervisor": None, "brokers": {}}
    if record.get("supervisor_pid"):
        status["supervisor"] = {"kind": record.get("supervisor"),
                                "pid": record["supervisor_pid"],
                                "alive": supervisor_alive(record)}
    alive = running_brokers(data_dir)
    watched = status["supervisor"] is not None and status["supervisor"]["alive"]
    for broker_id in sorted(set(dd.broker_ids(data_dir)) | set(record.get("brokers", []))):
        seen = record.get("broker_states", {}).get(str(broker_id), {})
        status["brokers"][broker_id] = broker_status(data_dir, broker_id, broker_id in alive,
                                                     seen, watched)
    namespace = dd.read_shm_namespace(data_dir, status["cluster_id"])
    if namespace is not None:
        try:
            page = MetadataPage.open(namespace)
        except FileNotFoundError:
            page = None
        if page is not None:
            with page:
                image = page.read()
            status["controller_id"] = image.controller_id
            status["version"] = image.version
            status["topics"] = {t.name: len(t.partitions) for t in image.topics.values()}
            status["offline"] = sum(not p.online for t in image.topics.values()
                                    for p in t.partitions)
    return status


def broker_status(data_dir, broker_id, alive, seen, watched):
    """One broker's row of ``cluster status``: {pid, state, since (epoch seconds, None if
    unknown), alive, exit}. The state is broker.json's ``starting``, ``serving`` or
    ``stopping`` while the broker runs; once its lock is free, ``stopped`` (it exited on
    purpose: SIGTERM, ``ringlog broker stop|kill``, ``cluster stop``) or ``crashed`` (any
    other exit); None if it never ran.

    A running broker (``alive``: its lock is held) is in broker.json's state, since
    broker.json last changed. Otherwise what the supervisor saw (``seen``: its record of
    the broker) wins for that pid; a broker the live supervisor (``watched``) has just spawned
    is ``starting``; failing both, broker.json's last state tells: ``stopping`` means it
    shut down (``stopped``), anything else that it died (``crashed``, since unknown)."""
    path = os.path.join(dd.broker_dir(data_dir, broker_id), dd.BROKER_JSON)
    state = dd.read_broker_state(data_dir, broker_id) or {}
    row = {"pid": state.get("pid"), "state": state.get("state"), "since": None,
           "alive": alive, "exit": None}
    if alive:
        try:
            row["since"] = os.stat(path).st_mtime
        except FileNotFoundError:
            pass  # between its lock and its first broker.json
        return row
    if seen.get("state") in ("stopped", "crashed") and seen.get("pid") == row["pid"] or (
            watched and seen.get("state") == dd.STATE_STARTING):
        row.update(pid=seen.get("pid"), state=seen["state"], since=seen.get("since"),
                   exit=seen.get("exit"))
    elif row["state"] is not None:
        row["state"] = "stopped" if row["state"] == dd.STATE_STOPPING else "crashed"
    return row


# -- the detached supervisor process ------------------------------------------------------------

def lock_or_explain(supervisor):
    """``supervisor.lock()``; False, with the one-line reason on stderr, if it cannot be
    taken (another supervisor holds it, or D is not a usable directory)."""
    try:
        supervisor.lock()
    except (DataDirInUseError, KafkaStorageError) as exc:
        print(exc, file=sys.stderr, flush=True)
        return False
    return True


def serve_until_signalled(supervisor, on_started=None, poll=WATCH_INTERVAL):
    """Start ``supervisor``, call ``on_started(supervisor)``, keep the cluster, running
    ``supervisor.watch()`` every ``poll`` seconds, until SIGTERM or SIGINT, then stop it.
    Returns 0 (1 if the start failed: the error is logged)."""
    stop_requested = []

    def request_stop(signum, frame):
        stop_requested.append(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM,
                                                                   signal.SIGINT)}
    try:
        try:
            supervisor.start()
        except (ClusterStartError, KafkaError, SquattedNameError) as exc:
            log.error("%s", exc)
            return 1
        if on_started is not None:
            on_started(supervisor)
        while not stop_requested:
            supervisor.watch()
            time.sleep(poll)
        log.info("signal %d: stopping the cluster", stop_requested[0])
        return 0
    finally:
        supervisor.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m cluster.supervisor.supervisor",
                                     description="the detached supervisor of a cluster")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--brokers", type=int, default=None,
                        help="broker count of a new data directory (default: every broker "
                             "the data directory knows, or 1)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--start-timeout", type=float, default=START_TIMEOUT)
    parser.add_argument("--broker-command", default=shlex.join(BROKER_COMMAND))
    parser.add_argument("--restart-on-failure", action="store_true")
    parser.add_argument("--kafka-port", type=int, default=None)
    parser.add_argument("--kafka-bind", default=None)
    args = parser.parse_args(argv)
    dd.set_private_umask()
    try:
        broker_ids = brokers_to_start(args.data_dir, args.brokers)
    except (BrokerCountError, DataDirInUseError) as exc:
        print(exc, file=sys.stderr, flush=True)
        return 1
    supervisor = Supervisor(args.data_dir, broker_ids,
                            parse_overrides(args.override), kind="detached",
                            broker_command=shlex.split(args.broker_command),
                            start_timeout=args.start_timeout,
                            restart_on_failure=args.restart_on_failure,
                            kafka_port=args.kafka_port, kafka_bind=args.kafka_bind)
    if not lock_or_explain(supervisor):
        return 1
    try:
        output = open_log(os.path.join(supervisor.data_dir, dd.SUPERVISOR_LOG))
    except OSError as exc:
        supervisor.stop()
        print(f"cannot open the supervisor log: {exc}", file=sys.stderr)
        return 1
    os.dup2(output, sys.stdout.fileno())
    os.dup2(output, sys.stderr.fileno())  # the end of what `cluster start --detach` reads
    os.close(output)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return serve_until_signalled(supervisor)


if __name__ == "__main__":
    sys.exit(main())
