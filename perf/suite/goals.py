"""The project's goals for ringlog (issue 24's table), each met or not from one suite run.

A goal compares a figure of ringlog's with a threshold: a number (10M records/s, 1 ms) or
a factor times another figure of the same run (a peer's, ringlog's own in another setting,
the machine's memcpy)::

    workload 1 end to end (100 B)   ringlog e2e_rps  >=  1.0 × zmq_pushpull e2e_rps
    workload 4 at 10,000/s          ringlog p99      <=  1,000 µs

A figure is named by a *source*: ``("case", workload, x, peer, figure)`` (a case's figure,
``results.figure``: a rate or a latency percentile), ``("machine", key)`` (the machine's
description, e.g. memcpy GB/s) or ``("producer_perf", name)`` (the producer-perf-test
figures, ``producer_perf``). A goal whose figures are missing — the workload did not run
(``--quick`` has no workload 6), a peer was skipped, a case failed — is "not measured",
met None, and says why when the profile left its workload out.

``evaluate(doc)`` -> the entries of ``doc["targets"]``::

    {"name", "goal" (words), "value", "reference" (None for a fixed threshold), "ratio"
     (value ÷ reference), "met" (True / False / None), "measured" (words), "unit",
     "note" (a latency run whose sender fell behind its rate)}

Pure: reads a results document, returns data; any thread.
"""
from __future__ import annotations

import dataclasses

from perf.suite.workloads import PROFILES

#: A latency run whose sender achieved less than this share of its rate fell behind.
BEHIND = 0.95
#: Figures where lower is better.
LOWER_IS_BETTER = ("p50", "p99", "p99.9")
_RF1, _RF3 = "RF 1, acks=1", "RF 3, acks=all"
_ZMQ, _REDIS = "zmq_pushpull", "redis_streams"


@dataclasses.dataclass(frozen=True)
class Goal:
    """``value`` ``comparison`` ``factor`` × ``reference`` (or × 1 when ``reference`` is
    None: ``factor`` is then the threshold itself). ``unit``: of value (and of reference ×
    ``scale``: the reference's own unit converted to value's)."""

    name: str
    goal: str
    value: tuple
    comparison: str
    factor: float
    reference: tuple = None
    unit: str = "rec/s"
    scale: float = 1.0


def _case(workload, x, figure, peer="ringlog"):
    return ("case", workload, x, peer, figure)


_W1, _W3 = _case(1, None, "e2e_rps"), _case(3, None, "e2e_rps")
_W7_10K, _W7_1M = _case(7, 10_000, "e2e_mb_s"), _case(7, 1_000_000, "e2e_mb_s")
_W4 = 10_000  # workload 4's rate of the latency goals

#: Issue 24's table, in its order.
GOALS = (
    Goal("producer-perf-test, 100 B, acks=1, 1 partition", "≥ 1.0× pyzmq's send rate",
         ("producer_perf", "ringlog"), ">=", 1.0, _case(1, None, "producer_rps", _ZMQ)),
    Goal("producer-perf-test, 100 B, acks=1, 1 partition",
         "≥ 0.5× confluent-kafka's produce() call rate (no broker)",
         ("producer_perf", "ringlog"), ">=", 0.5, ("producer_perf", "confluent_kafka")),
    Goal("workload 1 end to end (100 B)", "≥ 1.0× pyzmq", _W1, ">=", 1.0,
         _case(1, None, "e2e_rps", _ZMQ)),
    Goal("workload 1 end to end (100 B)", "≥ 10× Redis Streams", _W1, ">=", 10.0,
         _case(1, None, "e2e_rps", _REDIS)),
    Goal("workload 3 bulk end to end", "≥ 10M records/s", _W3, ">=", 10e6),
    Goal("workload 3 bulk end to end", "≥ 1× pyzmq's bulk frames", _W3, ">=", 1.0,
         _case(3, None, "e2e_rps", _ZMQ)),
    Goal("workload 7, 10 KB values", "≥ 1× pyzmq MB/s", _W7_10K, ">=", 1.0,
         _case(7, 10_000, "e2e_mb_s", _ZMQ), unit="MB/s"),
    Goal("workload 7, 10 KB values", "≥ 3× Redis Streams MB/s", _W7_10K, ">=", 3.0,
         _case(7, 10_000, "e2e_mb_s", _REDIS), unit="MB/s"),
    Goal("workload 7, 1 MB values", "≥ 2 GB/s end to end", _W7_1M, ">=", 2000.0,
         unit="MB/s"),
    Goal("workload 7, 1 MB values", "≥ 1/6 of memcpy measured in the run", _W7_1M, ">=",
         1 / 6, ("machine", "memcpy_gb_s"), unit="MB/s", scale=1000.0),
    Goal("workload 8, RF 3 acks=all ÷ RF 1 acks=1", "≥ 0.7×",
         _case(8, _RF3, "e2e_rps"), ">=", 0.7, _case(8, _RF1, "e2e_rps")),
    Goal("workload 4 at 10,000 records/s, RF 1", "p50 ≤ 200 µs", _case(4, _W4, "p50"), "<=",
         200.0, unit="µs"),
    Goal("workload 4 at 10,000 records/s, RF 1", "p99 ≤ 1 ms", _case(4, _W4, "p99"), "<=",
         1000.0, unit="µs"),
    Goal("workload 9 at 10,000 records/s, RF 3 acks=all", "p99 ≤ 2 ms",
         _case(9, _RF3, "p99"), "<=", 2000.0, unit="µs"),
    Goal("workload 4 at 10,000 records/s, RF 1", "p99 ≤ Redis Streams' p99",
         _case(4, _W4, "p99"), "<=", 1.0, _case(4, _W4, "p99", _REDIS), unit="µs"),
    Goal("workload 6, 64 client processes", "≥ 0.9× workload 1's end-to-end rate",
         _case(6, 64, "e2e_rps"), ">=", 0.9, _W1),
)


