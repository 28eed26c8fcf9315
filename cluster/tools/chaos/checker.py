"""The verdict on a chaos run's history (``history.History``): pure functions, no I/O.

Anomalies (each a dict with ``kind`` and what identifies it), after Jepsen's Kafka checker
and Kafka's replication_test:

- ``lost``: an acknowledged record (``ok``) that the final drain did not read;
- ``moved``: an acknowledged record read at an offset other than the one acknowledged;
- ``duplicated``: one producer's sequence number read at two offsets;
- ``reordered``: in one partition's final log, one producer's acknowledged sequence
  numbers not rising with the offsets (producers send one at a time, in flight 1);
- ``inconsistent-read``: the same offset read with two values (by any consumers);
- ``undrained``: a partition the final drain could not read to its high watermark (its
  losses cannot be told apart from what it did not read);
- ``replica-divergence``: replicas whose logs differ below the high watermark
  (``replicas.compare_replicas``, carried in ``History.replicas``).

Unavailability windows are reported, not counted as anomalies: per partition, the spans
with no leader on the metadata page, and the spans from a failed or unknown send until the
next acknowledged one on that partition; overlapping spans are merged, each with its
length and sources. Owner: whoever calls it; it keeps no state.
"""
from __future__ import annotations

import collections
import dataclasses

from cluster.tools.chaos.workload import parse_value

#: Fault log events that are faults (the others restart, resume, skip or heal).
FAULTS = ("kill", "terminate", "pause", "truncate", "divergent-writes")


@dataclasses.dataclass
class Verdict:
    """The anomalies, the unavailability windows and counts of a history."""

    anomalies: list
    windows: list
    counts: dict

    @property
    def ok(self):
        return not self.anomalies

    def by_kind(self):
        """{anomaly kind: how many}."""
        return dict(collections.Counter(a["kind"] for a in self.anomalies))

    def to_json(self):
        return {"ok": self.ok, "anomalies_by_kind": self.by_kind(),
                "anomalies": self.anomalies, "unavailability": self.windows,
                "counts": self.counts}


def check(history):
    """The Verdict on ``history`` (module doc)."""
    acked = {(op["p"], op["seq"]): (op["partition"], op["offset"])
             for op in history.ops if op["op"] == "ok"}
    undrained = set(history.drain.get("undrained", []))
    anomalies = []
    anomalies += lost(acked, history.drain_reads, undrained)
    anomalies += moved(acked, history.reads + history.drain_reads)
    anomalies += duplicated(history.reads + history.drain_reads)
    anomalies += reordered(acked, history.drain_reads)
    anomalies += inconsistent_reads(history.reads + history.drain_reads)
    anomalies += [{"kind": "undrained", "partition": p} for p in sorted(undrained)]
    anomalies += [{"kind": "replica-divergence", **d} for d in history.replicas]
    outcomes = collections.Counter(op["op"] for op in history.ops if op["op"] != "invoke")
    counts = {"sent": sum(1 for op in history.ops if op["op"] == "invoke"),
              "acknowledged": outcomes["ok"], "failed": outcomes["fail"],
              "unknown": outcomes["info"], "read": len(history.reads),
              "drained": len(history.drain_reads),
              "faults": sum(1 for f in history.faults if f["fault"] in FAULTS)}
    return Verdict(anomalies, unavailability(history), counts)


def lost(acked, drain_reads, undrained=()):
    """Acknowledged records absent from the final drain (partitions drained only)."""
    found = {parse_value(r["value"]) for r in drain_reads}
    return [{"kind": "lost", "producer": p, "seq": seq, "partition": partition,
             "offset": offset}
            for (p, seq), (partition, offset) in sorted(acked.items())
            if (p, seq) not in found and partition not in undrained]


