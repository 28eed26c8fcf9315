"""The chaos checker on hand-made histories: a clean one passes, each anomaly kind is found
(and only it), unavailability windows are measured and merged."""
from __future__ import annotations

import json

from cluster.tools.chaos import workload
from cluster.tools.chaos.checker import check
from cluster.tools.chaos.columns import OK, STALLED
from cluster.tools.chaos.history import History, load


def send(p, seq, t, partition, offset):
    """An acknowledged send of ``p<p>:<seq>``: its invoke and ok lines."""
    return [{"op": "invoke", "p": p, "seq": seq, "t": t},
            {"op": "ok", "p": p, "seq": seq, "t": t + 0.01, "partition": partition,
             "offset": offset}]


def read(partition, offset, value, c=0, t=0.0):
    return {"op": "read", "c": c, "partition": partition, "offset": offset, "value": value,
            "t": t}


def clean_history():
    """Two producers, two partitions, everything acknowledged, read and drained in order."""
    ops = (send(0, 0, 1.0, 0, 0) + send(0, 1, 1.1, 1, 0) + send(1, 0, 1.2, 0, 1)
           + send(0, 2, 1.3, 0, 2))
    log = [read(0, 0, "p0:000000"), read(0, 1, "p1:000000"), read(0, 2, "p0:000002"),
           read(1, 0, "p0:000001")]
    return History(ops=ops, reads=list(log), drain_reads=[dict(r, c="drain") for r in log],
                   drain={"high_watermarks": {0: 3, 1: 1}, "undrained": []},
                   run={"start": 0.0, "end": 5.0, "partitions": 2})


def kinds(history):
    return check(history).by_kind()


def test_a_clean_history_passes():
    verdict = check(clean_history())
    assert verdict.ok and verdict.anomalies == [] and verdict.windows == []
    assert verdict.counts["sent"] == 4 and verdict.counts["acknowledged"] == 4


def test_an_acknowledged_record_missing_from_the_drain_is_lost():
    history = clean_history()
    history.drain_reads = [r for r in history.drain_reads if r["value"] != "p1:000000"]
    verdict = check(history)
    assert verdict.by_kind() == {"lost": 1}
    assert verdict.anomalies[0] == {"kind": "lost", "producer": 1, "seq": 0, "partition": 0,
                                    "offset": 1, "acknowledged_at": 1.21}


def test_a_failed_or_unknown_send_that_is_missing_is_not_lost():
    history = clean_history()
    history.ops += [{"op": "invoke", "p": 1, "seq": 1, "t": 2.0},
                    {"op": "info", "p": 1, "seq": 1, "t": 4.0, "partition": 1},
                    {"op": "invoke", "p": 1, "seq": 2, "t": 4.1},
                    {"op": "fail", "p": 1, "seq": 2, "t": 4.2, "partition": 1,
                     "error": "NotEnoughReplicasError"}]
    assert kinds(history) == {}


def test_the_same_sequence_number_at_two_offsets_is_a_duplicate_not_an_anomaly():
    history = clean_history()
    history.drain_reads.append(read(0, 3, "p0:000002", c="drain"))
    history.drain["high_watermarks"][0] = 4
    verdict = check(history)
    assert verdict.ok and verdict.counts["duplicates"] == 1
    assert verdict.duplicates[0]["at"] == [[0, 2], [0, 3]]


def test_duplicates_are_anomalies_when_the_producers_are_idempotent():
    history = clean_history()
    history.drain_reads.append(read(0, 3, "p0:000002", c="drain"))
    history.drain["high_watermarks"][0] = 4
    verdict = check(history, idempotent=True)
    assert verdict.by_kind() == {"duplicated": 1}
    assert verdict.anomalies[0]["at"] == [[0, 2], [0, 3]]


