"""The transactional copy's checker on hand-made histories: a clean copy passes (with an
aborted transaction seen only read_uncommitted, and a transaction of unknown outcome
wholly in or wholly out), and each rule flags what it is for — a missing record, a
duplicate, an aborted read (aborted, never committed, or a zombie's write after it was
fenced), a torn transaction, an unfenced zombie, a copy that did not finish."""
from __future__ import annotations

import pytest

from cluster.tools.chaos import copy_checker
from cluster.tools.chaos.copier import copy_value, parse_copy_value
from cluster.tools.chaos.history import History, load
from cluster.tools.chaos.workload import HistoryWriter

INPUT = ["p0:000000", "p0:000001", "p1:000000", "p1:000001"]


def op(name, c, i, t, **fields):
    return {"op": name, "c": c, "i": i, "t": t, **fields}


def transaction(c, i, txn, t, records, fate="commit"):
    """The copier's lines of one transaction ending in ``fate`` (commit, abort, unknown:
    commit invoked, no answer; begun: nothing after the begin)."""
    lines = [op("begin", c, i, t, txn=txn)]
    if fate == "abort":
        lines.append(op("abort", c, i, t + 0.1, txn=txn, records=records, reason="random"))
    elif fate in ("commit", "unknown"):
        lines.append(op("commit-invoke", c, i, t + 0.1, txn=txn, records=records, offset=9))
        if fate == "commit":
            lines.append(op("commit", c, i, t + 0.2, txn=txn, records=records, offset=9))
    return lines


def read(partition, offset, value, c="drain"):
    return {"op": "read", "c": c, "partition": partition, "offset": offset, "value": value,
            "t": 0.0}


