"""Every ``ringlog chaos`` scenario in a short form on a replicating cluster (3 brokers,
RF 3, min.insync.replicas 2), as Kafka's replication_test judges it: the tool finds no
anomaly (no acknowledged record lost, one producer's records in order, one value per
offset, replicas equal below the high watermark), the faults were injected, and every
partition is back to a full ISR once they stop. Duplicates are allowed (the producers are
not idempotent); so are the losses of an unclean election, which the verdict counts apart.
"""
from __future__ import annotations

import json

import pytest

from cluster.supervisor.supervisor import running_brokers
from cluster.tools.chaos.schedule import SCENARIOS
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
}


def run_scenario(tmp_path, data_dir, scenario, duration="8s", kills=2):
    out = tmp_path / "out"
    command = chaos_command(data_dir, out, scenario, duration, brokers=3,
                            replication_factor=3, min_insync_replicas=2, kills=kills, seed=1)
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


@pytest.mark.parametrize("scenario", ["leader-kill-storm", "rolling-sigterm",
                                      "sigstop-follower", "sigstop-leader",
                                      "page-cache-loss"])
def test_a_short_run_loses_no_acknowledged_record(tmp_path, data_dir, scenario):
    saved = run_scenario(tmp_path, data_dir, scenario)
    assert saved["verdict"]["counts"]["lost_unclean_election"] == 0
    assert saved["verdict"]["unclean_elections"] == []


def test_divergent_acks_1_records_of_a_dead_leader_are_truncated_away(tmp_path, data_dir):
    saved = run_scenario(tmp_path, data_dir, "divergence", kills=1)
    written = next(f for f in saved["history"]["faults"] if f["fault"] == "divergent-writes")
    assert written["error"] is None and written["acknowledged"]
    # nobody read them in the final log: the old leader truncated its suffix
    drained = [r["value"] for r in saved["history"]["drain_reads"]]
    assert not [value for value in drained if value.startswith("x")]


def test_with_unclean_election_off_the_partition_waits_for_its_last_leader(tmp_path,
                                                                           data_dir):
    saved = run_scenario(tmp_path, data_dir, "unclean-election-off", kills=1)
    elected = next(f for f in saved["history"]["faults"] if f["fault"] == "leader")
    assert elected["broker"] is None  # the restarted followers did not lead
    assert saved["verdict"]["unclean_elections"] == []
    assert saved["verdict"]["counts"]["lost_unclean_election"] == 0


def test_with_unclean_election_on_an_out_of_sync_replica_leads(tmp_path, data_dir):
    saved = run_scenario(tmp_path, data_dir, "unclean-election-on", kills=1)
    elected = next(f for f in saved["history"]["faults"] if f["fault"] == "leader")
    assert elected["broker"] is not None
    assert saved["verdict"]["unclean_elections"]
