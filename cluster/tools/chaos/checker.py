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
- ``unsettled``: once the faults stopped, not every partition was led with a full ISR
  within ``--settle`` (``History.run["settled"]``): a replica that cannot catch up, e.g.
  one that cannot fetch a large batch;
- ``duplicated`` only with ``idempotent=True``: one producer's seq at two offsets.

Reported, not anomalies: duplicates without idempotence (Kafka's at-least-once: a batch
appended whose acknowledgement the producer never got is sent again and appended again),
as ``Verdict.duplicates`` and the count ``duplicates``; records lost to an unclean election
and offsets read with two values whose first read came before an unclean election of
their partition (``Verdict.unclean_losses``: the new leader's log replaced them, which
Kafka allows with unclean.leader.election.enable); unavailability windows, per partition,
from four sources: "no leader", the spans with no leader on the metadata page; "leader
down", from a fault that took down the broker leading the partition (kill, SIGTERM, SIGSTOP) until
the first acknowledged send after the partition was led again (a new leader on the page, or the
broker back) — the controller elects a successor within tens of milliseconds, faster than
the monitor samples the page, so "no leader" alone almost never shows a leader's death;
"produce errors", from a failed or unknown send until the next acknowledged one on that
partition; "acks stalled", a send of the run (not one before its start: the clients'
first sends) acknowledged more than ``STALLED`` seconds after it was sent (a paused
follower holding acks=all back). Overlapping spans are merged, each with
its length and sources. Owner: whoever calls it; it keeps no state.
"""
from __future__ import annotations

import collections
import dataclasses

import numpy as np

from cluster.tools.chaos.columns import (
    FAIL,
    INFO,
    OK,
    STALLED,
    Outcomes,
    Reads,
    place_keys,
    record_keys,
)

#: Acknowledged records looked up at a time (bounds the memory of the checks).
CHUNK = 1 << 20
#: Fault log events that are faults (the others restart, resume, skip or heal).
FAULTS = ("kill", "terminate", "pause", "truncate", "divergent-writes", "flip")
#: Faults after which a broker answers nothing until it is back (``BACK``).
DOWN = ("kill", "terminate", "pause")
BACK = ("start", "resume")


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


def outcomes_of(history):
    """``history.ops`` as ``columns.Outcomes`` (hand-made histories hold dicts)."""
    ops = history.ops
    return ops if isinstance(ops, Outcomes) else Outcomes.of_dicts(ops)


def reads_of(reads):
    """Reads given as dicts or as ``columns.Reads``, as Reads."""
    return reads if isinstance(reads, Reads) else Reads.of_dicts(reads)


def check(history, idempotent=False):
    """The Verdict on ``history`` (module doc); ``idempotent``: the producers were
    idempotent, so a duplicate is an anomaly."""
    ops = outcomes_of(history)
    drain = reads_of(history.drain_reads)
    consumers = reads_of(history.reads)
    reads = Reads.concat([consumers, drain])
    acked = np.flatnonzero(ops.kind == OK)
    if len(ops) < 1 << 31:
        acked = acked.astype(np.int32)  # half the memory
    undrained = set(history.drain.get("undrained", []))
    elections = unclean_elections(history.leadership)
    missing = lost(ops, acked, drain, undrained)
    unclean = [a for a in missing if excused_by_unclean_election(a, elections)]
    duplicates = duplicated(reads)
    anomalies = [a for a in missing if a not in unclean]
    anomalies += moved(ops, acked, reads)
    if idempotent:
        anomalies += duplicates
    anomalies += reordered(drain)
    inconsistent = inconsistent_reads(reads)
    replaced = [a for a in inconsistent if replaced_by_unclean_election(a, elections)]
    anomalies += [a for a in inconsistent if a not in replaced]
    anomalies += [{"kind": "undrained", "partition": p} for p in sorted(undrained)]
    anomalies += [{"kind": "replica-divergence", **d} for d in history.replicas]
    if history.run.get("settled") is False:
        anomalies.append({"kind": "unsettled", "reason": "not every partition was led with "
                          "a full ISR within --settle once the faults had stopped"})
    counts = {"sent": ops.sent, "acknowledged": len(acked),
              "failed": int(np.count_nonzero(ops.kind == FAIL)),
              "unknown": int(np.count_nonzero(ops.kind == INFO)), "read": consumers.count,
              "drained": drain.count, "duplicates": len(duplicates),
              "lost_unclean_election": len(unclean),
              "inconsistent_unclean_election": len(replaced),
              "faults": sum(1 for f in history.faults if f["fault"] in FAULTS)}
    return Verdict(anomalies, unavailability(history, ops), counts, duplicates, idempotent,
                   unclean + replaced, elections)


def lost(ops, acked, drain, undrained=()):
    """Acknowledged records absent from the final drain (partitions drained only), each
    with when it was acknowledged (``acknowledged_at``)."""
    drained = drain.keys()
    drained.sort()
    gone = []
    for start in range(0, len(acked), CHUNK):  # a chunk at a time: bounded memory
        chunk = acked[start:start + CHUNK]
        keys = record_keys(ops.p[chunk], ops.seq[chunk])
        at = np.minimum(np.searchsorted(drained, keys), max(len(drained) - 1, 0))
        absent = (drained[at] != keys) if len(drained) else np.ones(len(chunk), bool)
        gone.append(chunk[absent & ~np.isin(ops.partition[chunk], list(undrained))])
    del drained
    rows = np.concatenate(gone) if gone else acked[:0]
    order = np.lexsort((ops.seq[rows], ops.p[rows]))
    found, seen = [], set()
    for row in rows[order]:
        key = (int(ops.p[row]), int(ops.seq[row]))
        if key in seen:
            continue
        seen.add(key)
        found.append({"kind": "lost", "producer": key[0], "seq": key[1],
                      "partition": int(ops.partition[row]), "offset": int(ops.offset[row]),
                      "acknowledged_at": float(ops.t[row])})
    return found


def unclean_elections(leadership):
    """``[{"partition", "t", "leader", "isr"}]``: the leadership changes that made a
    leader outside the partition's ISR and ELR as last seen (an unclean election; an
    eligible leader replica of KIP-966 holds every acknowledged record and leads cleanly)."""
    elections, eligible, isr = [], {}, {}
    for change in sorted(leadership, key=lambda c: c["t"]):
        partition, leader = change["partition"], change["leader"]
        before = eligible.get(partition)
        if leader >= 0 and before is not None and leader not in before:
            elections.append({"partition": partition, "t": change["t"], "leader": leader,
                              "isr": list(isr[partition])})
        isr[partition] = change["isr"]
        eligible[partition] = set(change["isr"]) | set(change.get("elr", ()))
    return elections


def excused_by_unclean_election(loss, elections):
    """Whether a lost record was acknowledged before an unclean election of its
    partition (Kafka then keeps only what the new leader had)."""
    return any(e["partition"] == loss["partition"] and e["t"] >= loss["acknowledged_at"]
               for e in elections)


def moved(ops, acked, reads):
    """Acknowledged records read somewhere whose acknowledged (partition, offset) was
    read holding another record. (Lean on memory: the places are looked up in the reads
    sorted by place, the few that hold something else examined one by one.)"""
    read_places = reads.places()
    if not len(read_places):
        return []  # nothing was read: nothing read elsewhere
    order = None  # the drain alone is sorted: its rows are their own order
    if not np.all(read_places[1:] >= read_places[:-1]):
        order = np.argsort(read_places, kind="stable")
        read_places = read_places[order]
    found = []
    for start in range(0, len(acked), CHUNK):  # a chunk at a time: bounded memory
        chunk = acked[start:start + CHUNK]
        places = place_keys(ops.partition[chunk], ops.offset[chunk])
        at = np.minimum(np.searchsorted(read_places, places), len(read_places) - 1)
        rows = at if order is None else order[at]
        # the common case: the first value read at the place is the record: not moved
        held = read_places[at] == places
        held &= (reads.p[rows] != ops.p[chunk]) | (reads.seq[rows] != ops.seq[chunk])
        found.append(start + np.flatnonzero(held))
    suspect = np.concatenate(found) if found else np.zeros(0, np.int64)
    if not len(suspect):
        return []
    at = np.searchsorted(read_places, place_keys(ops.partition[acked[suspect]],
                                                 ops.offset[acked[suspect]]))
    read_keys = _read_among(reads, record_keys(ops.p[acked[suspect]],
                                               ops.seq[acked[suspect]]))
    anomalies = {}
    for m, n in enumerate(suspect):
        row = acked[n]
        key = (int(ops.p[row]), int(ops.seq[row]))
        place = place_keys(ops.partition[row:row + 1], ops.offset[row:row + 1])[0]
        end = np.searchsorted(read_places, place, side="right")
        there = range(at[m], end) if order is None else order[at[m]:end]
        held = {(int(reads.p[r]), int(reads.seq[r])) for r in there}
        if key not in held and (key[0] << 32 | key[1]) in read_keys:
            anomalies[key] = {"kind": "moved", "producer": key[0], "seq": key[1],
                              "acknowledged": [int(ops.partition[row]),
                                               int(ops.offset[row])],
                              "holds": sorted({reads.value(r) for r in there})}
    return [anomalies[key] for key in sorted(anomalies)]


def _read_among(reads, keys):
    """The record keys among ``keys`` that some read holds (a chunk of reads at a time)."""
    keys = np.unique(keys)
    found = set()
    for start in range(0, len(reads), CHUNK):
        part = slice(start, start + CHUNK)
        read = record_keys(reads.p[part], reads.seq[part])[reads.p[part] >= 0]
        found.update(read[np.isin(read, keys)].tolist())
    return found


def duplicated(reads):
    """Producer sequence numbers read at more than one (partition, offset)."""
    reads = reads_of(reads)
    candidates = _repeated(reads.keys())  # read more than once: few, then each looked at
    found = collections.defaultdict(set)
    for start in range(0, len(reads), CHUNK):  # a chunk at a time: bounded memory
        part = slice(start, start + CHUNK)
        keys = record_keys(reads.p[part], reads.seq[part])
        hit = np.flatnonzero(np.isin(keys, candidates) & (reads.p[part] >= 0))
        places = place_keys(reads.partition[part][hit], reads.offset[part][hit])
        for key, place in zip(keys[hit].tolist(), places.tolist(), strict=True):
            found[key].add(place)
    return [{"kind": "duplicated", "producer": key >> 32, "seq": key & 0xFFFFFFFF,
             "at": [_place(place) for place in sorted(where)]}
            for key, where in sorted(found.items()) if len(where) > 1]


def _repeated(values):
    """The values that occur more than once (sorted), sorting ``values`` in place."""
    values.sort()
    return np.unique(values[1:][values[1:] == values[:-1]])


def _place(place):
    return [place >> 40, place & ((1 << 40) - 1)]


def reordered(drain):
    """Per partition of the final log, one producer's seqs going backwards once the
    re-appearances of seqs already seen are dropped. (A partition at a time, then a
    producer at a time: bounded memory.)"""
    order, partitions = None, drain.partition  # ``load``'s drain is sorted by place
    places = drain.places()
    if not np.all(places[1:] >= places[:-1]):
        order = np.argsort(places, kind="stable")
        partitions = partitions[order]
    del places
    anomalies, start = [], 0
    while start < len(partitions):
        partition = int(partitions[start])
        end = int(np.searchsorted(partitions, partition, side="right"))
        # this partition's rows, in offset order
        rows = np.arange(start, end) if order is None else order[start:end]
        by_p = rows[np.argsort(drain.p[rows], kind="stable")]
        producers = drain.p[by_p]
        first = int(np.searchsorted(producers, 0))  # p < 0: not a workload value
        while first < len(by_p):
            p = int(producers[first])
            last = int(np.searchsorted(producers, p, side="right"))
            anomalies += _backwards(partition, p, drain.seq[by_p[first:last]],
                                    drain.offset[by_p[first:last]])
            first = last
        start = end
    return anomalies


def _backwards(partition, p, seq, offset):
    """``reordered`` of one producer's records in one partition, in offset order."""
    _, firsts = np.unique(seq, return_index=True)  # re-appearances (a retried batch):
    firsts.sort()  # reported as duplicates, dropped here
    seq, offset = seq[firsts].astype(np.int64), offset[firsts]
    highest = np.maximum.accumulate(seq)
    anomalies = []
    for n in np.flatnonzero(seq[1:] < highest[:-1]) + 1:
        top = int(highest[n - 1])
        before = np.flatnonzero(seq[:n] == top)
        anomalies.append({"kind": "reordered", "partition": partition, "producer": p,
                          "offset": int(offset[n]), "seq": int(seq[n]),
                          "after_offset": int(offset[before[0]]), "after_seq": top})
    return anomalies


