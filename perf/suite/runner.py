"""``python -m perf``: ringlog and its peers on the same workloads in one run.

::

    python -m perf [--quick | --quickest] [--peers ringlog,redis_streams,...]
                   [--workloads 1,3,4] [--out perf/results] [--redis-server PATH]

Order: the machine (description, memcpy GB/s, sequential write MB/s, which record codec
runs), then each workload, each peer on it in turn (``workloads``), each case on a fresh
deployment (a new cluster, a new redis-server) so its memory figures are its own; with
workload 1, producer-perf-test beside confluent-kafka's produce() call rate
(``producer_perf``); then the tables (``report``) ending with the project's goals met or
not (``goals``), the JSON and the PNGs (``results``, ``plots``) in ``--out``.

Profiles: the default (``make bench``) runs every workload, about 10 minutes on 2 cores;
``--quick`` a one-minute subset (workloads 1, 3, 4, 7, 8, 9); ``--quickest`` tiny sizes of every
workload (for the tests: it checks the machinery, its figures mean nothing).

A peer that cannot run here (redis-server missing, a library missing) is skipped, saying
why and how to install it. A case that fails or runs out of time is reported as failed and
the suite goes on. Everything started — brokers, redis-server, client processes — is
stopped by pid when a case ends, and on Ctrl-C or SIGTERM too; the work directory (a
temporary directory) is removed at the end.

Exit code: 0 when every case ran, 1 when some failed, 130 when interrupted.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time

from perf.suite import machine, peers, plots, producer_perf, workloads
from perf.suite.harness import CaseFailed, run_case
from perf.suite.progress import SuiteProgress
from perf.suite.report import print_report
from perf.suite.results import Results

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "results")
#: MiB copied / written to measure the machine, per profile.
#: Seconds the harness waits beyond the clients' own timeout for their (partial) figures.
REPORT_GRACE = 30.0
MACHINE_MIB = {"full": (256, 256), "quick": (64, 64), "quickest": (8, 8)}


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m perf", description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="profile", action="store_const", const="quick",
                      help="a short subset (workloads 1, 3, 4, 7, 8, 9, one repeat)")
    size.add_argument("--quickest", dest="profile", action="store_const", const="quickest",
                      help="tiny sizes of every workload (checks the machinery only)")
    parser.set_defaults(profile="full")
    parser.add_argument("--peers", default=",".join(peers.PEERS),
                        help=f"comma-separated peers (default: {','.join(peers.PEERS)})")
    parser.add_argument("--workloads", help="comma-separated workload numbers (default: all "
                                            "the profile has)")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help="directory for the JSON and PNGs (default: perf/results)")
    parser.add_argument("--redis-server", help="path of redis-server (default: on PATH)")
    args = parser.parse_args(argv)
    args.peer_list = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in args.peer_list if p not in peers.PEERS]
    if unknown or peers.BASELINE not in args.peer_list:
        parser.error(f"--peers must name ringlog and any of {', '.join(peers.PEERS)}, "
                     f"found {args.peers!r}")
    args.selected = None
    if args.workloads:
        try:
            args.selected = {int(w) for w in args.workloads.split(",")}
        except ValueError:
            parser.error(f"--workloads takes numbers, found {args.workloads!r}")
        bad = sorted(args.selected - set(workloads.WORKLOADS))
        if bad:
            parser.error(f"no workload {bad}; they are 1 to {len(workloads.WORKLOADS)}")
    return args


def _sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    options = {"redis_server": args.redis_server}
    started = time.monotonic()
    results = Results(args.profile)
    previous = signal.signal(signal.SIGTERM, _sigterm)
    workdir = tempfile.mkdtemp(prefix="ringlog-bench-")
    code = 0
    try:
        code = _run(args, options, results, workdir)
    except KeyboardInterrupt:
        results.doc["interrupted"] = True
        print("interrupted: every process the suite started is stopped; writing what ran",
              file=sys.stderr)
        code = 130
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
    results.doc["machine"]["load_average_end"] = list(os.getloadavg())
    results.doc["wall_s"] = time.monotonic() - started
    results.compute_ratios()
    results.doc["plots"] = plots.make_plots(results.doc, args.out, results.stamp)
    path = results.write(args.out)
    print_report(results.doc)
    print(f"results: {path}")
    for plot in results.doc["plots"]:
        print(f"plot:    {plot}")
    print(f"wall time: {results.doc['wall_s']:.0f} s")
    return code


def _run(args, options, results, workdir):
    copy_mib, write_mib = MACHINE_MIB[args.profile]
    results.doc["machine"] = machine.describe(args.redis_server)
    results.doc["machine"]["memcpy_gb_s"] = machine.memcpy_gb_s(copy_mib)
    results.doc["machine"]["write_mb_s"] = machine.write_mb_s(workdir, write_mib)
    results.doc["machine"]["codec"] = machine.codec_path()
    available = []
    for name in args.peer_list:
        reason = peers.missing(name, options)
        if reason is None:
            available.append(name)
            results.doc["peers"][name] = {"available": True,
                                          "description": peers.load(name).DESCRIPTION}
        else:
            results.doc["peers"][name] = {"available": False, "reason": reason}
            print(f"skipping {name}: {reason}", file=sys.stderr)
    timeout = workloads.profile(args.profile)["timeout"]
    cases = workloads.cases(args.profile, available, args.selected)
    failed = 0
    with SuiteProgress(sum(c.repeats for c in cases)) as progress:
        for case in cases:
            runs, error = [], None
            try:
                for repeat in range(case.repeats):
                    progress.begin(case.key + (f" #{repeat + 1}" if case.repeats > 1 else ""))
                    try:
                        figures = _run_once(case, workdir, options, timeout, progress.tick,
                                            results.doc["shm_leftovers"])
                    except CaseFailed as exc:
                        error = str(exc)
                        progress.end("FAILED: " + error.splitlines()[0])
                        break
                    runs.append(figures)
                    progress.end(_outcome(figures))
            finally:  # interrupted too: the repeats that finished are kept
                if error is not None:
                    failed += 1
                    results.add_case(case, error=error)
                elif runs:
                    results.add_case(case, workloads.median_figures(runs))
    sizes = workloads.profile(args.profile)
    if 1 in sizes and (args.selected is None or 1 in args.selected):
        print("producer-perf-test and confluent-kafka's produce() calls ...", file=sys.stderr,
              flush=True)
        results.doc["producer_perf"] = producer_perf.measure(workdir, sizes[1]["records"],
                                                             timeout)
    return 1 if failed else 0


def _run_once(case, workdir, options, timeout, tick, leftovers):
    module = peers.load(case.peer)
    try:
        deployment = module.deploy(workdir, case.channels, case.brokers,
                                   dict(options, replication=case.replication))
    except Exception as exc:  # a server that does not start fails this case, not the suite
        raise CaseFailed(f"{case.peer} did not start: {type(exc).__name__}: {exc}") from exc
    try:
        run = run_case(case.peer, deployment, case.tasks(timeout), timeout + REPORT_GRACE,
                       on_tick=tick)
    finally:
        deployment.stop()
        leftovers.extend(deployment.leftovers)
    return workloads.run_figures(case, run)


def _outcome(figures):
    if "latency" in figures:
        lat = figures["latency"]
        return (f"p50 {lat.get('p50', 0):,.0f} µs, p99 {lat.get('p99', 0):,.0f} µs at "
                f"{figures['achieved_rate']:,.0f}/s")
    e2e = figures.get("e2e_rps")
    lost = f", {figures['lost']:,} records LOST" if figures["lost"] else ""
    return (f"{e2e:,.0f} records/s end to end" if e2e else "no record received") + lost
