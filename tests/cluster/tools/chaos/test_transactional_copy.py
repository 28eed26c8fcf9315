"""``ringlog chaos --workload transactional-copy`` in a short form (Kafka's transactions_test on
a replicating cluster: 3 brokers, RF 3, min.insync.replicas 2): leader kills, copier
kills and a zombie, and the tool finds the output equal to the input exactly once, no
aborted read, the zombie fenced if it made a request once superseded; the same history
with a copied record taken away, or with a superseded incarnation's commit returning,
fails."""
from __future__ import annotations

import json

import pytest

from cluster.supervisor.supervisor import running_brokers
from cluster.tools.chaos import copy_checker, history as chaos_history
from cluster.tools.chaos.copier import parse_copy_value
from tests.cluster.tools.chaos.tool_process import chaos_command, finish, start_tool

#: Seconds the whole run may take (cluster start, transaction coordinators, spawned
#: clients, restarts, catching up, drains).
RUN_BOUND = 300
RECORDS = 600

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def test_a_transactional_copy_under_kills_and_a_zombie_copies_each_record_once(tmp_path,
                                                                               data_dir):
    out = tmp_path / "out"
    command = chaos_command(data_dir, out, "leader-kill-storm", "15s", brokers=3,
                            partitions=3, replication_factor=3, min_insync_replicas=2,
                            kills=2, seed=2,
                            extra=("--workload", "transactional-copy", "--records",
                                   str(RECORDS), "--copier-kills", "2", "--zombies", "1"))
    code, stdout, stderr = finish(start_tool(command), RUN_BOUND)
    assert running_brokers(data_dir) == {}
    saved = json.loads((out / "history.json").read_text())
    verdict = saved["verdict"]
    assert code == 0, f"{verdict['anomalies_by_kind']}\n{stdout}\n{stderr}"
    assert "verdict: no anomalies" in stdout
    copy = verdict["copy"]
    assert copy["input"] == verdict["counts"]["acknowledged"] == RECORDS
    assert copy["copied"] == copy["output"] == RECORDS
    assert copy["transactions_committed"] > 0
    faults = saved["history"]["faults"]
    assert {"kill", "start", "copier-kill", "copier-start", "zombie"} <= {
        f["fault"] for f in faults}, faults
    (zombie,) = [f for f in faults if f["fault"] == "zombie"]
    ops = saved["history"]["copier_ops"]
    superseded = copy_checker.superseded_at(ops)
    # a zombie that began a transaction once a newer incarnation had initialised was
    # fenced at its first request (under load the newer one may die before it initialises
    # or initialise after the zombie stopped: CHAOS-FINDING.md; then nothing fences it)
    zombie_key = (zombie["c"], zombie["zombie"])
    if zombie_key in superseded and any(
            o["op"] == "begin" and (o["c"], o["i"]) == zombie_key
            and o["t"] > superseded[zombie_key][0] for o in ops):
        assert any(o["op"] == "fenced" and (o["c"], o["i"]) == zombie_key for o in ops)
    assert superseded  # the killed incarnations were, by the ones that replaced them
    # incarnations after a kill or a zombie copied too: the transactional id was taken over
    assert {parse_copy_value(r["value"])[2] for r in saved["history"]["output_drain"]} != {0}

    # the checker flags the same history with one copied record taken away ...
    loaded = chaos_history.load(out, saved["run"])
    loaded.copy = saved["history"]["copy"]
    victim = loaded.output_drain.pop()
    anomalies, _counts = copy_checker.check(loaded)
    assert {"missing", "torn-transaction"} <= {a["kind"] for a in anomalies}
    # ... and with a superseded incarnation committing a transaction after that
    loaded.output_drain.append(victim)
    (c, i), (at, _newer) = sorted(superseded.items())[0]
    loaded.copier_ops += [{"op": name, "c": c, "i": i, "txn": 10_000, "records": 0,
                           "offset": 0, "t": at + step}
                          for step, name in ((0.001, "begin"), (0.002, "commit-invoke"),
                                             (0.003, "commit"))]
    anomalies, _counts = copy_checker.check(loaded)
    assert [a["kind"] for a in anomalies] == ["unfenced-zombie"]
