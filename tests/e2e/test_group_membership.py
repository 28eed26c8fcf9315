"""Group membership over time on real brokers, with member processes
(tests/e2e/group_members.py): a static member (``group_instance_id``, KIP-345) closed
and restarted within the session timeout gets its partitions back in the same generation
and nobody rebalances; a member that stops polling for ``max_poll_interval_ms`` leaves the
group (its partitions go to the others) and rejoins when it polls again.

The ``e2e`` fixture stops the cluster and fails the test if any process it started still
runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import time

import pytest

from cluster import KafkaAdminClient
from tests.e2e.group_members import Members, create_topic
from tests.support.bounds import BOUND

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TOPIC = "members"
PARTITIONS = 4
GROUP = "lasting"


def start_cluster(e2e):
    cluster = e2e.cluster(brokers=1, offsets_topic_num_partitions=1,
                          group_initial_rebalance_delay_ms=0)
    e2e.start("create", create_topic, cluster.bootstrap_servers, TOPIC, PARTITIONS, 1).result()
    return cluster, Members(e2e, cluster, TOPIC, GROUP, PARTITIONS)


@pytest.mark.parametrize("restarted", ["the leader", "a follower"])
def test_a_static_member_restarted_within_the_session_timeout_keeps_its_partitions(
        e2e, restarted):
    _, group = start_cluster(e2e)
    static = dict(session_timeout_ms=30_000)
    first, second = ("s1", "s0") if restarted == "the leader" else ("s0", "s1")
    group.start(first, group_instance_id=first, **static)
    group.settle({first})  # the first member to join leads the group
    group.start(second, group_instance_id=second, **static)
    generation = group.settle({"s0", "s1"})
    owned = group.owned()[generation]
    joins_of_s0 = len(group.owns_lines("s0"))
    group.stop("s1")  # a static member does not leave the group on close
    group.start("s1", group_instance_id="s1", **static)
    deadline = time.monotonic() + BOUND
    while len(group.owns_lines("s1")) < 2:
        assert time.monotonic() < deadline, f"s1 did not rejoin: {group.owned()}"
        time.sleep(0.05)
    rejoined = group.owns_lines("s1")[-1]
    assert int(rejoined[1]) == generation, group.owned()  # no rebalance: the same generation
    assert {int(p) for p in rejoined[2:]} == owned["s1"]
    group.stop("s1")
    group.stop("s0")
    assert len(group.owns_lines("s0")) == joins_of_s0  # s0 was never reassigned


def test_a_member_that_stops_polling_leaves_after_max_poll_interval_and_rejoins(e2e):
    cluster, group = start_cluster(e2e)
    for name in ("m0", "m1"):
        group.start(name, max_poll_interval_ms=3000)
    both = group.settle({"m0", "m1"})
    group.hold("m1")  # its heartbeat thread runs on; it just stops polling
    alone = group.settle({"m0"}, after=both)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        [described] = admin.describe_consumer_groups([GROUP])
    assert [m.client_id for m in described.members] == ["m0"]
    group.hold("m1", held=False)  # its next poll joins again
    group.settle({"m0", "m1"}, after=alone)
    group.stop("m1")
    group.stop("m0")
