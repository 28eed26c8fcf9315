"""The verdict on a chaos run's history (``history.History``): pure functions, no I/O.

Judged as Kafka's replication_test and Jepsen's Kafka checker judge. Anomalies (each a
dict with ``kind`` and what identifies it):

- ``lost``: an acknowledged record (``ok``) that the final drain did not read, in a
  partition with no unclean election since it was acknowledged;
- ``moved``: an acknowledged record read somewhere, but the acknowledged (partition,
  offset) holds another record (the value read AT that offset, by any reader);
- ``reordered``: one producer's records in a partition's final log, in offset order and
  with re-appearances of seqs already seen dropped, going backwards (producers have one
  request in flight per broker, or are idempotent);
- ``inconsistent-read``: the same offset read with two values (by any consumers);
- ``undrained``: a partition the final drain could not read to its high watermark (its
  losses cannot be told apart from what it did not read);
- ``replica-divergence``: replicas whose logs differ below the high watermark
  (``replicas.compare_replicas``, carried in ``History.replicas``);
- ``duplicated`` only with ``idempotent=True``: one producer's seq at two offsets.

Reported, not anomalies: duplicates without idempotence (Kafka's at-least-once: a batch
appended whose acknowledgement the producer never got is sent again and appended again),
as ``Verdict.duplicates`` and the count ``duplicates``; records lost to an unclean election
and offsets read with two values whose first read came before an unclean election of
their partition (``Verdict.unclean_losses``: the new leader's log replaced them, which
Kafka allows, R11); unavailability windows: per partition, the spans with no
leader on the metadata page, and the spans from a failed or unknown send until the next
acknowledged one on that partition; overlapping spans are merged, each with its length and
sources. Owner: whoever calls it; it keeps no state.
"""
from __future__ import annotations

import collections
import dataclasses

from cluster.tools.chaos.workload import parse_value

#: Fault log events that are faults (the others restart, resume, skip or heal).
FAULTS = ("kill", "terminate", "pause", "truncate", "divergent-writes", "flip")


@dataclasses.dataclass
class Verdict:
    """The anomalies, the unavailability windows, counts and what is reported besides."""

    anomalies: list
    windows: list
    counts: dict
    duplicates: list = dataclasses.field(default_factory=list)
    idempotent: bool = False  # the producers were: the duplicates are anomalies
    unclean_losses: list = dataclasses.field(default_factory=list)
    unclean_elections: list = dataclasses.field(default_factory=list)
    #: the transactional copy's counts (``copy_checker``), empty for other workloads
    copy: dict = dataclasses.field(default_factory=dict)

    @property
    def ok(self):
        return not self.anomalies

    def by_kind(self):
        """{anomaly kind: how many}."""
        return dict(collections.Counter(a["kind"] for a in self.anomalies))

    def to_json(self):
        return {"ok": self.ok, "anomalies_by_kind": self.by_kind(),
                "anomalies": self.anomalies, "unavailability": self.windows,
                "counts": self.counts, "duplicates": self.duplicates,
                "idempotent": self.idempotent,
                "unclean_elections": self.unclean_elections,
                "unclean_losses": self.unclean_losses, "copy": self.copy}


def check(history, idempotent=False):
    """The Verdict on ``history`` (module doc); ``idempotent``: the producers were
    idempotent, so a duplicate is an anomaly."""
    acks = [op for op in history.ops if op["op"] == "ok"]
    acked = {(op["p"], op["seq"]): (op["partition"], op["offset"]) for op in acks}
    undrained = set(history.drain.get("undrained", []))
    reads = history.reads + history.drain_reads
    elections = unclean_elections(history.leadership)
    missing = lost(acked, history.drain_reads, undrained)
    acked_at = {(op["p"], op["seq"]): op["t"] for op in acks}
    unclean = [a for a in missing if excused_by_unclean_election(a, acked_at, elections)]
    duplicates = duplicated(reads)
    anomalies = [a for a in missing if a not in unclean]
    anomalies += moved(acked, reads)
    if idempotent:
        anomalies += duplicates
    anomalies += reordered(history.drain_reads)
    inconsistent = inconsistent_reads(reads)
    replaced = [a for a in inconsistent if replaced_by_unclean_election(a, elections)]
    anomalies += [a for a in inconsistent if a not in replaced]
    anomalies += [{"kind": "undrained", "partition": p} for p in sorted(undrained)]
    anomalies += [{"kind": "replica-divergence", **d} for d in history.replicas]
    outcomes = collections.Counter(op["op"] for op in history.ops if op["op"] != "invoke")
    counts = {"sent": sum(1 for op in history.ops if op["op"] == "invoke"),
              "acknowledged": outcomes["ok"], "failed": outcomes["fail"],
              "unknown": outcomes["info"], "read": len(history.reads),
              "drained": len(history.drain_reads), "duplicates": len(duplicates),
              "lost_unclean_election": len(unclean),
              "inconsistent_unclean_election": len(replaced),
              "faults": sum(1 for f in history.faults if f["fault"] in FAULTS)}
    return Verdict(anomalies, unavailability(history), counts, duplicates, idempotent,
                   unclean + replaced, elections)