def test_a_batch_appended_twice_after_a_lost_acknowledgement_is_only_duplicates():
    """Producer 1's batch of seqs 10..14 was appended and replicated at offsets 0-4, its
    leader died before acknowledging it, the retry appended it again at 8-12 (after
    producer 0's records) and that was acknowledged; then seq 15 followed."""
    ops = [{"op": "invoke", "p": 1, "seq": seq, "t": 1.0} for seq in range(10, 15)]
    log = [read(0, offset, f"p1:{10 + offset:06d}", c="drain") for offset in range(5)]
    for offset, seq in zip(range(5, 8), range(3)):
        ops += send(0, seq, 1.5, 0, offset)
        log.append(read(0, offset, f"p0:{seq:06d}", c="drain"))
    for offset, seq in zip(range(8, 13), range(10, 15)):
        ops.append({"op": "ok", "p": 1, "seq": seq, "t": 3.0, "partition": 0,
                    "offset": offset})
        log.append(read(0, offset, f"p1:{seq:06d}", c="drain"))
    ops += send(1, 15, 3.5, 0, 13)
    log.append(read(0, 13, "p1:000015", c="drain"))
    history = History(ops=ops, reads=[dict(r, c=0) for r in log[:5]], drain_reads=log,
                      drain={"high_watermarks": {0: 14}, "undrained": []})
    verdict = check(history)
    assert verdict.anomalies == []
    assert verdict.counts["duplicates"] == 5 and verdict.counts["acknowledged"] == 9
    assert verdict.duplicates[0] == {"kind": "duplicated", "producer": 1, "seq": 10,
                                     "at": [[0, 0], [0, 8]]}


def test_sequence_numbers_falling_with_the_offsets_are_reordered():
    ops = send(0, 0, 1.0, 0, 1) + send(0, 1, 1.1, 0, 0)
    log = [read(0, 0, "p0:000001", c="drain"), read(0, 1, "p0:000000", c="drain")]
    history = History(ops=ops, drain_reads=log,
                      drain={"high_watermarks": {0: 2}, "undrained": []})
    verdict = check(history)
    assert verdict.by_kind() == {"reordered": 1}
    assert verdict.anomalies[0]["offset"] == 1 and verdict.anomalies[0]["after_seq"] == 1


def test_a_reorder_behind_a_duplicate_is_still_found():
    # seqs 0, 1, 0 (a duplicate: dropped), 3, 2 (backwards: reordered)
    values = [0, 1, 0, 3, 2]
    ops = [op for offset, seq in enumerate(values) if offset != 2
           for op in send(0, seq, 1.0 + offset, 0, offset)]
    log = [read(0, offset, f"p0:{seq:06d}", c="drain") for offset, seq in enumerate(values)]
    history = History(ops=ops, drain_reads=log,
                      drain={"high_watermarks": {0: 5}, "undrained": []})
    verdict = check(history)
    assert verdict.by_kind() == {"reordered": 1} and verdict.counts["duplicates"] == 1
    assert verdict.anomalies[0]["offset"] == 4 and verdict.anomalies[0]["after_seq"] == 3


def test_one_offset_read_with_two_values_is_an_inconsistent_read():
    history = clean_history()
    # a consumer read a record at offset 2 that a leader change later replaced
    history.reads.append(read(0, 2, "x0:000007", c=1))
    verdict = check(history)
    assert verdict.by_kind() == {"inconsistent-read": 1}
    assert verdict.anomalies[0]["values"] == ["p0:000002", "x0:000007"]


def test_an_offset_replaced_by_an_unclean_election_is_reported_not_an_anomaly():
    history = clean_history()
    history.reads.append(read(0, 2, "x0:000007", c=1, t=2.0))  # read, then replaced
    history.reads += [read(1, 1, "x0:000008", c=1, t=6.0),  # both after the election
                      read(1, 1, "x0:000009", c=0, t=7.0)]
    history.leadership = [
        {"t": 0.5, "partition": 0, "leader": 0, "epoch": 0, "isr": [0]},
        {"t": 3.0, "partition": 0, "leader": 1, "epoch": 1, "isr": [1]},
        {"t": 0.5, "partition": 1, "leader": 0, "epoch": 0, "isr": [0]},
        {"t": 3.0, "partition": 1, "leader": 1, "epoch": 1, "isr": [1]}]
    verdict = check(history)
    assert verdict.counts["inconsistent_unclean_election"] == 1
    assert [(a["partition"], a["offset"]) for a in verdict.unclean_losses] == [(0, 2)]
    assert verdict.by_kind() == {"inconsistent-read": 1}
    assert verdict.anomalies[0]["partition"] == 1


def test_an_acknowledged_offset_holding_another_record_is_moved():
    history = clean_history()
    history.ops[-1]["offset"] = 0  # p0:2 acknowledged at 0, which holds p0:0
    verdict = check(history)
    assert verdict.by_kind() == {"moved": 1}
    assert verdict.anomalies[0] == {"kind": "moved", "producer": 0, "seq": 2,
                                    "acknowledged": [0, 0], "holds": ["p0:000000"]}


