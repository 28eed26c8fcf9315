"""``ringlog cluster start|stop|status``: run a cluster from the command line.

::

    ringlog cluster start --data-dir D [--brokers N] [--config server.properties]
                          [--override key=value ...] [--detach] [--restart-on-failure]
                          [--kafka-port P [--kafka-bind HOST]] [--dev]
    ringlog cluster stop --data-dir D
    ringlog cluster status --data-dir D

``start`` starts the brokers of data directory D, waits until they serve and prints the
cluster id, the brokers and their pids. A new D gets N brokers (ids 0..N-1, ``--brokers``,
default 1); a D whose cluster ran before starts with every broker it knows (its
``broker-<id>`` directories), and ``--brokers`` must then match their number or the start
is refused with one line naming both numbers (exit 2): a restart neither adds nor drops
brokers (``ringlog broker start|stop`` starts or stops one). Without ``--detach`` it stays
in the foreground until Ctrl-C or SIGTERM, then stops the cluster; with ``--detach`` a supervisor
process keeps the cluster in the background (its log: D/supervisor.log) and the command
returns. Either supervisor watches its brokers: a broker that exits on purpose (SIGTERM,
``ringlog broker stop|kill``) is ``stopped``, any other exit is logged as ``crashed``; with
``--restart-on-failure`` it restarts a crashed broker after 1 s, doubling per crash up to
60 s (reset once the broker had run 60 s). ``start`` on a D whose (watching) supervisor is
alive but some of whose brokers are down starts those brokers through it (``ringlog broker
start``'s way) and prints one line per broker started; with every broker running it
refuses as before. Broker settings come from a properties file (``--config``, as
``kafka-server-start.sh`` reads it) and ``--override`` pairs (these win). Starting again on
the same D keeps the cluster id and recovers every topic and record. ``--broker-command``
replaces ``python -m replica_proc`` (to run brokers under a profiler, say).
``--kafka-port P`` also runs the Kafka wire gateway (``ringlog gateway``) under the
supervisor: any Kafka client bootstraps from ``127.0.0.1:P`` (broker b on ``P + b``; P=0:
free ports), printed by ``start`` and ``status``; ``--kafka-bind`` listens elsewhere than
loopback (with a warning: PLAINTEXT). ``--dev`` starts with the ``dev`` profile
(cluster.config.profiles: no fsync, small segments, no initial rebalance delay; UNSAFE,
for tests only) under the file's and the overrides' settings.

``stop`` stops the cluster of D gracefully from any shell (SIGKILL after ``--timeout``),
removing its shared memory. ``status`` prints the supervisor, one row per broker (id, pid,
state: starting, serving, stopping, stopped or crashed, since when, and whether it is the
controller), the controller and the topics; it exits 0 when every broker of the cluster runs,
3 when some do not, 1 when D holds no cluster, 4 when D cannot be read.

One supervisor per D (its lock, ``D/supervisor.lock``): a ``start`` on a D another
supervisor holds exits 1 at once with one line naming the pid that holds it, and changes
nothing. A D that is a file, or not this user's, is one line and exit status 1 (status: 4)
from every subcommand. The supervisor runs with umask 077: D is 0700, its files 0600.
"""
from __future__ import annotations

import logging
import os
import select
import shlex
import subprocess
import sys
import time

from cluster.config import BrokerConfig, load_properties, parse_overrides
from cluster.config.profiles import apply_profile
from cluster.errors import BrokerNotAvailableError, InvalidConfigurationError, KafkaStorageError
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import broker_is_alive
from cluster.supervisor.broker_control import start_brokers
from cluster.supervisor.gateway_process import gateway_alive, read_gateway_record
from cluster.supervisor.supervisor import (
    BROKER_COMMAND,
    START_TIMEOUT,
    STOP_TIMEOUT,
    WATCHING_KINDS,
    BrokerCountError,
    DataDirInUseError,
    Supervisor,
    brokers_to_start,
    cluster_status,
    lock_or_explain,
    log_tail,
    override_args,
    read_record,
    serve_until_signalled,
    stop_cluster,
    supervising,
)
from cluster.tools.support import fail

#: Exit codes of ``status`` (as ``systemctl status``: 3 = not running, 4 = unknown).
STATUS_RUNNING, STATUS_NO_CLUSTER, STATUS_NOT_RUNNING, STATUS_UNKNOWN = 0, 1, 3, 4