def moved(acked, reads):
    """Acknowledged records read at another offset than acknowledged."""
    anomalies, seen = [], set()
    for read in reads:
        key = parse_value(read["value"])
        where = acked.get(key)
        place = (read["partition"], read["offset"])
        if where is not None and where != place and (key, place) not in seen:
            seen.add((key, place))
            anomalies.append({"kind": "moved", "producer": key[0], "seq": key[1],
                              "acknowledged": list(where), "read": list(place)})
    return anomalies


def duplicated(reads):
    """Producer sequence numbers read at more than one (partition, offset)."""
    places = collections.defaultdict(set)
    for read in reads:
        key = parse_value(read["value"])
        if key is not None:
            places[key].add((read["partition"], read["offset"]))
    return [{"kind": "duplicated", "producer": p, "seq": seq,
             "at": [list(place) for place in sorted(where)]}
            for (p, seq), where in sorted(places.items()) if len(where) > 1]


def reordered(acked, drain_reads):
    """Per partition of the final log, acknowledged seqs of one producer not rising."""
    anomalies = []
    last = {}  # (partition, producer) -> (offset, seq)
    for read in sorted(drain_reads, key=lambda r: (r["partition"], r["offset"])):
        key = parse_value(read["value"])
        if key is None or key not in acked:
            continue
        slot = (read["partition"], key[0])
        previous = last.get(slot)
        if previous is not None and previous[1] > key[1]:  # equal: a duplicate
            anomalies.append({"kind": "reordered", "partition": read["partition"],
                              "producer": key[0], "offset": read["offset"], "seq": key[1],
                              "after_offset": previous[0], "after_seq": previous[1]})
        last[slot] = (read["offset"], key[1])
    return anomalies


def inconsistent_reads(reads):
    """Offsets read with more than one value."""
    values = collections.defaultdict(set)
    for read in reads:
        values[read["partition"], read["offset"]].add(read["value"])
    return [{"kind": "inconsistent-read", "partition": partition, "offset": offset,
             "values": sorted(seen)}
            for (partition, offset), seen in sorted(values.items()) if len(seen) > 1]


def unavailability(history):
    """The merged unavailability windows per partition (module doc), sorted by start:
    ``{"partition", "start", "end", "seconds", "sources"}`` (epoch seconds)."""
    end_of_run = history.run.get("end") or max(
        [e["t"] for e in history.ops + history.leadership] or [0.0])
    spans = collections.defaultdict(list)  # partition -> [(start, end, source)]
    offline = {}
    for change in sorted(history.leadership, key=lambda c: c["t"]):
        partition = change["partition"]
        if change["leader"] < 0:
            offline.setdefault(partition, change["t"])
        elif partition in offline:
            spans[partition].append((offline.pop(partition), change["t"], "no leader"))
    for partition, start in offline.items():
        spans[partition].append((start, end_of_run, "no leader"))
    invoked = {(op["p"], op["seq"]): op["t"] for op in history.ops if op["op"] == "invoke"}
    failing = {}  # partition -> when its first failing send since the last ok started
    for op in sorted((o for o in history.ops if o["op"] != "invoke"), key=lambda o: o["t"]):
        partition = op.get("partition")
        if partition is None:
            continue
        if op["op"] == "ok":
            if partition in failing:
                spans[partition].append((failing.pop(partition), op["t"], "produce errors"))
        else:
            failing.setdefault(partition, invoked.get((op["p"], op["seq"]), op["t"]))
    for partition, start in failing.items():
        spans[partition].append((start, end_of_run, "produce errors"))
    windows = []
    for partition, found in spans.items():
        merged = []
        for start, end, source in sorted(found):
            if merged and start <= merged[-1]["end"]:
                merged[-1]["end"] = max(merged[-1]["end"], end)
                if source not in merged[-1]["sources"]:
                    merged[-1]["sources"].append(source)
            else:
                merged.append({"partition": partition, "start": start, "end": end,
                               "sources": [source]})
        windows.extend(merged)
    for window in windows:
        window["seconds"] = round(window["end"] - window["start"], 3)
    return sorted(windows, key=lambda w: (w["start"], w["partition"]))