def clean_history():
    """Copier 0 (incarnation 0) copies partition 0 in two transactions, the first aborted
    and done again; copier 1 copies partition 1 in one. The aborted records are in the
    log (read_uncommitted), not read_committed."""
    ops = ([op("init", 0, 0, 1.0)] + transaction(0, 0, 0, 2.0, 2, "abort")
           + transaction(0, 0, 1, 3.0, 2) + [op("init", 1, 0, 1.0)]
           + transaction(1, 0, 0, 2.0, 2))
    aborted = [read(0, 0, copy_value("p0:000000", 0, 0, 0)),
               read(0, 1, copy_value("p1:000000", 0, 0, 0))]
    committed = [read(0, 3, copy_value("p0:000000", 0, 0, 1)),
                 read(0, 4, copy_value("p1:000000", 0, 0, 1)),
                 read(1, 0, copy_value("p0:000001", 1, 0, 0)),
                 read(1, 1, copy_value("p1:000001", 1, 0, 0))]
    return History(drain_reads=[read(p % 2, p // 2, v) for p, v in enumerate(INPUT)],
                   copier_ops=ops, output_drain=committed,
                   output_reads=[dict(r, c=0) for r in committed[:2]],
                   output_uncommitted=aborted + committed,
                   copy={"caught_up": True, "stable": True, "undrained": []})


def kinds(history):
    anomalies, _counts = copy_checker.check(history)
    return sorted(a["kind"] for a in anomalies)


def test_a_clean_copy_passes_and_counts_what_read_uncommitted_shows():
    anomalies, counts = copy_checker.check(clean_history())
    assert anomalies == []
    assert counts["input"] == counts["output"] == counts["copied"] == 4
    assert counts["transactions_committed"] == 2 and counts["transactions_aborted"] == 1
    assert counts["read_uncommitted"] == 6
    assert counts["read_uncommitted_not_committed"] == 2  # reported, not an anomaly


def test_an_input_record_absent_from_the_output_is_missing():
    history = clean_history()
    history.output_drain.pop()
    history.copier_ops[-1]["records"] = history.copier_ops[-2]["records"] = 1
    anomalies, _counts = copy_checker.check(history)
    assert anomalies == [{"kind": "missing", "value": "p1:000001"}]


def test_an_input_record_copied_twice_is_a_duplicate():
    history = clean_history()
    history.copier_ops += [op("init", 0, 1, 5.0)] + transaction(0, 1, 0, 6.0, 1)
    history.output_drain.append(read(0, 6, copy_value("p0:000000", 0, 1, 0)))
    anomalies, _counts = copy_checker.check(history)
    assert [a["kind"] for a in anomalies] == ["duplicated-copy"]
    assert anomalies[0]["value"] == "p0:000000"
    assert anomalies[0]["at"] == [[0, 3], [0, 6]]


def test_a_record_that_is_no_copy_of_the_input_is_unexpected():
    history = clean_history()
    history.output_drain.append(read(1, 2, "garbage"))
    assert kinds(history) == ["unexpected"]


@pytest.mark.parametrize("fate", ["abort", "begun"])
def test_a_transaction_that_did_not_commit_read_committed_is_an_aborted_read(fate):
    history = clean_history()
    # copier 1's transaction 1 aborted (or never asked to commit), its record read
    history.copier_ops += transaction(1, 0, 1, 4.0, 1, fate)
    history.output_reads.append(read(1, 2, copy_value("p1:000001", 1, 0, 1), c=1))
    anomalies, counts = copy_checker.check(history)
    assert [a["kind"] for a in anomalies] == ["aborted-read"]
    assert counts["transactions_aborted" if fate == "abort" else
                  "transactions_never_committed"] == (2 if fate == "abort" else 1)
    found = anomalies[0]
    assert (found["copier"], found["incarnation"], found["txn"], found["reader"]) == (
        1, 0, 1, 1)
    assert found["fate"] == ("aborted" if fate == "abort" else "never committed")
    assert found["records"] == 1 and found["first"][:2] == [1, 2]


def test_a_zombie_write_after_its_fencing_is_an_aborted_read_and_an_unfenced_zombie():
    """Incarnation 1 of copier 1 initialised at t=3.5 (fencing incarnation 0); incarnation
    0 began transaction 1 after that and its commit returned, its record visible."""
    history = clean_history()
    history.faults = [{"fault": "zombie", "c": 1, "i": 1, "zombie": 0, "t": 3.4}]
    history.copier_ops += [op("init", 1, 1, 3.5)] + transaction(1, 0, 1, 4.0, 1)
    history.output_drain.append(read(1, 2, copy_value("p1:000001", 1, 0, 1)))
    anomalies, _counts = copy_checker.check(history)
    by_kind = {}
    for anomaly in anomalies:
        by_kind.setdefault(anomaly["kind"], []).append(anomaly)
    assert sorted(by_kind) == ["aborted-read", "duplicated-copy", "unfenced-zombie"]
    assert by_kind["aborted-read"][0]["superseded"] is True
    assert by_kind["unfenced-zombie"] == [{
        "kind": "unfenced-zombie", "copier": 1, "incarnation": 0, "superseded_by": 1,
        "superseded_at": 3.5, "transactions": [1], "committed": 1,
        "ended": "no exit recorded"}]


def test_a_commit_asked_for_after_a_newer_incarnation_initialised_is_an_unfenced_zombie():
    """Transaction 1 began before incarnation 1 initialised, but its commit was asked for
    after that and returned: the EndTxn of a fenced epoch succeeded."""
    history = clean_history()
    history.copier_ops += [op("init", 1, 1, 4.05)] + transaction(1, 0, 1, 4.0, 0)
    assert kinds(history) == ["unfenced-zombie"]


def test_an_empty_transaction_committed_after_superseding_made_no_request_and_passes():
    """A subscribed copier the group assigned nothing commits its last transaction with
    no records and no offsets: the producer asks the brokers nothing (--subscribe, seen
    under load); with offsets sent the same commit is an unfenced zombie's."""
    history = clean_history()
    history.copier_ops += [op("init", 1, 1, 3.5)] + transaction(1, 0, 1, 4.0, 0)
    for line in history.copier_ops[-2:]:
        line.update(offset=None, offsets=0)
    assert kinds(history) == []
    for line in history.copier_ops[-2:]:
        line.update(offsets=2)
    assert kinds(history) == ["unfenced-zombie"]


def test_a_commit_asked_for_before_a_newer_incarnation_initialised_passes():
    """The commit was on its way when the newer one initialised (its answer came after):
    the coordinator may end it first, as Kafka's does."""
    history = clean_history()
    history.copier_ops += transaction(1, 0, 1, 4.0, 0) + [op("init", 1, 1, 4.15)]
    assert kinds(history) == []


def test_a_random_abort_that_returned_after_superseding_is_an_unfenced_zombie():
    history = clean_history()
    history.copier_ops += [op("init", 1, 1, 3.5)] + transaction(1, 0, 1, 4.0, 1, "abort")
    anomalies, _counts = copy_checker.check(history)
    assert [(a["kind"], a["transactions"], a["committed"]) for a in anomalies] == [
        ("unfenced-zombie", [1], 0)]


def test_a_zombie_that_saw_its_fencing_passes():
    history = clean_history()
    history.faults = [{"fault": "zombie", "c": 1, "i": 1, "zombie": 0, "t": 3.4}]
    history.copier_ops += [op("init", 1, 1, 3.5), op("begin", 1, 0, 4.0, txn=1),
                           op("fenced", 1, 0, 4.1, txn=1, error="ProducerFencedError"),
                           op("exit", 1, 0, 4.2, error=None)]
    anomalies, counts = copy_checker.check(history)
    assert anomalies == [] and counts["fenced"] == 1 and counts["zombies"] == 1


def test_a_zombie_that_made_no_request_after_a_newer_one_initialised_passes():
    """Superseded at 3.5, the zombie only exited (stopped, no last transaction logged):
    Kafka fences at the next transactional request and there was none."""
    history = clean_history()
    history.faults = [{"fault": "zombie", "c": 1, "i": 1, "zombie": 0, "t": 3.4}]
    history.copier_ops += [op("init", 1, 1, 3.5), op("exit", 1, 0, 9.0, error=None)]
    assert kinds(history) == []


def test_a_zombie_whose_newer_incarnation_died_before_initialising_passes():
    """The lead's finding (CHAOS-FINDING.md): under load the zombie fault's incarnation
    2.1 was copier-killed at 13.97 s before it returned from init_transactions (no history
    file at all); incarnation 2.0 kept copying, committed and exited normally, and 2.2
    initialised only after that. Nothing superseded 2.0 while it ran: no anomaly."""
    history = clean_history()
    history.faults = [
        {"fault": "zombie", "c": 1, "i": 1, "zombie": 0, "pid": 4057, "t": 0.33},
        {"fault": "copier-kill", "c": 1, "i": 1, "pid": 4057, "aim": "begin", "hit": False,
         "t": 13.97},
        {"fault": "copier-start", "c": 1, "i": 2, "pid": 4100, "t": 16.0}]
    history.copier_ops += (transaction(1, 0, 1, 5.0, 1) + transaction(1, 0, 2, 14.5, 1)
                           + transaction(1, 0, 3, 20.0, 0)
                           + [op("exit", 1, 0, 20.5, error=None), op("init", 1, 2, 21.0)]
                           + transaction(1, 2, 0, 22.0, 0) + [op("exit", 1, 2, 23.0,
                                                                  error=None)])
    history.drain_reads += [read(1, 2, "p1:000002"), read(1, 3, "p1:000003")]
    history.output_drain += [read(1, 2, copy_value("p1:000002", 1, 0, 1)),
                             read(1, 3, copy_value("p1:000003", 1, 0, 2))]
    anomalies, counts = copy_checker.check(history)
    assert anomalies == []
    assert counts["zombies"] == 1 and counts["fenced"] == 0


def test_an_incarnation_that_initialised_last_is_the_newest_whatever_its_number():
    """Run seed 12 under load (issue 20 item 10's 'aborted-read 96, unfenced-zombie 32'
    reproduced): copier 2's incarnation 2 started first, but incarnation 3 (a zombie
    fault's) returned from init_transactions first; 2's init_transactions returned 3.5 s
    later with the newer epoch, fenced 3 (its produce got INVALID_PRODUCER_EPOCH) and
    committed 30 transactions, read by every reader. The incarnation numbers made 2 look
    superseded: 90 aborted reads and an unfenced zombie. The init order says 2 is the
    newest: no anomaly."""
    history = clean_history()
    history.faults = [{"fault": "zombie", "c": 1, "i": 3, "zombie": 2, "t": 17.4}]
    history.copier_ops += [
        op("init-invoke", 1, 2, 12.0), op("init-invoke", 1, 3, 17.6), op("init", 1, 3, 18.0),
        op("begin", 1, 3, 18.5, txn=0),
        op("txn-error", 1, 3, 21.0, txn=0, error="InvalidProducerEpochError"),
        op("exit", 1, 3, 21.1, error="IllegalStateError"), op("init", 1, 2, 21.5)]
    history.copier_ops += transaction(1, 2, 0, 22.5, 1) + transaction(1, 2, 1, 23.0, 1)
    history.drain_reads += [read(1, 2, "p1:000002"), read(1, 3, "p1:000003")]
    copies = [read(1, 2, copy_value("p1:000002", 1, 2, 0)),
              read(1, 3, copy_value("p1:000003", 1, 2, 1))]
    history.output_drain += copies
    history.output_reads += [dict(r, c=0) for r in copies]
    assert kinds(history) == []
    # had 3 asked for its epoch after 2 had one, 2's commits would be a zombie's
    for line in history.copier_ops:
        if (line["c"], line["i"], line["op"]) in ((1, 3, "init-invoke"), (1, 3, "init")):
            line["t"] += 4.0  # 21.6 and 22.0: after 2's init returned at 21.5
    assert kinds(history) == ["aborted-read", "aborted-read", "aborted-read",
                              "aborted-read", "unfenced-zombie"]


def test_incarnations_whose_init_transactions_overlapped_supersede_neither():
    history = clean_history()
    history.copier_ops += [op("init-invoke", 1, 1, 3.0), op("init-invoke", 1, 2, 3.1),
                           op("init", 1, 1, 3.5), op("init", 1, 2, 3.6)]
    history.copier_ops += transaction(1, 1, 0, 4.0, 0) + transaction(1, 2, 0, 4.5, 0)
    # 1 and 2 both supersede 0 (initialised at 1.0); neither the other
    assert copy_checker.superseded_at(history.copier_ops) == {(1, 0): (3.5, 1)}
    assert kinds(history) == []


def test_a_committed_transaction_partly_visible_is_torn():
    history = clean_history()
    history.copier_ops += transaction(1, 0, 1, 4.0, 2)  # says 2 records, 1 is there
    history.drain_reads.append(read(1, 2, "p1:000002"))
    history.output_drain.append(read(1, 2, copy_value("p1:000002", 1, 0, 1)))
    anomalies, _counts = copy_checker.check(history)
    assert anomalies == [{"kind": "torn-transaction", "copier": 1, "incarnation": 0,
                          "txn": 1, "fate": "committed", "records": 2, "visible": 1}]


def test_a_transaction_of_unknown_outcome_is_all_or_nothing():
    history = clean_history()
    history.copier_ops += transaction(1, 0, 1, 4.0, 2, "unknown")
    anomalies, counts = copy_checker.check(history)
    assert anomalies == []  # none of it visible
    assert (counts["transactions_unknown"], counts["transactions_unknown_committed"]) == (1, 0)
    history.drain_reads += [read(1, 2, "p1:000002"), read(1, 3, "p1:000003")]
    history.output_drain += [read(1, 2, copy_value("p1:000002", 1, 0, 1)),
                             read(1, 3, copy_value("p1:000003", 1, 0, 1))]
    anomalies, counts = copy_checker.check(history)
    assert anomalies == [] and counts["transactions_unknown_committed"] == 1  # all of it
    history.output_drain.pop()
    assert kinds(history) == ["missing", "torn-transaction"]


def test_an_offset_read_with_two_values_is_inconsistent():
    history = clean_history()
    history.output_reads.append(read(0, 3, copy_value("p1:000000", 0, 0, 1), c=1))
    assert kinds(history) == ["inconsistent-read"]


@pytest.mark.parametrize("copy, reason", [
    ({"caught_up": False}, "the copiers did not catch up with the input"),
    ({"stable": False}, "a transaction was still open in the output"),
    ({"undrained": [1]}, "the output partition was not read to its end")])
def test_a_copy_that_did_not_finish_is_incomplete(copy, reason):
    history = clean_history()
    history.copy.update(copy)
    anomalies, _counts = copy_checker.check(history)
    assert [(a["kind"], a["reason"]) for a in anomalies] == [("copy-incomplete", reason)]


def test_copy_values_round_trip_and_others_are_not_copies():
    assert parse_copy_value(copy_value("p3:000123", 1, 2, 45)) == ("p3:000123", 1, 2, 45)
    for other in ("p3:000123", "x@1.2", "x@1.2.z", "@"):
        assert parse_copy_value(other) is None


def test_the_files_of_a_copy_are_loaded_into_their_fields(tmp_path):
    for name, line in (("copier-0.1.jsonl", op("init", 0, 1, 1.0)),
                       ("reader-0.jsonl", read(0, 0, "v", c=0)),
                       ("output-drain.jsonl", read(0, 0, "v")),
                       ("output-uncommitted.jsonl", read(0, 1, "w"))):
        writer = HistoryWriter(tmp_path / name)
        writer.write(**line)
        writer.close()
    loaded = load(tmp_path)
    assert [o["op"] for o in loaded.copier_ops] == ["init"]
    assert [r["value"] for r in loaded.output_reads] == ["v"]
    assert [r["offset"] for r in loaded.output_drain] == [0]
    assert [r["value"] for r in loaded.output_uncommitted] == ["w"]
    assert len(loaded.reads) == len(loaded.drain_reads) == len(loaded.ops) == 0
