"""The verdict on a transactional copy (``copier``): pure functions of a
``history.History``, no I/O.

Judged as Kafka's transactions_test (output = input, no duplicates) and Jepsen's aborted
reads. The input is what the final drain read from the input topic (``drain_reads``); the
output is what the final read_committed consumer read from the output topic
(``output_drain``). Each transaction has a fate from its copier's history (``copier``
module doc): *committed* (commit returned), *aborted* (abort returned), *unknown*
(commit invoked, no answer), *never committed* (begun, commit never invoked) — and it is
*superseded* when it began after a newer incarnation of its copier had initialised (the
older one was fenced by then: whatever it wrote is a zombie's; "newer" by the order of
their init_transactions, ``superseded_at``). Anomalies:

- ``missing``: an input record absent from the output;
- ``duplicated-copy``: an input record at two or more offsets of the output;
- ``unexpected``: an output record that is no copy of an input record;
- ``aborted-read``: a record read_committed (by the final drain or a reader during the
  run) whose transaction was aborted, never committed or superseded (one anomaly per
  transaction and reader, with the count);
- ``torn-transaction``: a committed transaction not wholly in the output, or one of
  unknown outcome partly in it (all of its records or none);
- ``unfenced-zombie``: an incarnation that made a transactional request which succeeded
  after a newer incarnation of its copier had returned from init_transactions: a
  transaction whose commit was asked for after that and returned, or one begun after that
  (superseded) whose commit or random abort returned (one anomaly per incarnation, naming
  the transactions). Kafka fences a zombie at its next transactional request once a newer
  incarnation has initialised; one that made none (it was killed, stopped or ended before
  a newer one initialised) was never fenced and needs not be. The times compared are
  safe across processes: ``init`` is logged after init_transactions returned, ``begin``
  and ``commit-invoke`` before the calls they announce;
- ``inconsistent-read``: an output offset read with two values;
- ``copy-incomplete``: the copiers did not catch up with the input, a transaction was
  still open when the output was read, or an output partition was not read to its end
  (``History.copy``).

Reported, not anomalies: read_uncommitted records of transactions that were not
committed (a read_uncommitted consumer reads aborted records, as in Kafka).
Owner: whoever calls it; it keeps no state.
"""
from __future__ import annotations

import collections

from cluster.tools.chaos.checker import inconsistent_reads
from cluster.tools.chaos.columns import Reads
from cluster.tools.chaos.copier import parse_copy_value

#: Fates of a transaction (module doc).
COMMITTED, ABORTED, UNKNOWN, NEVER_COMMITTED = ("committed", "aborted", "unknown",
                                                "never committed")


def check(history):
    """(anomalies, counts) of the transactional copy in ``history`` (module doc)."""
    txns = transactions(history.copier_ops)
    superseded = superseded_transactions(history.copier_ops)
    drain = history.drain_reads
    inputs = set(drain.values() if isinstance(drain, Reads) else
                 (r["value"] for r in drain))
    output = history.output_drain
    copied = {parsed[0] for parsed in map(parse_copy_value, (r["value"] for r in output))
              if parsed is not None}
    anomalies = [{"kind": "missing", "value": value} for value in sorted(inputs - copied)]
    anomalies += duplicated_copies(output)
    anomalies += unexpected(inputs, output)
    anomalies += aborted_reads(txns, superseded, output + history.output_reads)
    visible = visible_records(output)
    anomalies += torn_transactions(txns, visible)
    anomalies += unfenced_zombies(history.copier_ops, txns)
    anomalies += inconsistent_reads(output + history.output_reads)
    anomalies += incomplete(history.copy)
    # a copier's last transaction commits its position alone (records 0): not counted
    fates = collections.Counter(t["fate"] for t in txns.values() if t["records"] != 0)
    counts = {
        "input": len(inputs), "output": len(output),
        "copied": len(inputs & copied),
        "transactions_committed": fates[COMMITTED],
        "transactions_aborted": fates[ABORTED],
        "transactions_unknown": fates[UNKNOWN],
        "transactions_unknown_committed": sum(1 for key, t in txns.items()
                                              if t["fate"] == UNKNOWN and visible[key]),
        "transactions_never_committed": fates[NEVER_COMMITTED],
        "incarnations": len({(o["c"], o["i"]) for o in history.copier_ops}),
        "fenced": len({(o["c"], o["i"]) for o in history.copier_ops if o["op"] == "fenced"}),
        "copier_kills": sum(1 for f in history.faults if f["fault"] == "copier-kill"),
        "zombies": sum(1 for f in history.faults if f["fault"] == "zombie"),
        "copier_failures": sum(1 for o in history.copier_ops
                               if o["op"] == "exit" and o["error"]),
        "read_committed_by_readers": len(history.output_reads),
        "read_uncommitted": len(history.output_uncommitted),
        "read_uncommitted_not_committed": sum(
            1 for r in history.output_uncommitted
            if fate_of(txns, r["value"]) in (ABORTED, NEVER_COMMITTED)),
    }
    return anomalies, counts