def inconsistent_reads(reads):
    """Offsets read with more than one value, with the time of their first read
    (``first_read``)."""
    reads = reads_of(reads)
    candidates = _repeated(reads.places())  # read more than once: few
    values, first_read = collections.defaultdict(set), {}
    for start in range(0, len(reads), CHUNK):  # a chunk at a time: bounded memory
        part = slice(start, start + CHUNK)
        places = place_keys(reads.partition[part], reads.offset[part])
        hit = np.flatnonzero(np.isin(places, candidates))
        for row, place in zip((start + hit).tolist(), places[hit].tolist(), strict=True):
            values[place].add(reads.value(row))
            t = float(reads.t[row])
            first_read[place] = min(first_read.get(place, t), t)
    anomalies = []
    for place, seen in sorted(values.items()):
        if len(seen) > 1:
            anomalies.append({"kind": "inconsistent-read", "partition": place >> 40,
                              "offset": place & ((1 << 40) - 1), "values": sorted(seen),
                              "first_read": first_read[place]})
    return anomalies


def replaced_by_unclean_election(inconsistent, elections):
    """Whether an offset read with two values was first read before an unclean election
    of its partition (the new leader's log replaced it, as Kafka allows)."""
    return any(e["partition"] == inconsistent["partition"]
               and e["t"] >= inconsistent["first_read"] for e in elections)