_DETACH_MARGIN = 30.0


def add_arguments(parser):
    commands = parser.add_subparsers(dest="cluster_command", metavar="{start,stop,status}",
                                     required=True)
    start = commands.add_parser("start", help="start N brokers on a data directory")
    start.add_argument("--data-dir", required=True, help="the cluster's data directory")
    start.add_argument("--brokers", type=int, default=None,
                       help="number of brokers of a new data directory (default 1); a "
                            "cluster that ran before starts with all its brokers, and "
                            "--brokers must then match their number")
    start.add_argument("--config", help="broker properties file (server.properties)")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="broker property overriding the file (repeatable)")
    start.add_argument("--detach", action="store_true",
                       help="leave the cluster running in the background and return")
    start.add_argument("--broker-command", default=shlex.join(BROKER_COMMAND),
                       help="command line that runs one broker, before its --data-dir, "
                            "--broker-id and --override arguments (default: %(default)s); "
                            "e.g. to run brokers under a profiler")
    start.add_argument("--start-timeout", type=float, default=START_TIMEOUT,
                       help=f"seconds each broker may take to serve (default {START_TIMEOUT})")
    start.add_argument("--restart-on-failure", action="store_true",
                       help="restart a broker that crashed, after 1 s doubling to 60 s")
    start.add_argument("--kafka-port", type=int, metavar="P",
                       help="also serve Kafka clients on TCP: broker b on P + b (0: free "
                            "ports), bootstrap 127.0.0.1:P")
    start.add_argument("--kafka-bind", metavar="HOST",
                       help="the gateway's listen address (default 127.0.0.1; any other is "
                            "reachable without authentication)")
    stop = commands.add_parser("stop", help="stop the cluster of a data directory")
    start.add_argument("--dev", action="store_true",
                       help="the dev profile: no fsync, small segments, groups form at "
                            "once; UNSAFE, for tests only (cluster.config.profiles)")
    stop.add_argument("--data-dir", required=True)
    stop.add_argument("--timeout", type=float, default=STOP_TIMEOUT,
                      help=f"seconds before brokers still running are killed "
                           f"(default {STOP_TIMEOUT})")
    status = commands.add_parser("status", help="report the cluster of a data directory")
    status.add_argument("--data-dir", required=True)


def run(args):
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return {"start": _start, "stop": _stop, "status": _status}[args.cluster_command](args)


# -- start -----------------------------------------------------------------------------------

def _start(args):
    data_dir = os.path.abspath(args.data_dir)
    if args.brokers is not None and args.brokers < 1:
        print(f"--brokers must be at least 1, found {args.brokers}", file=sys.stderr)
        return 2
    if args.kafka_port is not None and not 0 <= args.kafka_port <= 65535:
        print(f"--kafka-port {args.kafka_port} is not a TCP port (0-65535)", file=sys.stderr)
        return 2
    if args.kafka_bind is not None and args.kafka_port is None:
        print("--kafka-bind needs --kafka-port", file=sys.stderr)
        return 2
    try:
        config = load_properties(args.config) if args.config else {}
        if "broker.id" in config:  # Kafka's stock server.properties sets one
            print(f"ignoring broker.id={config.pop('broker.id')} from {args.config}: each "
                  f"broker gets its id from the supervisor",
                  file=sys.stderr)
        config.update(parse_overrides(args.override))
        if args.dev:
            config = apply_profile("dev", config)
        if "broker.id" in config:
            raise InvalidConfigurationError(
                f"--override broker.id={config['broker.id']}: each broker gets its id "
                f"from the supervisor")
        BrokerConfig(config, data_dir=data_dir)
    except (OSError, InvalidConfigurationError) as exc:
        fail(exc, "bad broker configuration: ")
        return 2
    try:
        dd.check_data_dir(data_dir)
    except KafkaStorageError as exc:
        return fail(exc)
    try:
        broker_ids = brokers_to_start(data_dir, args.brokers)
    except BrokerCountError as exc:
        print(f"--brokers {args.brokers}: {exc}", file=sys.stderr)
        return 2
    except DataDirInUseError as exc:  # the one line the supervisor's own lock_or_explain prints
        print(exc, file=sys.stderr, flush=True)
        return 1
    dd.set_private_umask()  # this process is the supervisor, or starts it
    missing = _missing_brokers(data_dir, broker_ids)
    if missing:
        return _start_missing(args, data_dir, missing)
    if args.detach:
        return _start_detached(args, data_dir, config)
    supervisor = Supervisor(data_dir, broker_ids, config, kind="foreground",
                            broker_command=shlex.split(args.broker_command),
                            start_timeout=args.start_timeout,
                            restart_on_failure=args.restart_on_failure,
                            kafka_port=args.kafka_port, kafka_bind=args.kafka_bind)
    if not lock_or_explain(supervisor):
        return 1
    code = serve_until_signalled(supervisor, on_started=_print_foreground)
    if code == 0:  # a signal stopped it: say where it stopped and how to go on
        print(f"stopped cluster {dd.read_cluster_id(data_dir)} in {data_dir} on a signal; its "
              f"data is kept; start it again with: ringlog cluster start --data-dir "
              f"{data_dir}", flush=True)
    return code


