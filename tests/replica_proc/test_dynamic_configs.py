"""Dynamic broker configs in the image reach every open log without a restart: the
ReplicaManager's defaults are server.properties under the cluster-wide default under the
broker's own, and a change this broker cannot run with is logged and left out."""
from __future__ import annotations

import dataclasses
import logging

import pytest

from cluster.config import BrokerConfig
from replica_proc.replica_manager import ReplicaManager
from tests.support.broker import make_image
from tests.support.clock import T0, FakeClock


@pytest.fixture
def manager(tmp_path):
    config = BrokerConfig({"broker.id": 0, "log.segment.bytes": "100000",
                           "ringlog.ring.bytes": str(2 << 20), "message.max.bytes": "500000",
                           "replica.fetch.max.bytes": "500000"},
                          data_dir=tmp_path)
    replicas = ReplicaManager(0, config["log.dirs"], config, FakeClock(T0))
    yield replicas
    replicas.close()


def image(version, broker_configs, **topic_configs):
    base = make_image("unit", version, {"t": (1, topic_configs)}, brokers=(0, 1))
    return dataclasses.replace(base, broker_configs=broker_configs)


def test_broker_defaults_reach_open_logs_and_overrides_still_win(manager):
    manager.apply(image(1, {}))
    log = manager.leader("t", 0).log
    assert log.config.segment_bytes == 100000  # server.properties
    manager.apply(image(2, {"": {"log.segment.bytes": "20000", "min.insync.replicas": "2"}}))
    assert log.config.segment_bytes == 20000
    assert manager.leader("t", 0).min_insync_replicas == 2
    manager.apply(image(3, {"": {"log.segment.bytes": "20000"},
                            "0": {"log.segment.bytes": "30000"},
                            "1": {"log.segment.bytes": "40000"}}))
    assert log.config.segment_bytes == 30000  # this broker's own
    assert manager.leader("t", 0).min_insync_replicas == 1
    manager.apply(image(4, {"0": {"log.segment.bytes": "30000"}}, **{"segment.bytes": "5000"}))
    assert log.config.segment_bytes == 5000  # the topic's override
    manager.apply(image(5, {}))
    assert log.config.segment_bytes == 100000


def test_a_change_this_broker_cannot_run_is_logged_and_left_out(manager, caplog):
    manager.apply(image(1, {"": {"log.segment.bytes": "20000"}}))
    log = manager.leader("t", 0).log
    with caplog.at_level(logging.ERROR, logger="replica_proc.replica_manager"):
        manager.apply(image(2, {"": {"log.segment.bytes": "30000",
                                     "message.max.bytes": "1048588"}}))
    assert "ringlog.ring.bytes" in caplog.text and "message.max.bytes" in caplog.text
    assert log.config.segment_bytes == 20000
    assert log.config.max_message_bytes == 500000
