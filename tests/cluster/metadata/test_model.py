"""The metadata model: topic name rule, images, JSON round trip."""
from __future__ import annotations

import pytest

from cluster.errors import InvalidTopicError
from cluster.metadata.model import (
    BrokerInfo,
    MetadataImage,
    PartitionState,
    TopicInfo,
    validate_topic_name,
)


@pytest.mark.parametrize("name", ["t", "a.b_c-D9", "x" * 249, "__consumer_offsets"])
def test_legal_topic_names(name):
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name,words", [
    ("", "non-empty"), (".", "cannot be '.'"), ("..", "cannot be '..'"),
    ("x" * 250, "250 characters"), ("bad topic!", "contains ' !'"), ("ümlaut", "'ü'"),
    (None, "None"),
])
def test_illegal_topic_names_are_named(name, words):
    with pytest.raises(InvalidTopicError, match=words.replace(".", r"\.")) as e:
        validate_topic_name(name)
    assert e.value.errno == 17


def image():
    parts = tuple(PartitionState("t", n, leader=n % 2, leader_epoch=3, replicas=(n % 2,),
                                 isr=(n % 2,), partition_epoch=n) for n in range(3))
    return MetadataImage(
        version=7, cluster_id="c1", controller_id=1,
        brokers={0: BrokerInfo(0, 100, True), 1: BrokerInfo(1, 101, False)},
        topics={"t": TopicInfo("t", "uuid-1", parts, {"retention.ms": "1000"})},
        deleted_topic_ids=frozenset({"uuid-0"}))


def test_json_round_trip_keeps_everything():
    original = image()
    assert MetadataImage.from_json(original.to_json()) == original


def test_lookups():
    img = image()
    assert img.partition("t", 2).leader == 0
    assert img.partition("t", 3) is None and img.partition("u", 0) is None
    assert [p.partition for p in img.partitions_led_by(1)] == [1]
    assert [p.partition for p in img.partitions_on(0)] == [0, 2]
    assert img.live_brokers() == [0]
    assert img.replace(controller_id=0).version == 8