def unavailability(history, ops=None):
    """The merged unavailability windows per partition (module doc), sorted by start:
    ``{"partition", "start", "end", "seconds", "sources"}`` (epoch seconds)."""
    ops = outcomes_of(history) if ops is None else ops
    end_of_run = history.run.get("end") or max(
        [float(ops.t.max())] if len(ops) else [] + [e["t"] for e in history.leadership]
        or [0.0])
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
    # a failing run of sends: from the invocation of its first failure (in the order of
    # the outcomes' times) until the next acknowledgement on its partition
    for partition in np.unique(ops.partition[ops.kind != OK]):
        if partition < 0:
            continue
        here = np.flatnonzero(ops.partition == partition)
        here = here[np.argsort(ops.t[here], kind="stable")]
        good = ops.kind[here] == OK
        oks = ops.t[here][good]
        bad = here[~good]
        runs = np.cumsum(good)[~good]  # acknowledgements before each failure
        for number in np.unique(runs):
            row = bad[np.searchsorted(runs, number)]
            end = float(oks[number]) if number < len(oks) else end_of_run
            spans[int(partition)].append((ops.invoked[int(row)], end, "produce errors"))
    began = history.run.get("start") or 0.0  # a client's first send also sets it up
    for row, sent in ops.invoked.items():
        waited = float(ops.t[row]) - sent
        if ops.kind[row] == OK and sent >= began and waited > STALLED:
            spans[int(ops.partition[row])].append((sent, float(ops.t[row]),
                                                   "acks stalled"))
    for partition, start, end in leader_down(history, ops, end_of_run):
        spans[partition].append((start, end, "leader down"))
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


