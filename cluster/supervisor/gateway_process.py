"""The Kafka wire gateway as a child of the supervisor (``ringlog cluster start --kafka-port``).

``GatewayProcess(data_dir, kafka_port, bind)`` runs ``ringlog gateway --data-dir D
--kafka-port P [--bind HOST]`` (as ``python -m cluster.tools.gateway_cmd``) with its output
in ``D/gateway.log`` (forked by this process's zygote of that module when it can:
``zygote``):
``start()`` once the brokers serve, waiting (bounded) until ``D/gateway.json`` names its pid
as serving (ClusterStartError with the log's tail otherwise); ``watch(now)`` from the
supervisor's watch loop restarts it after ``RestartBackoff`` when it died (a gateway has no
state: its clients reconnect, and with P=0 it takes the same ports again); ``stop()``
sends SIGTERM (SIGKILL after the timeout). ``stop_orphan(data_dir)`` stops a gateway whose
supervisor is gone (``ringlog cluster stop``).

Owner: the supervisor's thread.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

from cluster.metadata import data_dir as dd
from cluster.supervisor import zygote
from shm_ring.liveness import is_alive

log = logging.getLogger("cluster.supervisor.supervisor")

GATEWAY_COMMAND = (sys.executable, "-m", "cluster.tools.gateway_cmd")


def read_gateway_record(data_dir):
    """``D/gateway.json`` ({} if there is none): pid, start_time, host, ports, bootstrap,
    state."""
    return dd.read_json(os.path.join(data_dir, dd.GATEWAY_JSON)) or {}


def gateway_alive(record):
    pid, start_time = record.get("pid"), record.get("start_time")
    return isinstance(pid, int) and start_time is not None and is_alive(pid, start_time)


def stop_orphan(data_dir, timeout):
    """SIGTERM the gateway ``D/gateway.json`` names if it still runs, SIGKILL after
    ``timeout``; whether there was one."""
    record = read_gateway_record(data_dir)
    if not gateway_alive(record):
        return False
    os.kill(record["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while gateway_alive(record):
        if time.monotonic() >= deadline:
            os.kill(record["pid"], signal.SIGKILL)
            break
        time.sleep(0.02)
    return True


class GatewayProcess:
    """The supervised gateway (module doc)."""

    def __init__(self, data_dir, kafka_port, bind, *, backoff, start_timeout, stop_timeout,
                 tail, command=GATEWAY_COMMAND):
        self.data_dir = data_dir
        self.argv = list(command) + ["--data-dir", data_dir, "--kafka-port", str(kafka_port)]
        if bind is not None:
            self.argv += ["--bind", bind]
        self.log_path = os.path.join(data_dir, dd.GATEWAY_LOG)
        self.popen = None
        self.started_at = 0.0
        self.restart_at = None
        self._backoff = backoff
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._tail = tail  # path -> the last lines of a log

    @property
    def pid(self):
        return None if self.popen is None else self.popen.pid

    def running(self):
        return self.popen is not None and self.popen.poll() is None

    def spawn(self, now):
        with dd.private_umask():
            output = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                self.popen = zygote.fork(self.argv, output) or subprocess.Popen(
                    self.argv, stdin=subprocess.DEVNULL, stdout=output,
                    stderr=subprocess.STDOUT, start_new_session=True)
            finally:
                os.close(output)
        self.started_at = now
        log.info("started the Kafka gateway (pid %d): %s", self.popen.pid,
                 " ".join(self.argv))

    def start(self, now, error):
        """Spawn and wait until it serves; ``error(message)`` is the exception to raise."""
        self.spawn(now)
        deadline = time.monotonic() + self._start_timeout
        while True:
            record = read_gateway_record(self.data_dir)
            if record.get("pid") == self.popen.pid and record.get("state") == "serving":
                return record
            if self.popen.poll() is not None or time.monotonic() >= deadline:
                what = (f"exited with code {self.popen.returncode}" if self.popen.poll()
                        is not None else f"did not serve within {self._start_timeout} s")
                raise error(f"the Kafka gateway (pid {self.popen.pid}) {what}; last lines "
                            f"of {self.log_path}:\n{self._tail(self.log_path)}")
            time.sleep(0.02)

    def watch(self, now):
        """Restart a gateway that died, after its backoff; whether anything changed."""
        if self.popen is None:
            return False
        if self.restart_at is None and self.popen.poll() is not None:
            delay = self._backoff.crashed(self.started_at, now)
            self.restart_at = now + delay
            log.warning("the Kafka gateway (pid %d) exited with code %s; restarting it in "
                        "%.0f s; last lines of %s:\n%s", self.popen.pid, self.popen.returncode,
                        delay, self.log_path, self._tail(self.log_path))
            return True
        if self.restart_at is not None and now >= self.restart_at:
            self.restart_at = None
            self.spawn(now)
            return True
        return False

    def stop(self):
        self.restart_at = None
        if not self.running():
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(self._stop_timeout)
        except subprocess.TimeoutExpired:
            log.warning("the Kafka gateway (pid %d) did not stop within %.0f s of SIGTERM; "
                        "killing it", self.popen.pid, self._stop_timeout)
            self.popen.kill()
            self.popen.wait()