def transactions(copier_ops):
    """{(copier, incarnation, txn): {"fate", "records", "begun", "asked", "reason"}} (module
    doc; records None: never recorded, the transaction ended before its commit was asked
    for; asked: when its commit was asked for, None if never; reason: an abort's)."""
    txns = {}
    for op in sorted(copier_ops, key=lambda o: o["t"]):
        if "txn" not in op or op["op"] in ("fenced", "txn-error"):
            continue
        key = (op["c"], op["i"], op["txn"])
        txn = txns.setdefault(key, {"fate": NEVER_COMMITTED, "records": None,
                                    "begun": op["t"], "asked": None, "reason": None})
        txn["records"] = op.get("records", txn["records"])
        if op["op"] in ("commit-invoke", "commit"):
            # whether it asked the brokers anything: records or offsets sent (an empty
            # transaction's commit is the producer's alone)
            txn["requests"] = bool(op.get("records") or op.get(
                "offsets", op.get("offset") is not None))
        if op["op"] == "commit-invoke":
            txn["asked"] = op["t"]
            if txn["fate"] == NEVER_COMMITTED:
                txn["fate"] = UNKNOWN
        elif op["op"] == "commit":
            txn["fate"] = COMMITTED
        elif op["op"] == "abort":
            txn["fate"] = ABORTED
            txn["reason"] = op.get("reason")
    return txns


def superseded_at(copier_ops):
    """{(copier, incarnation): (time, incarnation)}: the first time another incarnation of
    the copier that initialised after it was seen returned from init_transactions.

    Incarnations are numbered as they started, not as they initialised (a later one may
    initialise first under load: ``copier`` module doc), so "after" is told from the
    times, safely across processes: Y initialised after X when Y's ``init-invoke`` (logged
    before the call) is later than X's ``init`` (logged after it returned); the epoch Y
    got is then newer. When their calls overlapped the order is unknown and neither is
    taken to supersede the other. Histories without ``init-invoke`` lines fall back to the
    incarnation numbers."""
    inits, invokes = {}, {}
    for op in copier_ops:
        if op["op"] == "init":
            inits[op["c"], op["i"]] = op["t"]
        elif op["op"] == "init-invoke":
            invokes[op["c"], op["i"]] = op["t"]
    found = {}
    for (c, i), done in inits.items():
        later = [(t, j) for (copier, j), t in inits.items()
                 if copier == c and j != i
                 and (invokes[copier, j] > done if (copier, j) in invokes else j > i)]
        if later:
            found[c, i] = min(later)
    return found


def superseded_transactions(copier_ops):
    """The (copier, incarnation, txn) begun after a newer incarnation of the copier had
    returned from init_transactions."""
    since = superseded_at(copier_ops)
    return {(op["c"], op["i"], op["txn"]) for op in copier_ops
            if op["op"] == "begin" and (op["c"], op["i"]) in since
            and op["t"] > since[op["c"], op["i"]][0]}


def fate_of(txns, value):
    """The fate of the transaction an output value was written in (None: not a copy)."""
    parsed = parse_copy_value(value)
    if parsed is None:
        return None
    txn = txns.get(parsed[1:])
    return NEVER_COMMITTED if txn is None else txn["fate"]


