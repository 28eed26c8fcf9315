"""``ringlog consumer-groups`` against fake brokers serving the group APIs: every action and
option, Kafka's tables byte for byte, its messages on stdout / stderr and its exit codes
(usage errors 1; errors while running are printed as ``Error: ...`` and exit 1 too)."""
from __future__ import annotations

import pytest

from cluster.tools import consumer_groups
from tests.support.fake_broker import FakeMember
from tests.support.tools import run_tool

#: Record timestamps of orders-0: offsets 0-1 at T0, 2-4 a minute later.
T0 = 1_700_000_000_000  # 2023-11-14T22:13:20.000Z
ALICE = FakeMember("alice-1", "alice", "/10.0.0.1", ("orders",), {"orders": [0, 1]})
BOB = FakeMember("bob-1", "bob", "/10.0.0.2", ("orders",), {})


@pytest.fixture
def cluster(fake_cluster):
    """orders (2 partitions: 5 and 3 records) and audit (1: 4 records); group "g" Stable
    (alice owns orders 0-1, bob nothing; commits orders-0 at 2, audit-0 at 1), "idle"
    Empty (orders-1 at 1)."""
    cluster = fake_cluster(brokers=2, group_model="admin")
    cluster.create_topic("orders", 2)
    cluster.create_topic("audit", 1)
    cluster.append("orders", 0, [b"a", b"b"], timestamp_ms=T0)
    cluster.append("orders", 0, [b"c", b"d", b"e"], timestamp_ms=T0 + 60_000)
    cluster.append("orders", 1, [b"x"] * 3, timestamp_ms=T0)
    cluster.append("audit", 0, [b"y"] * 4, timestamp_ms=T0)
    cluster.add_group("g", "Stable", [ALICE, BOB])
    cluster.commit("g", "orders", 0, 2)
    cluster.commit("g", "audit", 0, 1, leader_epoch=3)
    cluster.add_group("idle", "Empty")
    cluster.commit("idle", "orders", 1, 1)
    return cluster


@pytest.fixture
def groups(cluster, capsys):
    """``groups(*argv)`` -> (exit code, stdout, stderr) of the tool on the cluster."""
    def run(*argv):
        code = run_tool(consumer_groups, "--bootstrap-server", cluster.data_dir, *argv)
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    return run


def table(*lines):
    """Kafka's printf tables: each line after a newline, then a final newline."""
    return "".join(f"\n{line}" for line in lines) + "\n"


NO_EXECUTE = ("WARN: No action will be performed as the --execute option is missing.In a "
              "future major release, the default behavior of this command will be to prompt "
              "the user before executing the reset rather than doing a dry run. You should add "
              "the --dry-run option explicitly if you are scripting this command and want to "
              "keep the current default behavior without prompting.\n")


# -- --list --------------------------------------------------------------------------------------

def test_list(groups, cluster):
    cluster.add_group("connect", "Stable", protocol_type="connect")  # not a consumer group
    assert groups("--list") == (0, "g\nidle\n", "")


def test_list_with_states(groups):
    assert groups("--list", "--state") == (0, (
        "GROUP                     STATE               \n"
        "g                         Stable              \n"
        "idle                      Empty               \n"), "")
    assert groups("--list", "--state", "empty,Dead") == (0, (
        "GROUP                     STATE               \n"
        "idle                      Empty               \n"), "")
    assert groups("--list", "--state", "busy") == (
        1, "", "Invalid state list 'busy'. Valid states are: PreparingRebalance, "
               "CompletingRebalance, Stable, Dead, Empty\n")


# -- --describe ----------------------------------------------------------------------------------

def test_describe_offsets(groups):
    expected = table(
        "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG        "
        "     CONSUMER-ID     HOST            CLIENT-ID",
        "g               orders          0          2               5               3          "
        "     alice-1         /10.0.0.1       alice",
        "g               orders          1          -               3               -          "
        "     alice-1         /10.0.0.1       alice",
        "g               audit           0          1               4               3          "
        "     -               -               -")
    assert groups("--describe", "--group", "g") == (0, expected, "")
    assert groups("--describe", "--group", "g", "--offsets") == (0, expected, "")


