"""The partition assignors: Kafka's documented examples, and the properties each promises
(every partition once, balance, stickiness, cooperative hand-over) over random groups."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData
from kafka.protocol.old.consumer_protocol import (
    ConsumerProtocolMemberAssignment_v0,
    ConsumerProtocolMemberMetadata_v0,
)

from cluster.protocol import consumer_protocol as protocol
from consumer_proc.assignors import (
    DEFAULT_STRATEGY,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    resolve,
)
from consumer_proc.assignors.member import Member
from consumer_proc.assignors.sticky_user_data_descriptor import (
    decode_user_data,
    encode_user_data,
)
from tests.support.properties import examples


def members(*specs):
    """Members from (member_id, topics[, instance id[, owned[, generation]]])."""
    out = {}
    for spec in specs:
        member_id, topics, *rest = spec
        instance = rest[0] if rest else None
        owned = tuple(rest[1]) if len(rest) > 1 else ()
        generation = rest[2] if len(rest) > 2 else (1 if owned else -1)
        out[member_id] = Member(member_id, tuple(topics), instance, owned, generation)
    return out


def eager(group):
    """``group`` as eager sticky members report it: what they owned and their generation in
    StickyAssignorUserData, nothing in the subscription itself."""
    return {member_id: Member(member_id, m.topics, m.group_instance_id,
                              user_data=encode_user_data(m.owned, m.generation))
            for member_id, m in group.items()}


def flat(assignment, member_id):
    return [(t, p) for t, parts in assignment[member_id].items() for p in parts]


# -- Kafka's examples (the assignors' javadoc) ------------------------------------------------

def test_range_splits_each_topic_into_ranges_first_members_get_the_extra():
    got = RangeAssignor.assign({"t0": 3, "t1": 3}, members(("C0", ["t0", "t1"]),
                                                         ("C1", ["t0", "t1"])))
    assert got == {"C0": {"t0": [0, 1], "t1": [0, 1]}, "C1": {"t0": [2], "t1": [2]}}


def test_range_orders_static_members_first_by_instance_id():
    got = RangeAssignor.assign({"t": 5}, members(("a", ["t"]), ("b", ["t"], "z-instance"),
                                                 ("c", ["t"], "y-instance")))
    assert got == {"c": {"t": [0, 1]}, "b": {"t": [2, 3]}, "a": {"t": [4]}}


def test_roundrobin_deals_sorted_partitions_over_sorted_members():
    got = RoundRobinAssignor.assign({"t0": 3, "t1": 3}, members(("C0", ["t0", "t1"]),
                                                              ("C1", ["t0", "t1"])))
    assert got == {"C0": {"t0": [0, 2], "t1": [1]}, "C1": {"t0": [1], "t1": [0, 2]}}


def test_roundrobin_skips_members_not_subscribed():
    got = RoundRobinAssignor.assign({"t0": 1, "t1": 2, "t2": 3}, members(
        ("C0", ["t0"]), ("C1", ["t0", "t1"]), ("C2", ["t0", "t1", "t2"])))
    assert got == {"C0": {"t0": [0]}, "C1": {"t1": [0]},
                   "C2": {"t1": [1], "t2": [0, 1, 2]}}


def test_sticky_keeps_partitions_when_a_member_leaves():
    first = StickyAssignor.assign({f"t{i}": 2 for i in range(4)},
                                  members(("C0", ["t0", "t1", "t2", "t3"]),
                                          ("C1", ["t0", "t1", "t2", "t3"]),
                                          ("C2", ["t0", "t1", "t2", "t3"])))
    assert sorted(len(flat(first, m)) for m in first) == [2, 3, 3]
    second = StickyAssignor.assign({f"t{i}": 2 for i in range(4)}, eager(members(
        ("C0", ["t0", "t1", "t2", "t3"], None, flat(first, "C0")),
        ("C2", ["t0", "t1", "t2", "t3"], None, flat(first, "C2")))))
    assert len(flat(second, "C0")) == len(flat(second, "C2")) == 4
    assert set(flat(first, "C0")) <= set(flat(second, "C0"))
    assert set(flat(first, "C2")) <= set(flat(second, "C2"))


def test_sticky_ignores_owners_of_an_older_generation_and_conflicting_claims():
    got = StickyAssignor.assign({"t": 4}, eager(members(
        ("old", ["t"], None, [("t", 0), ("t", 1), ("t", 2)], 3),
        ("new", ["t"], None, [("t", 3)], 5),
        ("also-new", ["t"], None, [("t", 3)], 5))))
    assert sum(len(flat(got, m)) for m in got) == 4
    assert sorted(len(flat(got, m)) for m in got) == [1, 1, 2]


def test_cooperative_sticky_leaves_moving_partitions_out_for_one_generation():
    owned = [("t", p) for p in range(4)]
    got = CooperativeStickyAssignor.assign({"t": 4}, members(
        ("C0", ["t"], None, owned, 1), ("C1", ["t"])))
    # C0 keeps two, the two that move to C1 are revoked first: nobody gets them yet.
    assert len(flat(got, "C0")) == 2 and flat(got, "C1") == []
    revoked = [tp for tp in owned if tp not in flat(got, "C0")]
    follow_up = CooperativeStickyAssignor.assign({"t": 4}, members(
        ("C0", ["t"], None, flat(got, "C0"), 2), ("C1", ["t"], None, [], 2)))
    assert flat(follow_up, "C0") == flat(got, "C0")
    assert flat(follow_up, "C1") == revoked


def test_sticky_with_different_subscriptions_balances_what_it_can():
    got = StickyAssignor.assign({"a": 4, "b": 2}, members(("x", ["a"]), ("y", ["a", "b"])))
    assert sorted(flat(got, "x") + flat(got, "y")) == [("a", p) for p in range(4)] + [
        ("b", 0), ("b", 1)]
    assert len(flat(got, "x")) == len(flat(got, "y")) == 3
    assert all(t == "a" for t, _ in flat(got, "x"))


# -- properties -----------------------------------------------------------------------------

@st.composite
def groups(draw, equal=True):
    topics = {f"t{i}": draw(st.integers(1, 6)) for i in range(draw(st.integers(1, 3)))}
    count = draw(st.integers(1, 6))
    everything = [(t, p) for t, n in topics.items() for p in range(n)]
    specs = []
    for i in range(count):
        subscribed = list(topics) if equal else draw(
            st.lists(st.sampled_from(list(topics)), min_size=1, unique=True))
        owned = draw(st.lists(st.sampled_from(everything), unique=True, max_size=4))
        specs.append((f"m{i}", subscribed, None, [tp for tp in owned if tp[0] in subscribed],
                      draw(st.sampled_from([1, 2]))))
    # Owned partitions are exclusive in a real group's last generation.
    seen = set()
    for spec in specs:
        spec[3][:] = [tp for tp in spec[3] if not (tp in seen or seen.add(tp))]
    return topics, members(*specs)


def check_complete(topics, group, got):
    assigned = [tp for m in got for tp in flat(got, m)]
    assert sorted(assigned) == sorted({tp for m in group.values() for t in m.topics
                                       for tp in ((t, p) for p in range(topics[t]))})
    for member_id, member in group.items():
        assert all(t in member.topics for t, _ in flat(got, member_id))


@settings(max_examples=examples(200), deadline=None)
@given(groups())
@pytest.mark.parametrize("assignor", [RangeAssignor, RoundRobinAssignor, StickyAssignor])
def test_every_partition_once_to_a_subscriber(assignor, group):
    topics, group = group
    check_complete(topics, group, assignor.assign(topics, group))
    check_complete(topics, group, assignor.assign(topics, eager(group)))


@settings(max_examples=examples(200), deadline=None)
@given(groups(equal=False))
def test_unequal_subscriptions_every_partition_once(group):
    topics, group = group
    for assignor in (RangeAssignor, RoundRobinAssignor, StickyAssignor):
        check_complete(topics, group, assignor.assign(topics, group))
    check_complete(topics, group, StickyAssignor.assign(topics, eager(group)))


@settings(max_examples=examples(200), deadline=None)
@given(groups())
def test_sticky_is_balanced_and_keeps_what_it_can(group):
    topics, group = group
    got = StickyAssignor.assign(topics, eager(group))
    counts = [len(flat(got, m)) for m in got]
    assert max(counts) - min(counts) <= 1
    highest = max(m.generation for m in group.values())
    low = sum(topics.values()) // len(group)
    for member_id, member in group.items():
        if member.generation == highest and len(member.owned) <= low:
            assert set(member.owned) <= set(flat(got, member_id))


@settings(max_examples=examples(200), deadline=None)
@given(groups())
def test_cooperative_never_gives_a_live_owners_partition_to_another(group):
    topics, group = group
    got = CooperativeStickyAssignor.assign(topics, group)
    highest = max(m.generation for m in group.values())
    owner = {tp: m.member_id for m in group.values() if m.generation == highest
             for tp in m.owned}
    for member_id in got:
        for tp in flat(got, member_id):
            assert owner.get(tp, member_id) == member_id


# -- strategies and bytes -------------------------------------------------------------------

def test_resolve_takes_names_java_names_and_classes():
    assert resolve("range") == (RangeAssignor,)
    assert resolve(["org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
                    RoundRobinAssignor]) == (CooperativeStickyAssignor, RoundRobinAssignor)
    assert resolve(DEFAULT_STRATEGY) == (RangeAssignor, RoundRobinAssignor)
    with pytest.raises(ValueError, match="'fair'"):
        resolve(["range", "fair"])
    with pytest.raises(ValueError, match="twice"):
        resolve(["range", RangeAssignor])


def test_subscription_round_trips_and_reads_kafka_python_v0():
    data = protocol.encode_subscription(["b", "a"], owned=[("a", 1), ("a", 0)], generation=4)
    assert protocol.decode_subscription(data) == (("a", "b"), (("a", 0), ("a", 1)), 4, None)
    v0 = ConsumerProtocolMemberMetadata_v0(version=0, topics=["x", "y"],
                                           user_data=b"u").encode()
    assert protocol.decode_subscription(v0) == (("x", "y"), (), -1, b"u")


def test_assignment_round_trips_and_kafka_python_reads_it():
    data = protocol.encode_assignment({"t": [2, 0], "s": [1]})
    assert protocol.decode_assignment(data) == ({"s": [1], "t": [0, 2]}, None)
    decoded = ConsumerProtocolMemberAssignment_v0.decode(data)
    assert sorted(tp for tp in decoded.partitions()) == [("s", 1), ("t", 0), ("t", 2)]
    assert protocol.decode_assignment(b"") == ({}, None)


@pytest.mark.parametrize("data", [b"", b"\x00", b"\xff\xff\x00", b"\x00\x03\x00\x00\x00\x05ab"])
def test_garbage_subscription_is_a_value_error(data):
    with pytest.raises(ValueError, match="consumer subscription"):
        protocol.decode_subscription(data)


# -- the eager sticky assignor across rebalances --------------------------------------------

def test_sticky_user_data_is_kafkas_layout_both_ways():
    data = StickyAssignor.subscription_user_data([("t", 2), ("s", 1), ("t", 0)], 7)
    theirs = StickyAssignorUserData.decode(data, version=1, header=False)
    assert theirs.generation == 7
    assert sorted((tp.topic, list(tp.partitions)) for tp in theirs.previous_assignment) == [
        ("s", [1]), ("t", [0, 2])]
    assert decode_user_data(data) == ((("s", 1), ("t", 0), ("t", 2)), 7)
    v1 = StickyAssignorUserData([("x", [3, 4])], 9).encode(version=1, header=False)
    assert decode_user_data(v1) == ((("x", 3), ("x", 4)), 9)
    v0 = StickyAssignorUserData([("x", [3])], version=0).encode(version=0, header=False)
    assert decode_user_data(v0) == ((("x", 3),), -1)
    assert decode_user_data(encode_user_data((), -1)) == ((), -1)


@pytest.mark.parametrize("data", [b"\x00", b"\xff\xff\xff\xff", b"\x00\x00\x00\x01\x00\x05ab",
                                  b"\x00\x00\x00\x00\x00\x00", b"\x00\x00\x00\x01\x00\x01\xff"
                                  b"\x00\x00\x00\x00"])
def test_garbage_sticky_user_data_is_a_value_error_and_claims_nothing(data):
    with pytest.raises(ValueError, match="sticky assignor user data"):
        decode_user_data(data)
    got = StickyAssignor.assign({"t": 2}, {
        "a": Member("a", ("t",), user_data=data),
        "b": Member("b", ("t",), user_data=encode_user_data([("t", 0), ("t", 1)], 3))})
    assert got == {"a": {"t": [1]}, "b": {"t": [0]}}


def test_eager_sticky_reads_only_user_data_cooperative_only_the_subscription():
    # An eager member has revoked everything: its subscription's owned list is empty.
    group = {"a": Member("a", ("t",), owned=(("t", 0), ("t", 1)), generation=2),
             "b": Member("b", ("t",), user_data=encode_user_data([("t", 0), ("t", 1)], 2))}
    assert StickyAssignor.assign({"t": 2}, group) == {"a": {"t": [1]}, "b": {"t": [0]}}
    assert CooperativeStickyAssignor.subscription_user_data([("t", 0)], 2) is None
    # a keeps t-0; t-1 moves to b, so it is left out of this generation.
    assert CooperativeStickyAssignor.assign({"t": 2}, group) == {"a": {"t": [0]}, "b": {}}


def test_a_claim_of_a_higher_generation_wins():
    got = StickyAssignor.assign({"t": 4}, eager(members(
        ("stale", ["t"], None, [("t", 0), ("t", 1)], 4),
        ("fresh", ["t"], None, [("t", 1), ("t", 2)], 6))))
    assert flat(got, "fresh") == [("t", 1), ("t", 2)]
    assert flat(got, "stale") == [("t", 0), ("t", 3)]


def minimal_moves(previous, alive, partition_count):
    """The fewest partitions that must leave a member still in the group for the counts to
    differ by at most one."""
    low, over = divmod(partition_count, len(alive))
    kept = [len(previous.get(m, ())) for m in alive]
    excess = sum(max(0, k - low) for k in kept)
    return excess - min(over, sum(1 for k in kept if k > low))


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(1, 12), st.lists(st.tuples(st.booleans(), st.integers(0, 50)),
                                    min_size=1, max_size=8))
def test_sticky_over_rebalances_moves_the_fewest_partitions_and_stays_balanced(count, steps):
    """Members join and leave; each rebalance starts from what the last one gave, as the
    consumers report it."""
    topics = {"t": count}
    alive, previous, next_id = ["m0"], {}, 1
    for generation, (join, pick) in enumerate(steps, start=1):
        if join or len(alive) == 1:
            alive.append(f"m{next_id}")
            next_id += 1
        else:
            alive.remove(alive[pick % len(alive)])
        group = {m: Member(m, ("t",), user_data=StickyAssignor.subscription_user_data(
            previous.get(m, ()), generation - 1 if m in previous else -1)) for m in alive}
        got = StickyAssignor.assign(topics, group)
        check_complete(topics, group, got)
        counts = [len(flat(got, m)) for m in alive]
        assert max(counts) - min(counts) <= 1
        moved = sum(1 for m in alive for tp in previous.get(m, ()) if tp not in flat(got, m))
        assert moved == minimal_moves(previous, alive, count)
        previous = {m: flat(got, m) for m in alive}
