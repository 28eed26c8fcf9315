"""What a suite run found, as one JSON document: ``perf/results/<timestamp>.json``.

Layout::

    {"profile", "started" (UTC, ISO 8601), "wall_s", "interrupted",
     "machine":   describe() + memcpy_gb_s, write_mb_s, load_average_end,
     "peers":     {name: {"available", "description" | "reason"}},
     "workloads": {"1": {"title", "cases": [{"peer", "x", "params", "figures" | "error"}],
                         "ratios": [{"x", "peer", "figure", "ringlog", "other", "ratio"}]}},
     "targets":   [{"name", "peer", "figure", "ratio", "target", "comparison", "met",
                    "note" (when a latency run's sender fell behind its rate)}],
     "plots":     [PNG paths],
     "shm_leftovers": [/dev/shm objects a stopped ringlog cluster left, unlinked by the suite]}

Rates are records/s and MB/s (1e6 bytes of values); memory in bytes; latencies in µs.
Ratios are always ringlog ÷ peer, on the same figure measured in the same run: above 1
ringlog is faster for a rate, below 1 ringlog is faster for a latency. In the workloads
that compare ringlog with itself (``SELF_COMPARED``: replication settings) the "peer" of a
ratio is the first setting and "ringlog" the row's. People read them as
``speed()`` says them: "ringlog is 2.00× faster" / "3.10× slower" than the peer, whatever
the figure. The targets are the project's goals for ringlog against its peers.

Owner: the suite's main thread (``Results`` is not thread safe).
"""
from __future__ import annotations

import datetime
import json
import os

import numpy as np

from perf.suite.peers import BASELINE
from perf.suite.workloads import LATENCY_WORKLOADS, SELF_COMPARED, WORKLOADS

#: A latency run whose sender achieved less than this share of its rate fell behind.
BEHIND = 0.95
#: Figures compared per workload (the first is the headline of its table).
THROUGHPUT = ("e2e_rps", "producer_rps", "consumer_rps")
LATENCY = ("p50", "p99", "p99.9")
#: The project's goals: (name, workload, x, figure, peer, comparison, target), the
#: comparison and target applying to the ratio ringlog ÷ peer.
TARGETS = (
    ("end-to-end records/s (workload 1)", 1, None, "e2e_rps", "redis_streams", ">=", 15.0),
    ("end-to-end records/s (workload 1)", 1, None, "e2e_rps", "zmq_pushpull", ">=", 1.0),
    ("latency p99 at 10,000 records/s (workload 4)", 4, 10_000, "p99", "redis_streams", "<",
     1.0),
    ("end-to-end records/s, RF 3 acks=all (workload 8)", 8, "RF 3, acks=all", "e2e_rps",
     "RF 1, acks=1", ">=", 0.5),
)


def ratio(ours, theirs):
    """ringlog ÷ peer, None when either is missing or the peer's is zero."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def speed(ratio, figure_name):
    """Ratio ringlog ÷ peer of figure ``figure_name`` said as ringlog's speed against the
    peer: "2.00× faster", "3.10× slower" (a latency ratio of 0.5 is "2.00× faster");
    "-" when there is no ratio."""
    if not ratio:
        return "-"
    factor = 1 / ratio if figure_name in LATENCY else ratio
    return f"{factor:.2f}× faster" if factor >= 1 else f"{1 / factor:.2f}× slower"


def goal(target_entry):
    """What a target (an entry of ``doc["targets"]``) asks of ringlog, in words: "at least
    15× faster than redis_streams", "at least as fast as zmq_pushpull", "faster than ..."."""
    target, peer = target_entry["target"], target_entry["peer"]
    if target < 1 and target_entry["figure"] not in LATENCY:
        return f"at least {target:g}× the rate of {peer}"
    if target_entry["figure"] in LATENCY:  # lower is better: ratio < target
        factor = 1 / target
        return (f"faster than {peer}" if factor == 1 else
                f"more than {factor:g}× faster than {peer}")
    return (f"at least as fast as {peer}" if target == 1 else
            f"at least {target:g}× faster than {peer}")


