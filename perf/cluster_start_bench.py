"""How long a test pays for its own cluster, phase by phase, in wall and CPU time, and what an
idle broker weighs: ``TestCluster`` (the pytest plugin's clusters) started, first record
acknowledged, stopped, repeated.

::

    .venv/bin/python -m perf.cluster_start_bench [--runs 7] [--brokers 1] [--profile dev]
        [--modes zygote,exec] [--json out.json]

Modes, alternating run by run: ``zygote`` (brokers forked by this process's zygote, already
running: a test suite's steady state; ``cluster.supervisor.zygote``), ``exec`` (each broker a
new interpreter, ``RINGLOG_ZYGOTE=0``); the zygote's own start (once per process) is measured
apart, as ``zygote start``.

Phases of a run (medians over the runs, wall seconds):

- ``supervisor``: ``TestCluster.start()`` until the first broker is spawned (lock, cluster
  id, stale objects swept, metadata page);
- ``spawn``: the supervisor's spawn calls (fork request, or Popen);
- ``process`` .. ``serving``: the broker's own ``start-up:`` log line (broker 0; wall and
  CPU): ``process`` is interpreter + imports for ``exec``, fork + runpy for ``zygote``;
  ``config``; ``registration`` (data dir, broker lock, broker.json); ``metadata`` (the
  page, the replica manager, the controller replaying the metadata log); ``listener``
  (listener, handlers, fetchers, stats);
- ``alive``: from broker 0 serving (its broker.json written) to ``start()`` returning (the
  controller counts it alive, the page says so, the supervisor wakes);
- ``topic``: ``new_topic()`` (created, every partition led); ``producer``: KafkaProducer
  built; ``first ack``: ``send().get()``; ``ready``: start to first ack, the issue's
  figure; ``close``.

CPU seconds of the start to the first ack: this process's (``bench cpu``), and every broker's
(``broker cpu``, psutil, summed). Idle broker memory, 0.5 s after the first ack: RSS, PSS
and USS (psutil ``memory_full_info``; forked brokers share the zygote's pages, so USS — the
pages only that broker has — is the honest per-broker figure, PSS splits the shared ones).
Also, once: the broker's imports (``python -X importtime``, the heaviest modules) and a bare
interpreter's start. Run on a quiet machine, quote the load average with the figures.

Owner: the main thread; each run's cluster is in a temporary directory, stopped (and the
directory removed) whatever happens.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from cluster import KafkaProducer
from cluster.metadata import data_dir as dd
from cluster.supervisor import supervisor as sup, zygote
from cluster.testing.harness import TestCluster

PHASE = re.compile(r"(\w[\w ]*?) ([\d.]+) s \(CPU ([\d.]+)\)")
BROKER_PHASES = ("process", "config", "registration", "metadata", "listener", "serving")
IDLE = 0.5


class SpawnClock:
    """Wraps ``Supervisor._spawn`` for one run: when the first spawn began, time spent in
    spawns."""

    def __init__(self):
        self.first = None
        self.total = 0.0
        self._original = sup.Supervisor._spawn

    def __enter__(self):
        original, clock = self._original, self

        def timed(supervisor, *args, **kwargs):
            t = time.perf_counter()
            if clock.first is None:
                clock.first = t
            try:
                return original(supervisor, *args, **kwargs)
            finally:
                clock.total += time.perf_counter() - t
        sup.Supervisor._spawn = timed
        return self

    def __exit__(self, *exc):
        sup.Supervisor._spawn = self._original


def broker_phases(data_dir, broker_id=0):
    """{phase: (wall, cpu)} from broker ``broker_id``'s ``start-up:`` log line."""
    path = os.path.join(dd.broker_dir(data_dir, broker_id), dd.BROKER_LOG)
    with open(path, encoding="utf-8", errors="replace") as file:
        lines = [line for line in file if "start-up:" in line]
    if not lines:
        return {}
    return {name: (float(wall), float(cpu))
            for name, wall, cpu in PHASE.findall(lines[-1].split("start-up:", 1)[1])}


