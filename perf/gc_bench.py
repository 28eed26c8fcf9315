"""What Python's garbage collector costs each process of the perf suite's hot workloads, and
an A/B of GC settings.

::

    .venv/bin/python -m perf.gc_bench [--repeats 3] [--workloads 1,4]
                                      [--variant NAME=KNOB,KNOB ...] [--json F]

Each run is ``python -m perf --quick --peers ringlog --workloads 1,4`` (workload 1: one
producer ``send()``ing 100-byte records to one consumer's ``poll()`` through one broker;
workload 4: ``send()`` with linger 0 at 1,000 and 10,000 records/s, latency per record)
with ``perf/gc_probe`` on PYTHONPATH: every broker and client process times each
collection with ``gc.callbacks`` and writes its counts when it exits
(``perf/gc_probe/sitecustomize.py``). Variants run alternately (A B C A B C ...), and the
figures are medians over ``--repeats`` runs of each.

Per case and role (broker, producer, consumer) it reports, over the *run window* — from the
first client's start to the last client's exit, so a broker's start-up imports are left
out — gen-0/1/2 collections per second and the share of the window spent in collections
(pause share), with the longest pause; what one full collection costs each process at its
exit (``full ms``: the generation-2 pause it would take); and the suite's own figures:
workload 1's end-to-end records/s and workload 4's p99 latency.

Knobs (the probe's environment variables): ``freeze`` (``gc.freeze()`` in each broker when
its request loop begins — what brokers do by default now, ``ringlog.gc.freeze`` — and in each
client right after its fork), ``nofreeze`` (``gc.unfreeze()`` in each broker then: as before
``ringlog.gc.freeze``) and ``threshold0=N`` (``gc.set_threshold(N, ...)`` in every process).
The default variants: ``default`` (no knob), ``nofreeze``, ``freeze``, ``threshold0=10000``.

Owner: the main thread; each run is a child process (the suite stops everything it started).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gc_probe")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROLES = ("broker", "producer", "consumer")
DEFAULT_VARIANTS = ("default=", "nofreeze=nofreeze", "freeze=freeze",
                    "threshold0=threshold0=10000")
#: Seconds one suite run may take.
RUN_TIMEOUT = 600


def knob_env(knobs):
    """The probe's environment for a comma-separated knob list."""
    env = {}
    for knob in filter(None, knobs.split(",")):
        name, _, value = knob.partition("=")
        if name == "freeze":
            env["RINGLOG_GC_PROBE_FREEZE"] = "1"
        elif name == "nofreeze":
            env["RINGLOG_GC_PROBE_FREEZE"] = "0"
        elif name == "threshold0":
            env["RINGLOG_GC_PROBE_THRESHOLD0"] = str(int(value))
        else:
            raise ValueError(f"unknown knob {knob!r}: expected freeze, nofreeze or "
                             f"threshold0=N")
    return env


def run_suite(workloads, knobs, scratch):
    """One suite run; returns (suite JSON, [probe records])."""
    probe_dir = tempfile.mkdtemp(dir=scratch)
    out_dir = tempfile.mkdtemp(dir=scratch)
    env = dict(os.environ, RINGLOG_GC_PROBE_DIR=probe_dir, **knob_env(knobs))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PROBE, env.get("PYTHONPATH")]))
    subprocess.run([sys.executable, "-m", "perf", "--quick", "--peers", "ringlog",
                    "--workloads", workloads, "--out", out_dir],
                   env=env, cwd=os.getcwd(), check=True, timeout=RUN_TIMEOUT,
                   stdout=subprocess.DEVNULL)
    [document] = glob.glob(os.path.join(out_dir, "*.json"))
    with open(document) as f:
        suite = json.load(f)
    records = []
    for path in glob.glob(os.path.join(probe_dir, "*.json")):
        with open(path) as f:
            records.append(json.load(f))
    return suite, records