def figure(case_entry, name):
    """A figure of a case entry: a top-level one, or a latency percentile."""
    figures = case_entry.get("figures") or {}
    if name in LATENCY:
        return (figures.get("latency") or {}).get(name)
    return figures.get(name)


class Results:
    def __init__(self, profile, clock=datetime.datetime.now):
        self._clock = clock
        started = clock(datetime.UTC)
        self.stamp = started.strftime("%Y%m%dT%H%M%SZ")
        self.doc = {"profile": profile, "started": started.isoformat(timespec="seconds"),
                    "wall_s": None, "interrupted": False, "machine": {}, "peers": {},
                    "workloads": {}, "targets": [], "plots": [], "shm_leftovers": []}

    def add_case(self, case, figures=None, error=None):
        workload = self.doc["workloads"].setdefault(
            str(case.workload), {"title": WORKLOADS[case.workload], "cases": [], "ratios": []})
        params = {k: v for k, v in vars(case).items() if k not in ("workload", "peer", "x")}
        entry = {"peer": case.peer, "x": case.x, "params": params}
        if error is not None:
            entry["error"] = error
        else:
            entry["figures"] = figures
        workload["cases"].append(entry)

    def compute_ratios(self):
        """Fill every workload's ratios and the targets (after the last case)."""
        for key, workload in self.doc["workloads"].items():
            names = LATENCY if int(key) in LATENCY_WORKLOADS else THROUGHPUT
            if int(key) in SELF_COMPARED:
                workload["ratios"] = self._self_ratios(workload, names)
                continue
            ours = {e["x"]: e for e in workload["cases"] if e["peer"] == BASELINE}
            workload["ratios"] = [
                {"x": e["x"], "peer": e["peer"], "figure": name,
                 "ringlog": figure(ours[e["x"]], name), "other": figure(e, name),
                 "ratio": ratio(figure(ours[e["x"]], name), figure(e, name))}
                for e in workload["cases"] if e["peer"] != BASELINE and e["x"] in ours
                for name in names]
        self.doc["targets"] = [self._target(*t) for t in TARGETS]

    @staticmethod
    def _self_ratios(workload, names):
        """Each later setting's figures against the first setting's (same workload, run)."""
        cases = [e for e in workload["cases"] if "figures" in e]
        if not cases:
            return []
        reference = cases[0]
        return [{"x": e["x"], "peer": reference["x"], "figure": name,
                 "ringlog": figure(e, name), "other": figure(reference, name),
                 "ratio": ratio(figure(e, name), figure(reference, name))}
                for e in cases[1:] for name in names]

    def _target(self, name, workload, x, figure_name, peer, comparison, target):
        found = [r for r in self.doc["workloads"].get(str(workload), {}).get("ratios", [])
                 if r["x"] == x and r["peer"] == peer and r["figure"] == figure_name]
        value = found[0]["ratio"] if found else None
        met = None if value is None else (value >= target if comparison == ">=" else
                                          value < target)
        entry = {"name": name, "peer": peer, "figure": figure_name, "ratio": value,
                 "target": target, "comparison": comparison, "met": met}
        behind = [e for e in self.doc["workloads"].get(str(workload), {}).get("cases", [])
                  if isinstance(x, int) and e["x"] == x and e["peer"] in (BASELINE, peer)
                  and "figures" in e
                  and (e["figures"].get("achieved_rate") or 0) < BEHIND * x]
        if behind:
            entry["note"] = "; ".join(
                f"{e['peer']}'s sender fell behind ({e['figures'].get('achieved_rate') or 0:,.0f}"
                f" of {x:,} records/s): not a like-for-like comparison" for e in behind)
        return entry

    def write(self, directory):
        """Write the document to ``directory``/<stamp>.json; return the path."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{self.stamp}.json")
        with open(path, "w") as out:
            json.dump(self.doc, out, indent=1, default=_plain)
            out.write("\n")
        return path


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot store {type(value).__name__} in the results JSON")