def _missing_brokers(data_dir, broker_ids):
    """The brokers (of the record and ``broker_ids``) that are down while a watching
    supervisor serves ``data_dir``; [] otherwise: a start then goes the usual way (and with
    a supervisor still starting the cluster, or every broker up, gets DataDirInUseError)."""
    record = read_record(data_dir)
    if (record.get("supervisor") not in WATCHING_KINDS or not supervising(record)
            or record.get("state") != "serving"):
        return []
    ids = sorted(set(record.get("brokers", [])) | set(broker_ids))
    return [b for b in ids if not broker_is_alive(data_dir, b)]


def _start_missing(args, data_dir, missing):
    """Have the running supervisor start the ``missing`` brokers; one line per broker."""
    record = read_record(data_dir)
    if args.config or args.override or args.restart_on_failure:
        print(f"ignoring --config, --override and --restart-on-failure: the running supervisor "
              f"(pid {record.get('supervisor_pid')}) starts brokers with its own settings",
              file=sys.stderr)
    try:
        started = start_brokers(data_dir, missing, timeout=args.start_timeout)
    except BrokerNotAvailableError as exc:
        return fail(exc)
    for broker_id, pid in sorted(started.items()):
        print(f"started broker {broker_id} (pid {pid}) of cluster {record.get('cluster_id')} "
              f"in {data_dir}", flush=True)
    return 0


def _print_foreground(supervisor):
    _print_started(supervisor.data_dir, read_record(supervisor.data_dir))
    print("running in the foreground; Ctrl-C or SIGTERM stops the cluster", flush=True)


def _start_detached(args, data_dir, config):
    """Start the detached supervisor and wait until it serves. Until it holds the supervisor
    lock its stderr is a pipe to this process (a loser's one line arrives here); then it
    moves its output to D/supervisor.log, which ends the pipe."""
    argv = [sys.executable, "-m", "cluster.supervisor.supervisor", "--data-dir", data_dir,
            "--start-timeout", str(args.start_timeout), "--broker-command", args.broker_command]
    if args.brokers is not None:
        argv += ["--brokers", str(args.brokers)]
    if args.restart_on_failure:
        argv.append("--restart-on-failure")
    if args.kafka_port is not None:
        argv += ["--kafka-port", str(args.kafka_port)]
    if args.kafka_bind is not None:
        argv += ["--kafka-bind", args.kafka_bind]
    argv += override_args(config)
    log_path = os.path.join(data_dir, dd.SUPERVISOR_LOG)
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + args.start_timeout + _DETACH_MARGIN
    before_lock = _read_to_end(child.stderr, deadline)
    while True:
        record = read_record(data_dir)
        if record.get("supervisor_pid") == child.pid and record.get("state") == "serving":
            print(before_lock, end="", file=sys.stderr)  # warnings, if any
            _print_started(data_dir, record)
            return 0
        if child.poll() is not None:
            if before_lock:  # it stopped before taking the lock: its own words say why
                print(before_lock, end="", file=sys.stderr)
            else:
                print(f"the cluster did not start (supervisor exited with code "
                      f"{child.returncode}); last lines of {log_path}:\n{log_tail(log_path)}",
                      file=sys.stderr)
            return 1
        if time.monotonic() >= deadline:
            print(f"the cluster did not start within {args.start_timeout} s (supervisor pid "
                  f"{child.pid} still running; `ringlog cluster stop --data-dir {data_dir}` "
                  f"stops it); last lines of {log_path}:\n{log_tail(log_path)}",
                  file=sys.stderr)
            return 1
        time.sleep(0.05)


