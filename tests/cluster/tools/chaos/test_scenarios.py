"""Every ``ringlog chaos`` scenario in a short form on a replicating cluster (3 brokers,
RF 3, min.insync.replicas 2), as Kafka's replication_test judges it: the tool finds no
anomaly (no acknowledged record lost, one producer's records in order, one value per
offset, replicas equal below the high watermark), the faults were injected, and every
partition is back to a full ISR once they stop. Duplicates are allowed (the producers are
not idempotent) — except in the idempotent leader kill storm (``--enable-idempotence``),
where each record must be written once; so are the losses of an unclean election, which
the verdict counts apart.
"""
from __future__ import annotations

import json
import os

import psutil
import pytest

from cluster.supervisor.supervisor import running_brokers
from cluster.tools.chaos import history as chaos_history
from cluster.tools.chaos.checker import check
from cluster.tools.chaos.columns import OK
from cluster.tools.chaos.schedule import SCENARIOS
from cluster.tools.chaos.workload import parse_value
from tests.cluster.tools.chaos.tool_process import chaos_command, finish, start_tool

#: Seconds a whole short run may take (cluster start, spawned clients, restarts, drain).
RUN_BOUND = 240

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

#: scenario -> the fault log events its steps must have left
INJECTED = {
    "leader-kill-storm": {"kill", "start"},
    "rolling-sigterm": {"terminate", "start"},
    "sigstop-follower": {"pause", "resume"},
    "sigstop-leader": {"pause", "resume"},
    "divergence": {"pause", "divergent-writes", "kill", "resume", "start"},
    "page-cache-loss": {"kill", "truncate", "start"},
    "unclean-election-on": {"kill", "start", "leader"},
    "unclean-election-off": {"kill", "start", "leader"},
    "segment-flip-follower": {"flip", "kill", "start"},
    "segment-flip-leader": {"flip", "kill", "start"},
    "txnindex-flip": {"flip", "kill", "start"},
}
#: The damage scenarios find what issue 20's items 1 and 3 (damaged replicas, .txnindex)
#: and 6 (records larger than a ring frame) fixed; each runs 20 s of flips under load, too
#: long for ``make test``: RINGLOG_CHAOS_DAMAGE=1 runs them.
DAMAGE = pytest.mark.skipif(
    not os.environ.get("RINGLOG_CHAOS_DAMAGE"),
    reason="20 s of flips under load each, run by hand (passed on the main that has "
           "issue 20 items 1, 3 and 6): RINGLOG_CHAOS_DAMAGE=1 runs them")


def run_scenario(tmp_path, data_dir, scenario, duration="6s", kills=1, extra=()):
    out = tmp_path / "out"
    command = chaos_command(data_dir, out, scenario, duration, brokers=3,
                            replication_factor=3, min_insync_replicas=2, kills=kills, seed=1,
                            extra=extra)
    code, stdout, stderr = finish(start_tool(command), RUN_BOUND)
    assert running_brokers(data_dir) == {}  # the tool stopped the cluster it started
    saved = json.loads((out / "history.json").read_text())
    verdict = saved["verdict"]
    assert code == 0, f"{verdict['anomalies_by_kind']}\n{stdout}\n{stderr}"
    assert "verdict: no anomalies" in stdout
    assert verdict["counts"]["acknowledged"] > 0
    assert saved["run"]["settled"], "not every partition was back to a full ISR"
    faults = saved["history"]["faults"]
    assert INJECTED[scenario] <= {f["fault"] for f in faults}, faults
    return saved


def test_the_scenarios_are_all_covered():
    assert set(INJECTED) == set(SCENARIOS)