def test_describe_offsets_verbose_adds_the_leader_epoch(groups):
    assert groups("--describe", "--group", "g", "--verbose") == (0, table(
        "GROUP           TOPIC           PARTITION  LEADER-EPOCH    CURRENT-OFFSET  "
        "LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID",
        "g               orders          0          -               2               5          "
        "     3               alice-1         /10.0.0.1       alice",
        "g               orders          1          -               -               3          "
        "     -               alice-1         /10.0.0.1       alice",
        "g               audit           0          3               1               4          "
        "     3               -               -               -"), "")


def test_describe_widens_columns_for_long_names(groups, cluster):
    cluster.add_group("a-rather-long-group-name", "Empty")
    cluster.commit("a-rather-long-group-name", "audit", 0, 4)
    assert groups("--describe", "--group", "a-rather-long-group-name") == (0, table(
        "GROUP                    TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  "
        "LAG             CONSUMER-ID     HOST            CLIENT-ID",
        "a-rather-long-group-name audit           0          4               4               "
        "0               -               -               -"),
        "\nConsumer group 'a-rather-long-group-name' has no active members.\n")


def test_describe_a_group_that_does_not_exist(groups):
    assert groups("--describe", "--group", "ghost") == (
        1, "\nError: Consumer group 'ghost' does not exist.\n", "")


def test_describe_a_rebalancing_group_warns(groups, cluster):
    cluster.add_group("moving", "PreparingRebalance", [ALICE])
    code, out, err = groups("--describe", "--group", "moving")
    assert (code, err) == (0, "\nWarning: Consumer group 'moving' is rebalancing.\n")
    assert out.splitlines()[2].startswith("moving          orders          0          -")


def test_describe_all_groups_in_order(groups):
    code, out, err = groups("--describe", "--all-groups")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines() if line] == [
        "GROUP", "g", "g", "g", "GROUP", "idle"]
    assert err == "\nConsumer group 'idle' has no active members.\n"


def test_describe_members(groups):
    assert groups("--describe", "--group", "g", "--members") == (0, (
        "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     \n"
        "g               alice-1         /10.0.0.1       alice           2               \n"
        "g               bob-1           /10.0.0.2       bob             0               \n"),
        "")


def test_describe_members_verbose(groups):
    assert groups("--describe", "--group", "g", "--members", "--verbose") == (0, (
        "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     "
        "CURRENT-EPOCH   CURRENT-ASSIGNMENT   TARGET-EPOCH    TARGET-ASSIGNMENT   \n"
        "g               alice-1         /10.0.0.1       alice           2               "
        "-               orders:0,1           -               -                   \n"
        "g               bob-1           /10.0.0.2       bob             0               "
        "-               -                    -               -                   \n"), "")


def test_describe_members_shows_static_instance_ids(groups, cluster):
    static = FakeMember("s-1", "svc", "/10.0.0.3", ("audit",), {"audit": [0]},
                        instance_id="svc-a")
    cluster.add_group("static", "Stable", [static])
    assert groups("--describe", "--group", "static", "--members") == (0, (
        "\nGROUP           CONSUMER-ID     GROUP-INSTANCE-ID HOST            CLIENT-ID       "
        "#PARTITIONS     \n"
        "static          s-1             svc-a             /10.0.0.3       svc             "
        "1               \n"), "")


def test_describe_members_of_an_empty_group(groups):
    assert groups("--describe", "--group", "idle", "--members") == (
        0, "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     \n",
        "\nConsumer group 'idle' has no active members.\n")


def test_describe_state(groups, cluster):
    cluster.coordinators["g"] = 1
    assert groups("--describe", "--group", "g", "--state") == (0, table(
        "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                "
        "#MEMBERS",
        "g               localhost:9093  (1)       range                Stable               "
        "2"), "")
    assert groups("--describe", "--group", "idle", "--state", "--verbose") == (0, table(
        "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                "
        "GROUP-EPOCH     TARGET-ASSIGNMENT-EPOCH   #MEMBERS",
        "idle            localhost:9092  (0)       -                    Empty                "
        "-               -                         0"),
        "\nConsumer group 'idle' has no active members.\n")