def leader_down(history, ops, end_of_run):
    """``(partition, start, end)`` for each fault that took down a partition's leader (the
    leader the leadership log showed last before the fault): until the first acknowledged
    send on the partition once it is led again — a leader other than the broker on the
    page, or the broker started or resumed — else until then, else the end of the run."""
    changes = sorted(history.leadership, key=lambda c: c["t"])
    acked = ops.kind == OK
    found = []
    for fault in sorted(history.faults, key=lambda f: f["t"]):
        broker = fault.get("broker")
        if fault["fault"] not in DOWN or broker is None:
            continue
        at = fault["t"]
        leaders = {}
        for change in changes:
            if change["t"] > at:
                break
            leaders[change["partition"]] = change["leader"]
        back = min((f["t"] for f in history.faults if f["fault"] in BACK
                    and f.get("broker") == broker and f["t"] > at), default=None)
        for partition, leader in sorted(leaders.items()):
            if leader != broker:
                continue
            led = min((c["t"] for c in changes if c["partition"] == partition and c["t"] > at
                       and c["leader"] >= 0 and c["leader"] != broker), default=None)
            again = min((t for t in (led, back) if t is not None), default=None)
            if again is None:
                found.append((partition, at, end_of_run))
                continue
            times = np.sort(ops.t[acked & (ops.partition == partition)])
            index = int(np.searchsorted(times, again))
            found.append((partition, at, float(times[index]) if index < len(times) else again))
    return found
