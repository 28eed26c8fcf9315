"""How long a test pays for its own cluster, by hand: ``TestCluster`` (the pytest
plugin's clusters) started, first record acknowledged, stopped, repeated.

::

    .venv/bin/python -m perf.cluster_start_bench [--runs 7] [--brokers 1]

Prints, per profile (``dev``: no fsync, small segments; ``none``: the broker defaults), the
median seconds of: ``start()`` (every broker serving), the first produce acknowledged after
it (topic created with ``new_topic``, one ``send().get()``), ``close()``; and the whole.
Medians of ``--runs`` runs, the profiles alternating run by run. Figures of issue 25's start
goals; run on a quiet machine, quote the load average with them.

Owner: the main thread; each run's cluster is in a temporary directory, stopped (and the
directory removed) whatever happens.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from cluster import KafkaProducer
from cluster.testing.harness import TestCluster


def one_run(brokers, profile):
    with tempfile.TemporaryDirectory(prefix="ringlog-start-") as tmp:
        t0 = time.perf_counter()
        cluster = TestCluster(os.path.join(tmp, "d"), brokers, profile=profile)
        try:
            cluster.start()
            t1 = time.perf_counter()
            topic = cluster.new_topic()
            producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
            producer.send(topic, b"first").get(timeout=30)
            producer.close()
            t2 = time.perf_counter()
        finally:
            cluster.close()
        t3 = time.perf_counter()
    return {"start": t1 - t0, "first_ack": t2 - t1, "close": t3 - t2, "total": t3 - t0}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="perf.cluster_start_bench")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--brokers", type=int, default=1)
    args = parser.parse_args(argv)
    results = {"dev": [], "none": []}
    for _ in range(args.runs):
        for name in results:
            results[name].append(one_run(args.brokers, None if name == "none" else name))
    print(f"{args.brokers} broker(s), {args.runs} runs each, load average "
          f"{os.getloadavg()[0]:.1f}; medians in seconds")
    print(f"{'profile':8} {'start':>7} {'1st ack':>8} {'close':>7} {'total':>7}")
    for name, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{name:8} {med['start']:7.3f} {med['first_ack']:8.3f} {med['close']:7.3f} "
              f"{med['total']:7.3f}")


if __name__ == "__main__":
    main()