def one_run(brokers, profile, mode):
    os.environ[zygote.ENABLE_ENV] = "1" if mode == "zygote" else "0"
    with tempfile.TemporaryDirectory(prefix="zyg-start-") as tmp, SpawnClock() as spawns:
        data_dir = os.path.join(tmp, "d")
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        cluster = TestCluster(data_dir, brokers, profile=profile)
        try:
            cluster.start()
            t1 = time.perf_counter()
            serving_at = os.stat(os.path.join(dd.broker_dir(data_dir, 0), dd.BROKER_JSON))
            alive = time.time() - (time.perf_counter() - t1) - serving_at.st_mtime_ns / 1e9
            topic = cluster.new_topic()
            t2 = time.perf_counter()
            producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
            t3 = time.perf_counter()
            producer.send(topic, b"first").get(timeout=30)
            t4 = time.perf_counter()
            bench_cpu = time.process_time() - cpu0
            processes = [psutil.Process(pid) for pid in cluster.cluster.pids().values()]
            broker_cpu = sum(p.cpu_times().user + p.cpu_times().system for p in processes)
            time.sleep(IDLE)
            memory = [p.memory_full_info() for p in processes]
            producer.close()
            t5 = time.perf_counter()
        finally:
            cluster.close()
        t6 = time.perf_counter()
        phases = broker_phases(data_dir)
    result = {"supervisor": spawns.first - t0, "spawn": spawns.total, "alive": alive,
              "topic": t2 - t1, "producer": t3 - t2, "first ack": t4 - t3,
              "ready": t4 - t0, "close": t6 - t5,
              "bench cpu": bench_cpu, "broker cpu": broker_cpu,
              "rss MB": statistics.mean(m.rss for m in memory) / 2**20,
              "pss MB": statistics.mean(m.pss for m in memory) / 2**20,
              "uss MB": statistics.mean(m.uss for m in memory) / 2**20}
    for name in BROKER_PHASES:
        wall, cpu = phases.get(name, (float("nan"), float("nan")))
        result[name] = wall
        result[f"{name} cpu"] = cpu
    return result


def zygote_start():
    """Seconds (wall, CPU of the zygote process) from starting a zygote to its being ready."""
    zygote.close_shared()
    t0 = time.perf_counter()
    z = zygote.shared(sup.BROKER_COMMAND[2])
    with z._lock:
        z._wait_ready(zygote.READY_TIMEOUT)
    wall = time.perf_counter() - t0
    times = psutil.Process(z.pid).cpu_times()
    rss = psutil.Process(z.pid).memory_full_info()
    return {"wall": wall, "cpu": times.user + times.system, "rss MB": rss.rss / 2**20,
            "uss MB": rss.uss / 2**20}


def imports():
    """The broker's imports by ``python -X importtime`` (total seconds, heaviest modules),
    and a bare interpreter's start (wall seconds)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    bare = time.perf_counter() - t0
    out = subprocess.run([sys.executable, "-X", "importtime", "-c",
                          "import replica_proc.__main__"], check=True, capture_output=True,
                         text=True).stderr
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    total = sum(c for c, name in rows if not name.startswith("  "))
    top = sorted(((c, n.strip()) for c, n in rows if n.strip().split(".")[0] in (
        "numpy", "psutil", "kio", "posix_ipc", "segments", "cluster", "replica_proc",
        "shm_ring", "json", "logging")), reverse=True)
    return {"bare interpreter s": bare, "imports s": total / 1e6,
            "heaviest": [(n, c / 1e6) for c, n in top[:8]]}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="perf.cluster_start_bench")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--profile", default="dev", help="dev, or none (broker defaults)")
    parser.add_argument("--modes", default="zygote,exec")
    parser.add_argument("--json", help="write the medians here too")
    args = parser.parse_args(argv)
    profile = None if args.profile == "none" else args.profile
    modes = args.modes.split(",")
    load = os.getloadavg()[0]
    report = {"brokers": args.brokers, "runs": args.runs, "profile": args.profile,
              "imports": imports(), "zygote start": zygote_start()}
    results = {mode: [] for mode in modes}
    for _ in range(args.runs):
        for mode in modes:
            results[mode].append(one_run(args.brokers, profile, mode))
    report["load average"] = (load, os.getloadavg()[0])
    medians = {mode: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
               for mode, runs in results.items()}
    report["medians"] = medians
    print(f"{args.brokers} broker(s), profile {args.profile}, {args.runs} runs per mode; load "
          f"average {load:.1f} before, {os.getloadavg()[0]:.1f} after; medians, seconds")
    keys = list(next(iter(medians.values())))
    print(f"{'':14}" + "".join(f"{mode:>10}" for mode in modes))
    for key in keys:
        print(f"{key:14}" + "".join(f"{medians[m][key]:10.3f}" for m in modes))
    print("zygote start (once per process): " + ", ".join(
        f"{k} {v:.3f}" for k, v in report["zygote start"].items()))
    imp = report["imports"]
    print(f"bare interpreter {imp['bare interpreter s']:.3f} s; broker imports "
          f"(-X importtime) {imp['imports s']:.3f} s; heaviest (cumulative): " + ", ".join(
              f"{n} {s:.3f}" for n, s in imp["heaviest"]))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(report, file, indent=1)


if __name__ == "__main__":
    main()
