"""One broker of a running cluster, from another process: start, stop, kill (``ringlog broker``
and the ``ringlog cluster start`` that starts the missing brokers of a partly running cluster).

Like ``kafka-server-start.sh`` / ``kafka-server-stop.sh``, these act on one broker while the
others keep serving:

- ``stop_broker``: SIGTERM to the broker's pid (read from its broker.json while its lock is
  held), then wait (bounded) until the lock is free and the process gone; the broker shuts
  down cleanly (broker.json ``stopping``, logs flushed, leadership moved away).
- ``kill_broker``: SIGKILL, then the same wait (a crash on purpose).
- ``start_broker``: the live supervisor of D starts it. The caller writes a *request*
  (``D/broker-<id>/supervisor.request``) and the supervisor's watch loop (``Supervisor.watch``,
  every ``WATCH_INTERVAL``) spawns the broker exactly as at cluster start (same command,
  config, log file and session); the caller waits until the broker's broker.json says
  ``serving`` under the pid the supervisor recorded in cluster.json.

Why the supervisor starts brokers and this module never does: the supervisor owns the
metadata page and the cluster's shared memory, is the parent that reaps its brokers, and is
what ``cluster stop`` stops. A broker started by a short-lived command would be an orphan
with no parent watching it; so with no live supervisor, or one embedded in a Python program
(``Cluster``, which has no watch loop: call ``Cluster.start_broker``), ``start_broker`` refuses
and names the command to run instead.

Stop and kill also write a request naming the pid they signal, so the supervisor counts that
exit as deliberate (``stopped``), never as a crash to restart. A broker that exits with code
0 (a SIGTERM from anywhere) is ``stopped`` too.

The request file is ``requests``'s. Any process may call these functions; each
returns the pid it acted on or raises ``BrokerNotAvailableError`` (Kafka's code 8) whose
message names the data directory, the broker id and the command to run next.
"""
from __future__ import annotations

import os
import signal
import time

from cluster.errors import BrokerNotAvailableError
from cluster.metadata import data_dir as dd
from cluster.metadata.broker_lock import broker_is_alive
from cluster.supervisor.requests import read_request, write_request
from cluster.supervisor.supervisor import (
    START_TIMEOUT,
    STOP_TIMEOUT,
    WATCHING_KINDS,
    log_tail,
    read_record,
    supervising,
)
from shm_ring.liveness import process_start_time

_WAIT_STEP = 0.02

def running_pid(data_dir, broker_id):
    """The pid of broker ``broker_id`` if it runs now (its lock held), else None."""
    if not broker_is_alive(data_dir, broker_id):
        return None
    pid = (dd.read_broker_state(data_dir, broker_id) or {}).get("pid")
    return pid if isinstance(pid, int) and pid > 0 else None


def gone(pid):
    """Whether process ``pid`` has exited (a zombie counts as gone)."""
    return process_start_time(pid) is None


# -- stop and kill ------------------------------------------------------------------------------

def stop_broker(data_dir, broker_id, timeout=STOP_TIMEOUT):
    """SIGTERM broker ``broker_id`` and wait until it is gone; its pid."""
    return _signal_broker(data_dir, broker_id, "stop", signal.SIGTERM, timeout)


def kill_broker(data_dir, broker_id, timeout=STOP_TIMEOUT):
    """SIGKILL broker ``broker_id`` and wait until it is gone; its pid."""
    return _signal_broker(data_dir, broker_id, "kill", signal.SIGKILL, timeout)


def _signal_broker(data_dir, broker_id, action, sig, timeout):
    data_dir = os.path.abspath(os.fspath(data_dir))
    dd.check_data_dir(data_dir)
    pid = running_pid(data_dir, broker_id)
    if pid is None:
        raise BrokerNotAvailableError(
            f"broker {broker_id} of {data_dir} is not running (its lock "
            f"{dd.broker_dir(data_dir, broker_id)}/{dd.BROKER_LOCK} is free); `ringlog broker "
            f"start --data-dir {data_dir} --id {broker_id}` starts it")
    write_request(data_dir, broker_id, action, pid)
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass  # it exited meanwhile
    deadline = time.monotonic() + timeout
    while not gone(pid) or broker_is_alive(data_dir, broker_id):
        if time.monotonic() >= deadline:
            raise BrokerNotAvailableError(
                f"broker {broker_id} (pid {pid}) of {data_dir} did not stop within {timeout} s "
                f"of {signal.Signals(sig).name}; `ringlog broker kill --data-dir {data_dir} "
                f"--id {broker_id}` kills it")
        time.sleep(_WAIT_STEP)
    return pid


# -- start --------------------------------------------------------------------------------------

