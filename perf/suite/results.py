"""What a suite run found, as one JSON document: ``perf/results/<timestamp>.json``.

Layout::

    {"profile", "started" (UTC, ISO 8601), "wall_s", "interrupted",
     "machine":   describe() + memcpy_gb_s, write_mb_s, load_average_end,
     "peers":     {name: {"available", "description" | "reason"}},
     "workloads": {"1": {"title", "cases": [{"peer", "x", "params", "figures" | "error"}],
                         "ratios": [{"x", "peer", "figure", "ringlog", "other", "ratio"}]}},
     "producer_perf": {"ringlog" | "confluent_kafka": {"rps", ...} | {"error"}}
                  (``producer_perf``: producer-perf-test and confluent-kafka's produce()),
     "targets":   [the project's goals, each met or not: ``goals.evaluate``],
     "plots":     [PNG paths],
     "shm_leftovers": [/dev/shm objects a stopped ringlog cluster left, unlinked by the suite]}

Rates are records/s and MB/s (1e6 bytes of values); memory in bytes; latencies in µs.
Ratios are always ringlog ÷ peer, on the same figure measured in the same run: above 1
ringlog is faster for a rate, below 1 ringlog is faster for a latency. In the workloads
that compare ringlog with itself (``SELF_COMPARED``: replication settings) the "peer" of a
ratio is the first setting and "ringlog" the row's. People read them as
``speed()`` says them: "ringlog is 2.00× faster" / "3.10× slower" than the peer, whatever
the figure. The targets are the project's goals (``goals``).

Owner: the suite's main thread (``Results`` is not thread safe).
"""
from __future__ import annotations

import datetime
import json
import os

import numpy as np

from perf.suite import goals
from perf.suite.peers import BASELINE
from perf.suite.workloads import LATENCY_WORKLOADS, SELF_COMPARED, WORKLOADS

#: Figures compared per workload (the first is the headline of its table).
THROUGHPUT = ("e2e_rps", "producer_rps", "consumer_rps")
LATENCY = ("p50", "p99", "p99.9")


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
        self.doc["targets"] = goals.evaluate(self.doc)

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