def duplicated_copies(output):
    places = collections.defaultdict(list)
    for read in output:
        parsed = parse_copy_value(read["value"])
        if parsed is not None:
            places[parsed[0]].append((read["partition"], read["offset"], read["value"]))
    return [{"kind": "duplicated-copy", "value": value,
             "at": [[p, o] for p, o, _ in sorted(found)],
             "copies": [v for _, _, v in sorted(found)]}
            for value, found in sorted(places.items()) if len(found) > 1]


def unexpected(inputs, output):
    return [{"kind": "unexpected", "partition": r["partition"], "offset": r["offset"],
             "value": r["value"]}
            for r in output
            if parse_copy_value(r["value"]) is None
            or parse_copy_value(r["value"])[0] not in inputs]


def aborted_reads(txns, superseded, reads):
    """One anomaly per (transaction, reader) read_committed though it never committed."""
    found = collections.defaultdict(list)  # (txn key, reader) -> reads
    for read in reads:
        parsed = parse_copy_value(read["value"])
        if parsed is None:
            continue
        key = parsed[1:]
        fate = txns[key]["fate"] if key in txns else NEVER_COMMITTED
        if fate in (ABORTED, NEVER_COMMITTED) or key in superseded:
            found[key, read["c"]].append(read)
    anomalies = []
    for (key, reader), reads_of in sorted(found.items(), key=lambda item: str(item[0])):
        first = min(reads_of, key=lambda r: (r["partition"], r["offset"]))
        anomalies.append({"kind": "aborted-read", "copier": key[0], "incarnation": key[1],
                          "txn": key[2], "reader": reader,
                          "fate": txns[key]["fate"] if key in txns else NEVER_COMMITTED,
                          "superseded": key in superseded, "records": len(reads_of),
                          "first": [first["partition"], first["offset"], first["value"]]})
    return anomalies


def visible_records(output):
    """Counter {(copier, incarnation, txn): records of it in ``output``}."""
    visible = collections.Counter()
    for read in output:
        parsed = parse_copy_value(read["value"])
        if parsed is not None:
            visible[parsed[1:]] += 1
    return visible


def torn_transactions(txns, visible):
    anomalies = []
    for key, txn in sorted(txns.items()):
        seen = visible[key]
        torn = (txn["fate"] == COMMITTED and seen != txn["records"]
                or txn["fate"] == UNKNOWN and seen not in (0, txn["records"]))
        if torn:
            anomalies.append({"kind": "torn-transaction", "copier": key[0],
                              "incarnation": key[1], "txn": key[2], "fate": txn["fate"],
                              "records": txn["records"], "visible": seen})
    return anomalies


def unfenced_zombies(copier_ops, txns):
    """One anomaly per incarnation with a transactional request that succeeded after a
    newer incarnation had initialised (module doc)."""
    since = superseded_at(copier_ops)
    ends = {(o["c"], o["i"]): o.get("error") for o in copier_ops if o["op"] == "exit"}
    late = collections.defaultdict(list)  # (copier, incarnation) -> [(txn, what)]
    for (c, i, number), txn in sorted(txns.items()):
        if (c, i) not in since:
            continue
        at = since[c, i][0]
        if txn["fate"] == COMMITTED and txn.get("requests", True) and (
                txn["begun"] > at or txn["asked"] > at):
            late[c, i].append((number, "committed"))
        elif txn["fate"] == ABORTED and txn["reason"] == "random" and txn["begun"] > at:
            late[c, i].append((number, "aborted"))
    return [{"kind": "unfenced-zombie", "copier": c, "incarnation": i,
             "superseded_by": since[c, i][1], "superseded_at": since[c, i][0],
             "transactions": [number for number, _ in found],
             "committed": sum(1 for _, what in found if what == "committed"),
             "ended": ends.get((c, i), "no exit recorded")}
            for (c, i), found in sorted(late.items())]


def incomplete(copy):
    anomalies = []
    for flag, what in (("caught_up", "the copiers did not catch up with the input"),
                       ("stable", "a transaction was still open in the output")):
        if not copy.get(flag, True):
            anomalies.append({"kind": "copy-incomplete", "reason": what})
    for partition in copy.get("undrained", []):
        anomalies.append({"kind": "copy-incomplete", "partition": partition,
                          "reason": "the output partition was not read to its end"})
    return anomalies