# -- --delete ------------------------------------------------------------------------------------

def test_delete(groups, cluster):
    cluster.add_group("old", "Empty")
    assert groups("--delete", "--group", "idle", "--group", "old") == (
        0, "Deletion of requested consumer groups ('idle', 'old') was successful.\n", "")
    assert groups("--list") == (0, "g\n", "")


def test_delete_reports_each_failure(groups):
    assert groups("--delete", "--group", "idle", "--group", "g", "--group", "ghost") == (1, (
        "\nError: Deletion of some consumer groups failed:\n"
        "* Group 'g' could not be deleted due to: NonEmptyGroupError: The group is not "
        "empty.\n"
        "* Group 'ghost' could not be deleted due to: GroupIdNotFoundError: The group id does "
        "not exist.\n"
        "\nThese consumer groups were deleted successfully: 'idle'\n"), "")


def test_delete_all_groups(groups):
    code, out, _ = groups("--delete", "--all-groups")
    assert code == 1
    assert "* Group 'g' could not be deleted" in out
    assert out.endswith("These consumer groups were deleted successfully: 'idle'\n")


# -- --delete-offsets ----------------------------------------------------------------------------

def test_delete_offsets(groups, cluster):
    assert groups("--delete-offsets", "--group", "g", "--topic", "audit") == (0, (
        "Request succeeded for deleting offsets from group g.\n"
        + table("TOPIC           PARTITION  STATUS         ",
                "audit           0          Successful     ")), "")
    assert cluster.committed("g") == {("orders", 0): 2}


def test_delete_offsets_partition_errors(groups, cluster):
    code, out, err = groups("--delete-offsets", "--group", "g", "--topic", "orders:0",
                            "--topic", "nope")
    assert (code, err) == (1, "")
    lines = out.split("\n")
    assert lines[:4] == ["", "Error: Encountered some partition-level error, see the "
                             "follow-up details.", "", "TOPIC           PARTITION  STATUS         "]
    assert lines[4].startswith("nope            -          Error: UnknownTopicOrPartitionError")
    assert lines[5].startswith("orders          0          Error: GroupSubscribedToTopicError")
    assert cluster.committed("g") == {("orders", 0): 2, ("audit", 0): 1}


def test_delete_offsets_of_an_unknown_group(groups):
    code, out, _ = groups("--delete-offsets", "--group", "ghost", "--topic", "audit")
    assert code == 1
    assert out.startswith("\nError: The group id does not exist.\n\nTOPIC")
    assert "audit           0          Error: GroupIdNotFoundError" in out


# -- --reset-offsets -----------------------------------------------------------------------------

def plan(*rows, group_width=15):
    return table(f"{'GROUP':<{group_width}} TOPIC           PARTITION  NEW-OFFSET",
                 *(f"{g:<{group_width}} {t:<15} {p:<10} {o}" for g, t, p, o in rows))


def test_reset_is_a_dry_run_without_execute(groups, cluster):
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders",
                  "--to-earliest") == (0, plan(("idle", "orders", 0, 0),
                                               ("idle", "orders", 1, 0)), NO_EXECUTE)
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders", "--to-latest",
                  "--dry-run") == (0, plan(("idle", "orders", 0, 5),
                                           ("idle", "orders", 1, 3)), "")
    assert cluster.committed("idle") == {("orders", 1): 1}


def test_reset_execute_commits(groups, cluster):
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders:0",
                  "--topic", "audit", "--to-offset", "2", "--execute") == (
        0, plan(("idle", "audit", 0, 2), ("idle", "orders", 0, 2)), "")
    assert cluster.committed("idle") == {("orders", 1): 1, ("orders", 0): 2, ("audit", 0): 2}
    _, _, commit = next(r for r in cluster.requests if r[1] == "OFFSET_COMMIT")
    assert (commit.generation_id_or_member_epoch, commit.member_id) == (-1, "")


def test_reset_a_group_that_does_not_exist_creates_it(groups, cluster):
    assert groups("--reset-offsets", "--group", "fresh", "--topic", "audit", "--to-latest",
                  "--execute") == (0, plan(("fresh", "audit", 0, 4)), "")
    assert cluster.committed("fresh") == {("audit", 0): 4}