def start_broker(data_dir, broker_id, timeout=START_TIMEOUT):
    """Have the live supervisor of ``data_dir`` start broker ``broker_id``; wait until it
    serves; its pid. Several at once: ``start_brokers``."""
    return start_brokers(data_dir, [broker_id], timeout)[broker_id]


def start_brokers(data_dir, broker_ids, timeout=START_TIMEOUT):
    """``start_broker`` for each of ``broker_ids`` (all requested first, then waited for
    together): {broker id: pid}."""
    data_dir = os.path.abspath(os.fspath(data_dir))
    dd.check_data_dir(data_dir)
    record = read_record(data_dir)
    for broker_id in broker_ids:
        dd.broker_dir(data_dir, broker_id)  # ValueError naming a bad id
        pid = running_pid(data_dir, broker_id)
        if pid is not None:
            raise BrokerNotAvailableError(
                f"broker {broker_id} of {data_dir} is already running (pid {pid}); `ringlog "
                f"broker stop --data-dir {data_dir} --id {broker_id}` stops it")
    check_watching_supervisor(data_dir, record, broker_ids)
    for broker_id in broker_ids:
        write_request(data_dir, broker_id, "start")
    deadline = time.monotonic() + timeout
    started, pending = {}, list(broker_ids)
    while pending:
        record = read_record(data_dir)
        for broker_id in list(pending):
            pid = _serving_pid(data_dir, broker_id, record)
            if pid is not None:
                started[broker_id] = pid
                pending.remove(broker_id)
        if not pending:
            break
        if not supervising(record):
            raise BrokerNotAvailableError(
                f"the supervisor of {data_dir} (pid {record.get('supervisor_pid')}) exited "
                f"before brokers {pending} served; last lines of "
                f"{os.path.join(data_dir, dd.SUPERVISOR_LOG)}:\n"
                f"{log_tail(os.path.join(data_dir, dd.SUPERVISOR_LOG))}")
        for broker_id in pending:
            _check_not_crashed(data_dir, broker_id, record)
        if time.monotonic() >= deadline:
            raise BrokerNotAvailableError(
                f"brokers {pending} of {data_dir} did not serve within {timeout} s; `ringlog "
                f"cluster status --data-dir {data_dir}` shows their state, their logs are "
                f"{data_dir}/broker-<id>/{dd.BROKER_LOG}")
        time.sleep(_WAIT_STEP)
    return started


def check_watching_supervisor(data_dir, record, broker_ids):
    """BrokerNotAvailableError unless a supervisor with a watch loop runs on ``data_dir``."""
    brokers = len(set(record.get("brokers", [])) | set(broker_ids))
    if not supervising(record):
        orphans = {b: running_pid(data_dir, b) for b in dd.broker_ids(data_dir)}
        orphans = {b: pid for b, pid in orphans.items() if pid is not None}
        if orphans:
            raise BrokerNotAvailableError(
                f"cannot start brokers {list(broker_ids)} of {data_dir}: no supervisor runs "
                f"there and brokers {orphans} (id: pid) run without one; `ringlog cluster stop "
                f"--data-dir {data_dir}`, then `ringlog cluster start --data-dir {data_dir} "
                f"--brokers {brokers} --detach`")
        raise BrokerNotAvailableError(
            f"cannot start brokers {list(broker_ids)} of {data_dir}: no supervisor runs there "
            f"(a broker needs one); `ringlog cluster start --data-dir {data_dir} --brokers "
            f"{brokers} --detach` starts the cluster")
    if record.get("supervisor") not in WATCHING_KINDS:
        raise BrokerNotAvailableError(
            f"cannot start brokers {list(broker_ids)} of {data_dir}: its supervisor is "
            f"embedded in a Python program (pid {record.get('supervisor_pid')}), which starts "
            f"its brokers itself (Cluster.start_broker)")


def _serving_pid(data_dir, broker_id, record):
    """The pid the supervisor started broker ``broker_id`` under, once it serves."""
    pid = record.get("pids", {}).get(str(broker_id))
    state = dd.read_broker_state(data_dir, broker_id) or {}
    if pid is not None and state.get("pid") == pid and state.get("state") == dd.STATE_SERVING \
            and not read_request(data_dir, broker_id):
        return pid
    return None


def _check_not_crashed(data_dir, broker_id, record):
    """BrokerNotAvailableError, quoting its log, if the supervisor saw the broker it started
    for this request exit."""
    if read_request(data_dir, broker_id):
        return  # not taken up yet
    seen = record.get("broker_states", {}).get(str(broker_id), {})
    if seen.get("state") == "crashed":
        path = os.path.join(dd.broker_dir(data_dir, broker_id), dd.BROKER_LOG)
        raise BrokerNotAvailableError(
            f"broker {broker_id} (pid {seen.get('pid')}) of {data_dir} exited while starting "
            f"({seen.get('exit')}); last lines of {path}:\n{log_tail(path)}")