def value_of(doc, source):
    """The figure ``source`` names in results document ``doc`` (module doc), or None."""
    kind = source[0]
    if kind == "machine":
        return (doc.get("machine") or {}).get(source[1])
    if kind == "producer_perf":
        return ((doc.get("producer_perf") or {}).get(source[1]) or {}).get("rps")
    _, workload, x, peer, name = source
    entry = _entry(doc, workload, x, peer)
    if entry is None or "figures" not in entry:
        return None
    figures = entry["figures"]
    if name in LOWER_IS_BETTER:
        return (figures.get("latency") or {}).get(name)
    return figures.get(name)


def _entry(doc, workload, x, peer):
    cases = doc.get("workloads", {}).get(str(workload), {}).get("cases", [])
    return next((e for e in cases if e["peer"] == peer and e["x"] == x), None)


def evaluate(doc):
    """Every goal of GOALS judged on ``doc`` (module doc)."""
    return [_judge(doc, goal) for goal in GOALS]


def _judge(doc, goal):
    value = value_of(doc, goal.value)
    reference = None if goal.reference is None else value_of(doc, goal.reference)
    entry = {"name": goal.name, "goal": goal.goal, "value": value, "reference": reference,
             "ratio": None, "met": None, "unit": goal.unit}
    if goal.reference is None:
        threshold = goal.factor
    elif reference:
        threshold = goal.factor * reference * goal.scale
        entry["ratio"] = None if value is None else value / (reference * goal.scale)
    else:
        threshold = None
    if value is not None and threshold is not None:
        entry["met"] = value >= threshold if goal.comparison == ">=" else value <= threshold
    entry["measured"] = _measured(doc, goal, entry)
    note = _behind(doc, goal)
    if note:
        entry["note"] = note
    return entry


def _measured(doc, goal, entry):
    if entry["met"] is None:
        missing = [s for s in (goal.value, goal.reference) if s is not None
                   and value_of(doc, s) is None]
        return "not measured" + _why(doc, missing)
    shown = _show(entry["value"], goal.unit)
    if entry["ratio"] is None:
        return shown
    against = _show(entry["reference"] * goal.scale, goal.unit)
    return f"{entry['ratio']:.2f}× ({shown} against {against})"


def _why(doc, missing):
    """" (--quick runs no workload 6)" when the run's profile has no workload a missing
    figure needs; "" otherwise."""
    profile = doc.get("profile")
    sizes = PROFILES.get(profile, {})
    absent = sorted({s[1] for s in missing if s[0] == "case" and s[1] not in sizes}
                    | ({1} if any(s[0] == "producer_perf" for s in missing)
                       and 1 not in sizes else set()))
    if not absent or profile == "full":
        return ""
    names = ", ".join(str(w) for w in absent)
    return f" (--{profile} runs no workload {names})"


def _show(value, unit):
    if unit == "µs":
        return f"{value:,.0f} µs"
    if unit == "MB/s":
        return f"{value:,.0f} MB/s"
    return f"{value:,.0f} rec/s"


def _behind(doc, goal):
    """Why a latency goal's comparison is not like for like: a sender that fell behind."""
    notes = []
    for source in (goal.value, goal.reference):
        if source is None or source[0] != "case" or source[4] not in LOWER_IS_BETTER:
            continue
        _, workload, x, peer, _ = source
        entry = _entry(doc, workload, x, peer)
        if entry is None or "figures" not in entry:
            continue
        rate = entry.get("params", {}).get("rate") or x
        achieved = entry["figures"].get("achieved_rate") or 0
        if isinstance(rate, (int, float)) and achieved < BEHIND * rate:
            notes.append(f"{peer}'s sender fell behind ({achieved:,.0f} of {rate:,.0f} "
                         f"records/s): not a like-for-like comparison")
    return "; ".join(notes)
