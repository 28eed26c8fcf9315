"""The coordinator's timers: one deadline per key, replaced and cancelled lazily."""
from __future__ import annotations

from replica_proc.group_coordinator.timers import Timers


def due(timers, now):
    out = []
    while (key := timers.pop_due(now)) is not None:
        out.append(key)
    return out


def test_keys_fire_in_deadline_order_once():
    timers = Timers()
    timers.set("b", 2.0)
    timers.set("a", 1.0)
    timers.set("c", 3.0)
    assert timers.next_deadline() == 1.0
    assert due(timers, 2.0) == ["a", "b"]
    assert due(timers, 2.0) == []
    assert (len(timers), "c" in timers, timers.deadline("c")) == (1, True, 3.0)


def test_set_replaces_and_cancel_forgets():
    timers = Timers()
    timers.set("a", 1.0)
    timers.set("a", 5.0)
    timers.set("b", 2.0)
    timers.cancel("b")
    timers.cancel("never set")
    assert timers.next_deadline() == 5.0
    assert due(timers, 4.9) == []
    assert due(timers, 5.0) == ["a"]
    assert (timers.next_deadline(), timers.deadline("a"), len(timers)) == (None, None, 0)


def test_a_key_set_again_to_the_same_deadline_fires_once():
    timers = Timers()
    timers.set("a", 1.0)
    timers.set("a", 1.0)
    assert due(timers, 1.0) == ["a"]