def test_a_leader_kill_storm_loses_nothing_and_the_tool_reports_it(tmp_path, data_dir):
    saved = run_scenario(tmp_path, data_dir, "leader-kill-storm", duration="12s", kills=3)
    assert saved["verdict"]["counts"]["lost_unclean_election"] == 0
    out = tmp_path / "out"
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert saved["run"]["scenario"] == "leader-kill-storm" and saved["run"]["seed"] == 1
    assert len(saved["schedule"]) == 3
    kills = [f for f in saved["history"]["faults"] if f["fault"] == "kill"]
    assert len(kills) >= 2 and all(isinstance(f["pid"], int) for f in kills)
    # every killed broker's pid is gone, and so is every broker the run started
    for fault in saved["history"]["faults"]:
        if fault.get("pid"):
            assert not psutil.pid_exists(fault["pid"]) or \
                psutil.Process(fault["pid"]).status() == psutil.STATUS_ZOMBIE

    # the checker flags the same history with a drained acknowledged record removed
    loaded = chaos_history.load(out, saved["run"])
    loaded.drain = saved["history"]["drain"]
    assert check(loaded).ok
    acked = {(int(p), int(seq)) for p, seq, kind in zip(
        loaded.ops.p, loaded.ops.seq, loaded.ops.kind, strict=True) if kind == OK}
    loaded.drain_reads = loaded.drain_reads.rows()
    victim = next(r for r in loaded.drain_reads if parse_value(r["value"]) in acked)
    loaded.drain_reads.remove(victim)
    assert check(loaded).by_kind().get("lost", 0) >= 1
    # and reports one read at two offsets as a duplicate, an anomaly only if idempotent
    # (the consumers' reads the drain made too were not kept: the victim's read is put
    # back beside the one at another offset)
    loaded.reads = loaded.reads.rows() + [victim, dict(victim, offset=victim["offset"]
                                                       + 10_000)]
    assert check(loaded).counts["duplicates"] >= 1
    assert check(loaded, idempotent=True).by_kind().get("duplicated", 0) >= 1


def test_an_idempotent_leader_kill_storm_writes_each_record_once(tmp_path, data_dir):
    saved = run_scenario(tmp_path, data_dir, "leader-kill-storm", duration="12s", kills=3,
                         extra=("--enable-idempotence",))
    verdict = saved["verdict"]
    assert saved["run"]["idempotent"] and verdict["idempotent"]
    assert verdict["counts"]["duplicates"] == 0  # also an anomaly: code 0 says as much
    assert verdict["counts"]["lost_unclean_election"] == 0


@pytest.mark.parametrize("scenario", ["rolling-sigterm", "sigstop-follower",
                                      "sigstop-leader", "page-cache-loss"])
def test_a_short_run_loses_no_acknowledged_record(tmp_path, data_dir, scenario):
    saved = run_scenario(tmp_path, data_dir, scenario)
    assert saved["verdict"]["counts"]["lost_unclean_election"] == 0
    assert saved["verdict"]["unclean_elections"] == []


def test_divergent_acks_1_records_of_a_dead_leader_are_truncated_away(tmp_path, data_dir):
    saved = run_scenario(tmp_path, data_dir, "divergence", kills=1)
    written = next(f for f in saved["history"]["faults"] if f["fault"] == "divergent-writes")
    assert written["error"] is None and written["acknowledged"]
    # nobody read them in the final log: the old leader truncated its suffix
    drained = chaos_history.load(tmp_path / "out").drain_reads.values()
    assert not [value for value in drained if value.startswith("x")]


def test_with_unclean_election_off_the_partition_waits_for_its_last_leader(tmp_path,
                                                                           data_dir):
    saved = run_scenario(tmp_path, data_dir, "unclean-election-off", kills=1)
    elected = next(f for f in saved["history"]["faults"] if f["fault"] == "leader")
    # no restarted follower led, unless it was an eligible leader replica (KIP-966): one
    # that left the ISR while it was below min.insync.replicas, holding every
    # acknowledged record
    if elected["broker"] is not None:
        eligible = {b for change in saved["history"]["leadership"]
                    for b in change.get("elr", [])}
        assert elected["broker"] in eligible, (elected, saved["history"]["leadership"])
    assert saved["verdict"]["unclean_elections"] == []
    assert saved["verdict"]["counts"]["lost_unclean_election"] == 0


def test_with_unclean_election_on_an_out_of_sync_replica_leads(tmp_path, data_dir):
    saved = run_scenario(tmp_path, data_dir, "unclean-election-on", kills=1)
    elected = next(f for f in saved["history"]["faults"] if f["fault"] == "leader")
    assert elected["broker"] is not None
    # a restarted follower leads: cleanly when it was an eligible leader replica (KIP-966:
    # it left the ISR while that was below min.insync.replicas), else uncleanly, reported
    eligible = {b for change in saved["history"]["leadership"] for b in change.get("elr", [])}
    assert elected["broker"] in eligible or saved["verdict"]["unclean_elections"]


@DAMAGE
@pytest.mark.parametrize("scenario", ["segment-flip-follower", "segment-flip-leader"])
def test_a_byte_flipped_in_a_replica_s_segment_under_load_loses_nothing(tmp_path, data_dir,
                                                                       scenario):
    saved = run_scenario(tmp_path, data_dir, scenario, duration="20s", kills=3)
    flips = [f for f in saved["history"]["faults"] if f["fault"] == "flip"]
    assert flips and all(f["was"] != f["now"] for f in flips)
