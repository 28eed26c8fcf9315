"""Redis Streams, the durable log a Python user would otherwise pick: a redis-server the
suite starts in a temporary directory, on a unix socket only (``--port 0``), with the AOF on
and ``appendfsync everysec``; redis-py clients.

* channels are streams ``bench-<n>``, each with consumer group GROUP made before the start;
* record by record: XADD ``* v <value>`` in a non-transactional pipeline of
  ``PIPELINE`` commands (one round trip per ``PIPELINE`` records — the nearest thing to
  Kafka's batching a Redis user writes), read by XREADGROUP ``COUNT`` ``READ_COUNT``
  ``BLOCK`` ``BLOCK_MS`` and acknowledged by one XACK per stream and read;
* bulk: pipelines of ``payloads.bulk_records(size)`` XADDs (1,000 of 100 bytes: 100 KB);
* latency: one XADD per record, sent at once (no pipeline).

A producer given several streams fills a pipeline for one, then the next.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time

from perf.suite import latency, payloads

NAME = "redis_streams"
DESCRIPTION = ("redis-server, unix socket, AOF appendfsync everysec; pipelined XADD, "
               "XREADGROUP + XACK in a consumer group")
GROUP = "bench"
PIPELINE = 100
READ_COUNT = 10_000
BLOCK_MS = 100
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
INSTALL_HINT = ("install it with `sudo apt-get install -y redis-server` (Debian/Ubuntu), "
                "or give its path with --redis-server")


def server_path(options):
    return options.get("redis_server") or shutil.which("redis-server") or \
        "/usr/bin/redis-server"


def missing(options):
    import redis  # noqa: F401 -- ImportError: the peer is skipped, saying why
    path = server_path(options)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return f"redis-server not found at {path}: {INSTALL_HINT}"
    return None


def stream(channel):
    return f"bench-{channel}"


class Deployment:
    """A redis-server process of our own, with ``channels`` streams and their groups.
    Owned by the suite's main thread; ``stop()`` stops the server by pid, safe twice."""

    def __init__(self, workdir, channels, options):
        import redis
        self.dir = tempfile.mkdtemp(prefix="redis-", dir=workdir)
        self.socket = os.path.join(self.dir, "redis.sock")
        self.process = subprocess.Popen(
            [server_path(options), "--port", "0", "--unixsocket", self.socket,
             "--unixsocketperm", "700", "--dir", self.dir, "--appendonly", "yes",
             "--appendfsync", "everysec", "--save", "", "--daemonize", "no",
             "--logfile", os.path.join(self.dir, "redis.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client = self._connect(redis)
            for channel in range(channels):
                client.xgroup_create(stream(channel), GROUP, id="0", mkstream=True)
            client.close()
        except BaseException:
            self.stop()
            raise
        self.endpoint = {"socket": self.socket}

    def _connect(self, redis):
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with code {self.process.returncode}"
                                   f" at start (log: {self.dir}/redis.log)")
            try:
                client = redis.Redis(unix_socket_path=self.socket)
                client.ping()
                return client
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server (pid {self.process.pid}) not answering "
                                       f"on {self.socket} after {START_TIMEOUT} s") from None
                time.sleep(0.02)

    leftovers = ()

    def server_pids(self):
        return [self.process.pid]

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def deploy(workdir, channels, brokers, options):
    return Deployment(workdir, channels, options)


# -- client processes ---------------------------------------------------------------------------

def produce(endpoint, task, gate):
    import redis
    client = redis.Redis(unix_socket_path=endpoint["socket"])
    client.ping()
    streams = [stream(c) for c in task.channels]
    if task.latency:
        execute = client.execute_command
        first = latency.send_paced(lambda value: execute("XADD", streams[0], "*", "v", value),
                                   task, gate)
    else:
        pool = payloads.pool(task.size)
        depth = payloads.bulk_records(task.size) if task.bulk else PIPELINE
        pipe = client.pipeline(transaction=False)
        gate.ready()
        first = latency.clock_ns()
        sent = 0
        for unit, count in enumerate(payloads.units(task.records, depth)):
            name = streams[unit % len(streams)]
            for i in range(sent, sent + count):
                pipe.execute_command("XADD", name, "*", "v", pool[i % len(pool)])
            pipe.execute()
            sent += count
    last = latency.clock_ns()
    client.close()
    return {"records": task.records, "first_ns": first, "last_ns": last}


def consume(endpoint, task, gate):
    import redis
    client = redis.Redis(unix_socket_path=endpoint["socket"])
    client.ping()
    name = f"consumer-{task.index}"
    wanted = {stream(c): ">" for c in task.channels}
    recorder = latency.Recorder(task.records) if task.latency else None
    count = 0
    first = last = None
    gate.ready()
    while not gate.expired():
        replies = client.xreadgroup(GROUP, name, wanted, count=READ_COUNT, block=BLOCK_MS)
        if not replies:
            if gate.received(count):
                break
            continue
        now = latency.clock_ns()
        first = now if first is None else first
        last = now
        pipe = client.pipeline(transaction=False)
        for key, entries in replies:
            count += len(entries)
            pipe.xack(key, GROUP, *[entry_id for entry_id, _ in entries])
            if recorder is not None:
                recorder.record([fields[b"v"] for _, fields in entries], now)
        pipe.execute()
        if gate.received(count):
            break
    client.close()
    return latency.receiver_figures(count, first, last, recorder)