def test_reset_refuses_an_active_group(groups, cluster):
    assert groups("--reset-offsets", "--group", "g", "--topic", "orders", "--to-earliest",
                  "--execute") == (1, (
        "\nError: Assignments can only be reset if the group 'g' is inactive, but the current "
        "state is Stable.\n" + table("GROUP           TOPIC           PARTITION  NEW-OFFSET")),
        "")
    assert cluster.committed("g") == {("orders", 0): 2, ("audit", 0): 1}


def test_reset_execute_reports_a_refused_commit(groups, cluster):
    # a member joined between the describe (Empty) and the commit
    cluster.add_group("joined", "Empty", [ALICE])
    assert groups("--reset-offsets", "--group", "joined", "--topic", "audit", "--to-latest",
                  "--execute") == (1, (
        "\nError: Executing consumer group command failed due to [Error 25] group 'joined', "
        "partition audit-0: The coordinator is not aware of this member.\n"), "")
    assert cluster.committed("joined") == {}


def test_reset_clamps_to_the_log(groups, caplog):
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders:1", "--to-offset",
                  "10", "--dry-run")[:2] == (0, plan(("idle", "orders", 1, 3)))
    assert "New offset (10) is higher than latest offset for topic partition orders-1. Value " \
           "will be set to 3." in caplog.text
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders:1", "--shift-by",
                  "-5", "--dry-run")[:2] == (0, plan(("idle", "orders", 1, 0)))
    assert "New offset (-4) is lower than earliest offset for topic partition orders-1. Value " \
           "will be set to 0." in caplog.text


def test_reset_all_topics_wins_over_topic(groups):
    assert groups("--reset-offsets", "--group", "idle", "--all-topics", "--topic", "audit",
                  "--to-latest", "--dry-run") == (0, plan(("idle", "orders", 1, 3)), "")


def test_reset_shift_by_and_to_current(groups):
    assert groups("--reset-offsets", "--group", "idle", "--all-topics", "--shift-by", "1",
                  "--dry-run") == (0, plan(("idle", "orders", 1, 2)), "")
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders", "--to-current",
                  "--dry-run") == (0, plan(("idle", "orders", 0, 5), ("idle", "orders", 1, 1)),
                                   "")
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders", "--shift-by", "1",
                  "--dry-run") == (1, "", "Cannot shift offset for partition orders-0 since "
                                          "there is no current committed offset\n")


def test_reset_by_time(groups):
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders:0", "--to-datetime",
                  "2023-11-14T22:13:21.000", "--dry-run") == (
        0, plan(("idle", "orders", 0, 2)), "")
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders:0", "--to-datetime",
                  "2023-11-14T23:13:20.000+01:00", "--dry-run") == (
        0, plan(("idle", "orders", 0, 0)), "")
    # every record is older than a day: no offset at that time, the log end is used
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders:0", "--by-duration",
                  "P1DT2H", "--dry-run") == (0, (
        "\nWarn: Partition 0 from topic orders is empty. Falling back to latest known offset.\n"
        + plan(("idle", "orders", 0, 5))), "")
    code, _, err = groups("--reset-offsets", "--group", "idle", "--topic", "orders",
                          "--to-datetime", "yesterday", "--dry-run")
    assert (code, err.startswith("Error parsing timestamp 'yesterday'")) == (1, True)
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders", "--by-duration",
                  "1 day", "--dry-run") == (1, "", "Text cannot be parsed to a Duration: "
                                                   "1 day\n")


