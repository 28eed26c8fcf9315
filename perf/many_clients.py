"""Workload 6 against workload 1 for ringlog alone: the rate ratio and the broker's CPU.

Run from the repository root::

    .venv/bin/python -m perf.many_clients [--processes 64] [--records 200000] [--repeats 3]

The suite's workload 1 (1 producer, 1 consumer, 1 partition) and workload 6 with
``--processes`` client processes (half producers, half consumers, a partition per pair),
both through ``perf.suite.harness`` as ``python -m perf`` runs them, ``--records`` in all,
alternating, ``--repeats`` times. Per run: end-to-end records/s, workload 6 ÷ workload 1
(the issue's goal: >= 0.9), and the broker's CPU µs and voluntary context switches per
record (psutil, the broker process over the case: what a busy machine distorts least).
Medians at the end.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile

import psutil

from perf.suite import harness, peers, workloads


def _run(case, workdir):
    module = peers.load("ringlog")
    deployment = module.deploy(workdir, case.channels, case.brokers, {"replication": 1})
    try:
        servers = [psutil.Process(pid) for pid in deployment.server_pids()]
        cpu = sum(sum(p.cpu_times()[:2]) for p in servers)
        switches = sum(p.num_ctx_switches().voluntary for p in servers)
        run = harness.run_case("ringlog", deployment, case.tasks(120), 130)
        cpu = sum(sum(p.cpu_times()[:2]) for p in servers) - cpu
        switches = sum(p.num_ctx_switches().voluntary for p in servers) - switches
    finally:
        deployment.stop()
    records = case.records * case.producers
    figures = workloads.run_figures(case, run)
    return figures["e2e_rps"], cpu / records * 1e6, switches / records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    n = args.processes
    one = workloads.Case(1, "ringlog", None, records=args.records, repeats=1, producers=1,
                         consumers=1, channels=1, brokers=1, size=100)
    many = workloads.Case(6, "ringlog", n, producers=n // 2, consumers=n // 2,
                          channels=n // 2, brokers=1, size=100,
                          records=max(1, args.records // (n // 2)))
    workdir = tempfile.mkdtemp(prefix="many-clients-")
    ratios, cpu1, cpu6 = [], [], []
    try:
        for repeat in range(args.repeats):
            rate1, c1, s1 = _run(one, workdir)
            rate6, c6, s6 = _run(many, workdir)
            ratios.append(rate6 / rate1)
            cpu1.append(c1)
            cpu6.append(c6)
            print(f"run {repeat + 1} (load {os.getloadavg()[0]:.1f}): workload 1 "
                  f"{rate1:,.0f} records/s, broker {c1:.2f} µs and {s1:.4f} wake-ups per "
                  f"record; workload 6 ({n} processes) {rate6:,.0f} records/s, broker "
                  f"{c6:.2f} µs and {s6:.4f} wake-ups per record; ratio {rate6 / rate1:.2f}",
                  flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"medians: ratio {statistics.median(ratios):.2f}; broker CPU per record "
          f"workload 1 {statistics.median(cpu1):.2f} µs, workload 6 "
          f"{statistics.median(cpu6):.2f} µs")


if __name__ == "__main__":
    main()