def _read_to_end(stream, deadline):
    """What ``stream`` (a pipe) carries until its writer closes it or ``deadline``; closes
    it."""
    chunks = []
    with stream:
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([stream], [], [], left)[0]:
                break
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _print_started(data_dir, record):
    pids = record.get("pids", {})
    print(f"cluster id: {record.get('cluster_id')}")
    print(f"data dir (bootstrap servers): {data_dir}")
    print(f"brokers: {len(pids)}")
    for broker_id, pid in sorted(pids.items(), key=lambda item: int(item[0])):
        print(f"  broker {broker_id}: pid {pid}")
    print(f"supervisor: pid {record.get('supervisor_pid')} ({record.get('supervisor')})",
          flush=True)
    if record.get("gateway_pid"):
        _print_gateway(data_dir)


def _print_gateway(data_dir):
    """The Kafka gateway's addresses, from D/gateway.json."""
    gateway = read_gateway_record(data_dir)
    if not gateway:
        return
    alive = gateway_alive(gateway) and gateway.get("state") == "serving"
    ports = ", ".join(f"broker {b} {gateway['host']}:{p}"
                      for b, p in sorted(gateway.get("ports", {}).items(),
                                         key=lambda item: int(item[0])))
    print(f"kafka gateway: pid {gateway.get('pid')}, "
          f"{'serving' if alive else 'not running'}; bootstrap.servers "
          f"{gateway.get('bootstrap')} ({ports})", flush=True)


# -- stop and status -------------------------------------------------------------------------

def _stop(args):
    data_dir = os.path.abspath(args.data_dir)
    try:
        stopped = stop_cluster(data_dir, timeout=args.timeout)
    except KafkaStorageError as exc:
        return fail(exc)
    cluster_id = dd.read_cluster_id(data_dir)
    if stopped:
        print(f"stopped brokers {stopped} of cluster {cluster_id} in {data_dir}")
    else:
        print(f"no broker was running in {data_dir}")
    return 0


def _status(args):
    try:
        status = cluster_status(args.data_dir)
    except KafkaStorageError as exc:
        fail(exc)
        return STATUS_UNKNOWN
    if status["cluster_id"] is None:
        print(f"no cluster in {status['data_dir']} (no {dd.META_PROPERTIES})")
        return STATUS_NO_CLUSTER
    print(f"cluster id: {status['cluster_id']}")
    print(f"data dir (bootstrap servers): {status['data_dir']}")
    supervisor = status["supervisor"]
    if supervisor is not None:
        print(f"supervisor: pid {supervisor['pid']} ({supervisor['kind']}), "
              f"{'running' if supervisor['alive'] else 'not running'}")
    _print_brokers(status["brokers"], status.get("controller_id", -1))
    _print_gateway(status["data_dir"])
    if "controller_id" in status:
        topics = status["topics"]
        print(f"controller: broker {status['controller_id']} (metadata version "
              f"{status['version']})")
        print(f"topics: {len(topics)}, partitions: {sum(topics.values())}, offline "
              f"partitions: {status['offline']}")
    brokers = status["brokers"].values()
    running = bool(status["brokers"]) and all(b["alive"] for b in brokers)
    return STATUS_RUNNING if running else STATUS_NOT_RUNNING


BROKER_COLUMNS = ("BROKER", "PID", "STATE", "SINCE", "CONTROLLER")


def _print_brokers(brokers, controller_id):
    """One row per broker, Kafka tools' way: upper-case headers, "-" for unknown."""
    rows = [BROKER_COLUMNS]
    for broker_id, broker in brokers.items():
        since = broker["since"]
        state = broker["state"] or "-"
        if broker["exit"] and state in ("stopped", "crashed"):
            state = f"{state} ({broker['exit']})"
        rows.append((str(broker_id), str(broker["pid"] or "-"), state,
                     "-" if since is None else time.strftime("%Y-%m-%d %H:%M:%S",
                                                             time.localtime(since)),
                     "yes" if broker_id == controller_id else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(BROKER_COLUMNS))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