def test_reset_export_and_from_file(groups, cluster, tmp_path):
    code, exported, _ = groups("--reset-offsets", "--group", "idle", "--topic", "orders",
                               "--to-earliest", "--export", "--dry-run")
    assert (code, exported) == (0, "orders,0,0\norders,1,0\n\n")
    code, both, _ = groups("--reset-offsets", "--group", "idle", "--group", "other", "--topic",
                           "audit", "--to-latest", "--export", "--dry-run")
    assert (code, both) == (0, "idle,audit,0,4\nother,audit,0,4\n\n")
    single = tmp_path / "plan.csv"
    single.write_text("orders,0,3\norders,1,9\n")
    assert groups("--reset-offsets", "--group", "idle", "--from-file", str(single),
                  "--execute")[:2] == (0, plan(("idle", "orders", 0, 3), ("idle", "orders", 1, 3)))
    assert cluster.committed("idle") == {("orders", 0): 3, ("orders", 1): 3}
    several = tmp_path / "plans.csv"
    several.write_text(both)
    assert groups("--reset-offsets", "--group", "idle", "--group", "third", "--from-file",
                  str(several), "--dry-run") == (1, (
        "\nError: No reset plan for group third found.\n"
        + plan(("idle", "audit", 0, 4))), "")


def test_reset_unknown_partitions_fail(groups):
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders:7", "--to-latest",
                  "--dry-run") == (1, "\nError: Executing consumer group command failed due to "
                                      "The partitions \"orders-7\" do not exist\n", "")
    assert groups("--reset-offsets", "--group", "idle", "--topic", "orders:x", "--to-latest",
                  "--dry-run") == (1, "", "Invalid partition 'x' specified in topic arg "
                                          "'orders:x''\n")


# -- usage errors --------------------------------------------------------------------------------

ONE_ACTION = ("Command must include exactly one action: --list, --describe, --delete, "
              "--reset-offsets, --delete-offsets")


@pytest.mark.parametrize(("argv", "message"), [
    ((), ONE_ACTION),
    (("--list", "--delete", "--all-groups"), ONE_ACTION),
    (("--describe",), "Option [describe] takes one of these options: [group], [all-groups]"),
    (("--delete",), "Option [delete] takes one of these options: [group], [all-groups]"),
    (("--reset-offsets", "--to-latest", "--dry-run"),
     "Option [reset-offsets] takes one of these options: [group], [all-groups]"),
    (("--describe", "--group", "g", "--all-groups"),
     'Option "[group]" can\'t be used with option "[all-groups]"'),
    (("--list", "--group", "g"), 'Option "[group]" can\'t be used with option "[list]"'),
    (("--describe", "--group", "g", "--topic", "t"),
     'Option "[topic]" can\'t be used with option "[describe]"'),
    (("--delete", "--group", "g", "--topic", "t"),
     "The consumer does not support topic-specific offset deletion from a consumer group."),
    (("--describe", "--group", "g", "--members", "--state"),
     "Option [describe] takes at most one of these options: [members], [offsets], [state]"),
    (("--describe", "--group", "g", "--state", "Stable"),
     "Option [describe] does not take a value for [state]"),
    (("--list", "--members"),
     "Option(s) [members] are unavailable given other options on the command line"),
    (("--delete", "--group", "g", "--state"),
     "Option(s) [state] are unavailable given other options on the command line"),
    (("--reset-offsets", "--group", "g", "--topic", "t", "--verbose", "--to-latest"),
     "Option(s) [verbose] are unavailable given other options on the command line"),
    (("--delete-offsets", "--group", "g"),
     "Option [delete-offsets] takes the following options: [group], [topic]"),
    (("--reset-offsets", "--group", "g", "--topic", "t", "--dry-run"),
     "Option '[reset-offsets]' requires one of the following scenarios: [[to-offset], "
     "[shift-by], [to-datetime], [by-duration], [to-earliest], [to-latest], [to-current], "
     "[from-file]]"),
    (("--reset-offsets", "--group", "g", "--topic", "t", "--to-latest", "--to-offset", "0",
      "--dry-run"), 'Option "[to-offset]" can\'t be used with option "[to-latest]"'),
    (("--reset-offsets", "--group", "g", "--topic", "t", "--to-latest", "--dry-run",
      "--execute"), "Option [reset-offsets] only accepts one of [execute] and [dry-run]"),
])
def test_usage_errors(groups, argv, message):
    code, out, err = groups(*argv)
    assert (code, out, err.replace(NO_EXECUTE, "")) == (1, "", message + "\n")


def test_cli_routes_to_the_tool():
    from cluster.tools.cli import build_parser
    args = build_parser().parse_args(["consumer-groups", "--bootstrap-server", "D", "--list"])
    assert args._run is consumer_groups.run