def lost(acked, drain_reads, undrained=()):
    """Acknowledged records absent from the final drain (partitions drained only)."""
    found = {parse_value(r["value"]) for r in drain_reads}
    return [{"kind": "lost", "producer": p, "seq": seq, "partition": partition,
             "offset": offset}
            for (p, seq), (partition, offset) in sorted(acked.items())
            if (p, seq) not in found and partition not in undrained]


def unclean_elections(leadership):
    """``[{"partition", "t", "leader", "isr"}]``: the leadership changes that made a
    leader outside the partition's ISR as last seen (an unclean election)."""
    elections, isr = [], {}
    for change in sorted(leadership, key=lambda c: c["t"]):
        partition, leader = change["partition"], change["leader"]
        before = isr.get(partition)
        if leader >= 0 and before is not None and leader not in before:
            elections.append({"partition": partition, "t": change["t"], "leader": leader,
                              "isr": list(before)})
        isr[partition] = change["isr"]
    return elections


def excused_by_unclean_election(loss, acked_at, elections):
    """Whether a lost record was acknowledged before an unclean election of its
    partition (Kafka then keeps only what the new leader had)."""
    t = acked_at.get((loss["producer"], loss["seq"]))
    return t is not None and any(e["partition"] == loss["partition"] and e["t"] >= t
                                 for e in elections)


def moved(acked, reads):
    """Acknowledged records read somewhere whose acknowledged (partition, offset) was
    read holding another record."""
    at = collections.defaultdict(set)   # (partition, offset) -> values read there
    found = set()
    for read in reads:
        at[read["partition"], read["offset"]].add(read["value"])
        found.add(parse_value(read["value"]))
    anomalies = []
    for key, place in sorted(acked.items()):
        held = {parse_value(v) for v in at.get(place, ())}
        if key in found and held and key not in held:
            anomalies.append({"kind": "moved", "producer": key[0], "seq": key[1],
                              "acknowledged": list(place),
                              "holds": sorted(at[place])})
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


def reordered(drain_reads):
    """Per partition of the final log, one producer's seqs going backwards once the
    re-appearances of seqs already seen are dropped."""
    anomalies = []
    seen = collections.defaultdict(set)  # (partition, producer) -> seqs
    last = {}  # (partition, producer) -> (offset, highest seq so far)
    for read in sorted(drain_reads, key=lambda r: (r["partition"], r["offset"])):
        key = parse_value(read["value"])
        if key is None:
            continue
        slot = (read["partition"], key[0])
        if key[1] in seen[slot]:
            continue  # a duplicate (a retried batch): reported as such
        seen[slot].add(key[1])
        previous = last.get(slot)
        if previous is not None and previous[1] > key[1]:
            anomalies.append({"kind": "reordered", "partition": read["partition"],
                              "producer": key[0], "offset": read["offset"], "seq": key[1],
                              "after_offset": previous[0], "after_seq": previous[1]})
        else:
            last[slot] = (read["offset"], key[1])
    return anomalies


def inconsistent_reads(reads):
    """Offsets read with more than one value, with the time of their first read
    (``first_read``)."""
    values = collections.defaultdict(set)
    first = {}
    for read in reads:
        place = (read["partition"], read["offset"])
        values[place].add(read["value"])
        first[place] = min(first.get(place, read["t"]), read["t"])
    return [{"kind": "inconsistent-read", "partition": partition, "offset": offset,
             "values": sorted(seen), "first_read": first[partition, offset]}
            for (partition, offset), seen in sorted(values.items()) if len(seen) > 1]


def replaced_by_unclean_election(inconsistent, elections):
    """Whether an offset read with two values was first read before an unclean election
    of its partition (the new leader's log replaced it, as Kafka allows)."""
    return any(e["partition"] == inconsistent["partition"]
               and e["t"] >= inconsistent["first_read"] for e in elections)


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
