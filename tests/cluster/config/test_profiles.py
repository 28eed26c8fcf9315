"""Broker configuration profiles (cluster/config/profiles.py) as Cluster takes them: no
process is started (a Cluster starts nothing before ``start()``)."""
from __future__ import annotations

import pytest

from cluster.config.profiles import MIB, apply_profile
from cluster.supervisor.cluster import Cluster


def test_dev_profile_under_the_callers_settings(tmp_path):
    cluster = Cluster(tmp_path / "d", profile="dev", log_segment_bytes=4 * MIB,
                      config={"group.initial.rebalance.delay.ms": 100})
    assert cluster.config["log.segment.bytes"] == 4 * MIB  # the caller's wins
    assert cluster.config["group.initial.rebalance.delay.ms"] == 100
    assert cluster.config["offsets.topic.segment.bytes"] == MIB
    assert cluster.config["transaction.state.log.segment.bytes"] == MIB
    assert cluster.config["ringlog.fsync"] is False


def test_no_profile_adds_nothing(tmp_path):
    assert Cluster(tmp_path / "d").config == {}
    assert apply_profile(None, {"num.partitions": 2}) == {"num.partitions": 2}


def test_an_unknown_profile_is_named(tmp_path):
    with pytest.raises(ValueError, match="unknown cluster profile 'prod'.*known: dev"):
        Cluster(tmp_path / "d", profile="prod")