def case_names(suite):
    """The suite's cases in the order they ran, each (name, figure) — workload 1's
    end-to-end records/s, workload 4's p99 µs."""
    names = []
    for number in sorted(suite["workloads"], key=int):
        for case in suite["workloads"][number]["cases"]:
            figures = case["figures"]
            if "latency" in figures:
                rate = case["params"]["rate"]
                names.append((f"w{number} {rate:,.0f}/s p99 µs", figures["latency"]["p99"]))
            else:
                names.append((f"w{number} e2e rec/s", figures["e2e_rps"]))
    return names


def by_case(records, count):
    """Group the probe records per case: the brokers in start order, one per case (the
    suite's cases run one after another, each with its own cluster), and each client
    with the broker alive when it started."""
    brokers = sorted((r for r in records if r["role"] == "broker"), key=lambda r: r["start"])
    if len(brokers) != count:
        raise RuntimeError(f"{len(brokers)} broker records for {count} cases")
    cases = [{"broker": [b], "producer": [], "consumer": []} for b in brokers]
    for record in records:
        if record["role"] == "broker":
            continue
        for case, broker in zip(cases, brokers):
            if broker["start"] <= record["start"] <= broker["end"]:
                case[record["role"]].append(record)
                break
    return cases


def window_figures(case):
    """{role: {gen0/s, gen1/s, gen2/s, pause %, max pause ms}} over the clients' window."""
    clients = case["producer"] + case["consumer"]
    start = min(r["start"] for r in clients)
    end = max(r["end"] for r in clients)
    span = end - start
    figures = {}
    for role in ROLES:
        counts = [0, 0, 0]
        pause = longest = 0
        for record in case[role]:
            for when, generation, ns in record["events"]:
                if start <= when <= end:
                    counts[generation] += 1
                    pause += ns
                    longest = max(longest, ns)
        processes = max(1, len(case[role]))
        full = [r["full_collection_ns"] / 1e6 for r in case[role]]
        figures[role] = {"full ms": statistics.median(full) if full else 0.0,
                         "tracked": statistics.median(r["tracked"] for r in case[role])
                         if case[role] else 0,
                         "gen0/s": counts[0] / span / processes,
                         "gen1/s": counts[1] / span / processes,
                         "gen2/s": counts[2] / span / processes,
                         "pause %": pause / 1e9 / span / processes * 100,
                         "max pause ms": longest / 1e6}
    return figures


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m perf.gc_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workloads", default="1,4")
    parser.add_argument("--variant", action="append", metavar="NAME=KNOB,KNOB",
                        help="a variant (repeatable); default: " + " ".join(DEFAULT_VARIANTS))
    parser.add_argument("--json", help="also write every run's figures here")
    args = parser.parse_args(argv)
    variants = [v.partition("=")[::2] for v in (args.variant or DEFAULT_VARIANTS)]
    runs = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory(prefix="ringlog-gc-") as scratch:
        for repeat in range(args.repeats):
            for name, knobs in variants:
                suite, records = run_suite(args.workloads, knobs, scratch)
                names = case_names(suite)
                cases = by_case(records, len(names))
                run = {case_name: {"figure": figure, **window_figures(case)}
                       for (case_name, figure), case in zip(names, cases)}
                runs[name].append(run)
                print(f"[{repeat + 1}/{args.repeats}] {name}: " + "; ".join(
                    f"{case} {figures['figure']:,.0f}" for case, figures in run.items()),
                    flush=True)
    print()
    for case in runs[variants[0][0]][0]:
        print(case)
        print(f"  {'variant':12s} {'figure':>10s}  " + "  ".join(
            f"{role:>8s} gen0/s gen1/s gen2/s pause% max ms full ms" for role in ROLES))
        for name, _ in variants:
            per_run = [run[case] for run in runs[name]]
            cells = [f"{statistics.median(r['figure'] for r in per_run):10,.0f}"]
            for role in ROLES:
                def med(key, role=role, per_run=per_run):
                    return statistics.median(r[role][key] for r in per_run)
                cells.append(f"{'':8s} {med('gen0/s'):6.1f} {med('gen1/s'):6.2f} "
                             f"{med('gen2/s'):6.2f} {med('pause %'):6.2f} "
                             f"{med('max pause ms'):6.1f} {med('full ms'):7.1f}")
            print(f"  {name:12s} " + "  ".join(cells))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(runs, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