def test_a_record_read_at_its_acknowledged_offset_and_again_elsewhere_is_not_moved():
    history = clean_history()
    history.reads.append(read(0, 7, "p0:000002", c=1))
    verdict = check(history)
    assert verdict.ok and verdict.counts["duplicates"] == 1


def test_losses_before_an_unclean_election_are_reported_not_anomalies():
    history = clean_history()
    history.drain_reads = [r for r in history.drain_reads if r["partition"] != 1]
    history.ops += send(1, 5, 9.0, 1, 0)  # acknowledged after the election: a real loss
    history.leadership = [
        {"t": 0.5, "partition": 1, "leader": 0, "epoch": 0, "isr": [0, 1, 2]},
        {"t": 2.0, "partition": 1, "leader": 0, "epoch": 0, "isr": [0]},
        {"t": 3.0, "partition": 1, "leader": -1, "epoch": 0, "isr": [0]},
        {"t": 4.0, "partition": 1, "leader": 2, "epoch": 1, "isr": [2]}]
    verdict = check(history)
    assert verdict.unclean_elections == [{"partition": 1, "t": 4.0, "leader": 2,
                                          "isr": [0]}]
    assert [(a["producer"], a["seq"]) for a in verdict.unclean_losses] == [(0, 1)]
    assert verdict.counts["lost_unclean_election"] == 1
    assert verdict.by_kind() == {"lost": 1}
    assert (verdict.anomalies[0]["producer"], verdict.anomalies[0]["seq"]) == (1, 5)


def test_a_clean_election_excuses_no_loss():
    history = clean_history()
    history.drain_reads = [r for r in history.drain_reads if r["partition"] != 1]
    history.leadership = [
        {"t": 0.5, "partition": 1, "leader": 0, "epoch": 0, "isr": [0, 1]},
        {"t": 4.0, "partition": 1, "leader": 1, "epoch": 1, "isr": [1]}]
    verdict = check(history)
    assert verdict.unclean_elections == [] and verdict.by_kind() == {"lost": 1}


def test_an_eligible_leader_replica_leads_cleanly():
    """KIP-966: a replica that left the ISR while it was below min.insync.replicas is in
    the ELR and may lead; that election is clean and excuses no loss."""
    history = clean_history()
    history.drain_reads = [r for r in history.drain_reads if r["partition"] != 1]
    history.leadership = [
        {"t": 0.5, "partition": 1, "leader": 0, "epoch": 0, "isr": [0, 1, 2], "elr": []},
        {"t": 2.0, "partition": 1, "leader": 0, "epoch": 0, "isr": [0], "elr": [1]},
        {"t": 3.0, "partition": 1, "leader": -1, "epoch": 1, "isr": [0], "elr": [1]},
        {"t": 4.0, "partition": 1, "leader": 1, "epoch": 2, "isr": [1], "elr": []}]
    verdict = check(history)
    assert verdict.unclean_elections == [] and verdict.by_kind() == {"lost": 1}


def test_an_undrained_partition_is_an_anomaly_and_hides_no_loss_claims():
    history = clean_history()
    history.drain_reads = [r for r in history.drain_reads if r["partition"] != 1]
    history.drain["undrained"] = [1]
    assert kinds(history) == {"undrained": 1}


def test_replica_differences_are_anomalies():
    history = clean_history()
    history.replicas = [{"partition": 0, "broker": 2, "reference": 0, "offset": 1,
                         "what": "batch 1-1 differs"}]
    assert kinds(history) == {"replica-divergence": 1}


def test_unavailability_windows_merge_no_leader_and_produce_errors():
    history = clean_history()
    history.leadership = [
        {"t": 0.5, "partition": 1, "leader": 0, "epoch": 0, "isr": [0]},
        {"t": 10.0, "partition": 1, "leader": -1, "epoch": 0, "isr": [0]},
        {"t": 12.0, "partition": 1, "leader": 1, "epoch": 1, "isr": [1]},
        {"t": 20.0, "partition": 0, "leader": -1, "epoch": 0, "isr": [0]}]
    history.ops += [{"op": "invoke", "p": 1, "seq": 1, "t": 11.0},
                    {"op": "fail", "p": 1, "seq": 1, "t": 11.5, "partition": 1,
                     "error": "NotLeaderForPartitionError"},
                    *send(1, 2, 12.99, 1, 1)]
    history.drain_reads.append(read(1, 1, "p1:000002", c="drain"))
    history.run["end"] = 25.0
    verdict = check(history)
    assert verdict.ok
    assert [(w["partition"], w["start"], w["end"], w["sources"]) for w in verdict.windows] == [
        (1, 10.0, 13.0, ["no leader", "produce errors"]),
        (0, 20.0, 25.0, ["no leader"])]
    assert [w["seconds"] for w in verdict.windows] == [3.0, 5.0]


