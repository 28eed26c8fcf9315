"""``ringlog ship`` throughput: lines/s from a file to acknowledged records, against
``cat file | ringlog console-producer`` on the same file, same cluster, same run.

    .venv/bin/python -m perf.ship_bench [--lines 200000] [--line-bytes 100] [--rounds 5]

One one-broker cluster in a temporary directory; one file of ``--lines`` lines of
``--line-bytes`` bytes (a timestamp, a level, a service, a message, as log lines look).
Each round runs, alternating which goes first, each into a fresh one-partition topic:

* ``ship``: ``ringlog ship --once --path FILE`` — every line a record with a key
  (``{file}``) and three headers (file path, file identity, byte position), acks=all,
  idempotent, the checkpoint written; its defaults otherwise (linger.ms 50, batch.size 128 KiB);
* ``console-producer``: ``cat FILE | ringlog console-producer`` — every line a record, no key,
  no header, Kafka's defaults for the tool (acks=-1, linger.ms 1000, batch.size 16 KiB).

Each is timed from the process start to its exit (the tool's start-up included, as a user
sees it); both exit only once every record is acknowledged. Prints each round (lines/s,
seconds, and the CPU seconds of the tool's process: on a loaded machine the wall time
swings with the others' load, the CPU time much less), the median lines/s of each and the
ratio ship ÷ console-producer (the goal: >= 1), and the medians of the CPU seconds. Processes are
stopped by pid; the cluster is stopped and its directory removed at the end.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from cluster import KafkaAdminClient, NewTopic
from cluster.supervisor.cluster import Cluster

CLI = [sys.executable, "-m", "cluster.tools.cli"]


def write_file(path, lines, line_bytes):
    services = ("api", "billing", "search", "auth")
    levels = ("INFO", "INFO", "INFO", "WARN", "ERROR")
    with open(path, "wb") as out:
        for i in range(lines):
            head = b"2026-11-28T22:00:%02d.%06dZ %s %s request %d " % (
                i % 60, i % 1_000_000, levels[i % 5].encode(), services[i % 4].encode(), i)
            out.write(head + b"x" * max(0, line_bytes - len(head) - 1) + b"\n")


def timed(argv, stdin=None):
    """(wall seconds, CPU seconds of the process: user + system) of one tool run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    try:
        _, err = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        raise SystemExit(f"{argv[3]} failed ({process.returncode}): {err.decode()[-2000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--line-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="ship-bench-")
    cluster = Cluster(os.path.join(work, "data"), brokers=1)
    figures = {"ship": [], "console-producer": []}
    cpu = {"ship": [], "console-producer": []}
    try:
        cluster.start()
        data = cluster.bootstrap_servers
        path = os.path.join(work, "app.log")
        write_file(path, args.lines, args.line_bytes)
        size = os.path.getsize(path)
        print(f"{args.lines:,} lines, {size / 1e6:.1f} MB; one broker, one partition per run")
        for round_ in range(args.rounds):
            order = ["ship", "console-producer"]
            if round_ % 2:
                order.reverse()
            for name in order:
                topic = f"{name}-{round_}"
                with KafkaAdminClient(bootstrap_servers=data) as admin:
                    admin.create_topics([NewTopic(topic, num_partitions=1,
                                                  replication_factor=1)])
                if name == "ship":
                    checkpoint = os.path.join(work, f"{topic}.checkpoint")
                    argv = CLI + ["ship", "--bootstrap-server", data, "--topic", topic,
                                  "--path", path, "--once", "--progress-interval", "0",
                                  "--checkpoint", checkpoint]
                    elapsed, seconds = timed(argv)
                else:
                    argv = CLI + ["console-producer", "--bootstrap-server", data,
                                  "--topic", topic]
                    with open(path, "rb") as stdin:  # what `cat file |` feeds it
                        elapsed, seconds = timed(argv, stdin=stdin)
                rate = args.lines / elapsed
                figures[name].append(rate)
                cpu[name].append(seconds)
                print(f"round {round_ + 1}: {name:>16}: {rate:>10,.0f} lines/s "
                      f"({elapsed:.2f} s, {seconds:.2f} CPU s)", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    ship = statistics.median(figures["ship"])
    console = statistics.median(figures["console-producer"])
    print(f"median ship {ship:,.0f} lines/s, console-producer {console:,.0f} lines/s: "
          f"ratio {ship / console:.2f}x (goal >= 1x)")
    ship_cpu = statistics.median(cpu["ship"])
    console_cpu = statistics.median(cpu["console-producer"])
    print(f"median CPU seconds: ship {ship_cpu:.2f}, console-producer {console_cpu:.2f}: "
          f"console-producer / ship {console_cpu / ship_cpu:.2f}x (less noisy on a loaded "
          f"machine; >= 1 means ship costs no more CPU)")


if __name__ == "__main__":
    main()