def test_load_reads_the_files_and_skips_a_line_cut_short(tmp_path):
    (tmp_path / "producer-0.jsonl").write_text(
        '{"op":"invoke","p":0,"seq":0,"t":1}\n{"op":"ok","p":0,"seq":0,"t":2,"partition":0,'
        '"offset":0}\n{"op":"inv')
    (tmp_path / "consumer-0.jsonl").write_text(
        '{"op":"read","c":0,"partition":0,"offset":0,"value":"p0:000000","t":3}\n'
        '{"op":"error","c":0,"error":"x","t":4}\n')
    (tmp_path / "drain.jsonl").write_text(
        '{"op":"read","c":"drain","partition":0,"offset":0,"value":"p0:000000","t":5}\n')
    history = load(tmp_path, {"scenario": "s"})
    assert history.ops.sent == 1 and history.ops.kind.tolist() == [OK]
    assert history.ops.offset.tolist() == [0] and history.ops.t.tolist() == [2.0]
    # the consumer's read is the drain's: counted, not kept
    assert (len(history.reads), history.reads.count) == (0, 1)
    assert history.drain_reads.rows() == [{"op": "read", "c": "drain", "partition": 0,
                                           "offset": 0, "value": "p0:000000", "t": 5.0}]
    verdict = check(history)
    assert verdict.ok and (verdict.counts["read"], verdict.counts["drained"]) == (1, 1)


def test_load_keeps_what_a_consumer_read_otherwise_and_checks_it_as_before(tmp_path):
    """Columns loaded from files give the verdict that the same lines as dicts give."""
    lines = {
        "producer-0.jsonl": [
            {"op": "invoke", "p": 0, "seq": s, "t": 1.0 + s} for s in range(4)] + [
            {"op": "ok", "p": 0, "seq": s, "t": 1.5 + s, "partition": 0, "offset": s}
            for s in range(3)] + [
            {"op": "fail", "p": 0, "seq": 3, "t": 9.0, "partition": 0, "error": "x"}],
        "consumer-1.jsonl": [read(0, 0, "p0:000000", c=1), read(0, 1, "x0:000001", c=1),
                             read(0, 9, "p0:000002", c=1)],
        "drain.jsonl": [read(0, 0, "p0:000000", c="drain"), read(0, 1, "p0:000001", c="drain")],
    }
    for name, objects in lines.items():
        (tmp_path / name).write_text("".join(json.dumps(o) + "\n" for o in objects))
    loaded = load(tmp_path, {"end": 20.0})
    assert len(loaded.reads) == 2 and loaded.reads.count == 3
    by_hand = History(ops=lines["producer-0.jsonl"], reads=lines["consumer-1.jsonl"],
                      drain_reads=lines["drain.jsonl"], run={"end": 20.0})
    assert check(loaded).to_json() == check(by_hand).to_json()
    assert check(loaded).by_kind() == {"lost": 1, "inconsistent-read": 1}
    assert check(loaded).windows[0]["start"] == 4.0  # the failed send's invocation


def test_load_matches_dicts_across_partitions_and_offsets_past_int32(tmp_path):
    """The drain out of place order, offsets past 2**31 in one partition (kept int64), a
    consumer's reads matched against the drain a partition at a time: the verdict the
    dicts give (a reorder, a duplicate, an inconsistent read, a loss, a move)."""
    far = 1 << 32
    ops = (send(0, 0, 1.0, 0, 0) + send(0, 1, 1.1, 1, far) + send(0, 2, 1.2, 1, far + 1)
           + send(1, 0, 1.3, 2, 5) + send(1, 1, 1.4, 2, 6) + send(1, 2, 1.5, 2, 7)
           + send(0, 3, 1.6, 0, 1))
    drain = [read(2, 7, "p1:000001", "drain"), read(1, far, "p0:000002", "drain"),
             read(0, 0, "p0:000000", "drain"), read(2, 6, "p1:000002", "drain"),
             read(1, far + 1, "p0:000001", "drain"), read(2, 5, "p1:000000", "drain"),
             read(0, 1, "x-garbage", "drain")]
    reads = [read(2, 5, "p1:000000"), read(1, far, "p0:000001"), read(0, 3, "p0:000000"),
             read(2, 9, "p9:000009"), read(0, 1, "p0:000003")]
    for name, objects in (("producer-0.jsonl", ops), ("consumer-0.jsonl", reads),
                          ("drain.jsonl", drain)):
        (tmp_path / name).write_text("".join(json.dumps(o) + "\n" for o in objects))
    loaded = load(tmp_path, {"end": 20.0})
    assert loaded.ops.offset.dtype.itemsize == 8 and loaded.drain_reads.other
    assert len(loaded.reads) == 4 and loaded.reads.count == 5  # one read as the drain's
    by_hand = History(ops=ops, reads=reads, drain_reads=drain, run={"end": 20.0})
    verdict = check(loaded)
    assert verdict.to_json() == check(by_hand).to_json()
    assert verdict.by_kind() == {"lost": 1, "moved": 3, "reordered": 2,
                                 "inconsistent-read": 2}
    assert verdict.counts["duplicates"] == 2


def test_padded_values_are_recorded_by_size_and_damage_makes_them_no_value():
    raw = workload.padded("p1:000007", 1000)
    assert len(raw) == 1000 and raw.startswith(b"p1:000007#1000#")
    text = workload.record_text(raw)
    assert text == "p1:000007#1000" and workload.parse_value(text) == (1, 7)
    for damaged in (raw[:999], raw + b"#", raw[:500] + b"x" + raw[501:]):
        assert workload.record_text(damaged) == "p1:000007#damaged"
    assert workload.parse_value("p1:000007#damaged") is None  # so it counts as lost
    assert workload.padded("p1:000007", 0) == b"p1:000007"
    assert workload.record_text(b"p1:000007") == "p1:000007"


def test_an_empty_history_passes_and_an_unsettled_cluster_is_an_anomaly():
    """Nothing acknowledged (every send failed: a replica that cannot fetch a large
    batch keeps the ISR below min.insync.replicas) and nothing read: the checker runs;
    the cluster that never got its full ISR back is the anomaly."""
    history = History(ops=[{"op": "invoke", "p": 0, "seq": 0, "t": 1.0},
                           {"op": "fail", "p": 0, "seq": 0, "t": 7.0, "partition": 2,
                            "error": "KafkaTimeoutError"}], run={"end": 9.0})
    verdict = check(history)
    assert verdict.ok and verdict.counts["failed"] == 1
    assert verdict.windows[0]["start"] == 1.0 and verdict.windows[0]["end"] == 9.0
    history.run["settled"] = False
    assert check(history).by_kind() == {"unsettled": 1}


def test_a_leader_killed_makes_its_partitions_unavailable_until_acks_resume():
    """The controller elects a successor within tens of milliseconds, so the page never
    shows the partition leaderless: the window runs from the kill of its leader to the
    first acknowledged send once another broker leads it (issue 22)."""
    history = clean_history()
    history.leadership = [
        {"t": 0.5, "partition": 0, "leader": 0, "epoch": 0, "isr": [0, 1]},
        {"t": 0.5, "partition": 1, "leader": 1, "epoch": 0, "isr": [1, 0]},
        {"t": 3.05, "partition": 0, "leader": 1, "epoch": 1, "isr": [1]}]
    history.faults = [{"fault": "kill", "broker": 0, "partition": 0, "t": 3.0},
                      {"fault": "start", "broker": 0, "partition": 0, "t": 4.0}]
    history.ops += send(1, 1, 2.5, 0, 3) + send(1, 2, 3.1, 0, 4) + send(1, 3, 3.2, 1, 1)
    verdict = check(history)
    assert [(w["partition"], w["start"], w["end"], w["sources"]) for w in verdict.windows] == [
        (0, 3.0, 3.11, ["leader down"])]  # partition 1, led by broker 1, stayed available


def test_a_send_waiting_longer_than_stalled_counts_as_unavailable():
    history = clean_history()
    history.ops += [{"op": "invoke", "p": 1, "seq": 1, "t": 2.0},
                    {"op": "ok", "p": 1, "seq": 1, "t": 2.0 + STALLED + 1, "partition": 1,
                     "offset": 1}]
    assert [(w["partition"], w["start"], w["sources"]) for w in check(history).windows] == [
        (1, 2.0, ["acks stalled"])]
