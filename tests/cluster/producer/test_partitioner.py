"""cluster.producer.partitioner: Kafka's murmur2 bit for bit, and the null-key strategies."""
from __future__ import annotations

import random

import numpy as np
import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from cluster.errors import KafkaConfigurationError
from cluster.producer.partitioner import (
    CallablePartitioner,
    DefaultPartitioner,
    RandomPartitioner,
    RoundRobinPartitioner,
    murmur2,
    murmur2_many,
    partition_for_key,
    partitions_for_keys,
    resolve_partitioner,
    to_positive,
)

# apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java#testMurmur2
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# kafka-python test/test_partitioner.py#test_murmur2_java_compatibility: partition out of
# 1000, "compare with output from Kafka's org.apache.kafka.clients.producer.Partitioner".
JAVA_PARTITION_OF_1000 = {
    b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742,
}


def random_keys(count, max_length, seed=7):
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(0, max_length)) for _ in range(count)]


@pytest.mark.parametrize("key, expected", sorted(JAVA_MURMUR2.items()))
def test_murmur2_matches_java(key, expected):
    assert murmur2(key) == expected
    assert murmur2(bytearray(key)) == expected
    assert murmur2(memoryview(b"xx" + key)[2:]) == expected


@pytest.mark.parametrize("key, expected", sorted(JAVA_PARTITION_OF_1000.items()))
def test_partition_for_key_matches_java(key, expected):
    assert partition_for_key(key, 1000) == expected


def test_murmur2_matches_kafka_python_on_random_keys():
    for key in random_keys(3000, 70):
        h = murmur2(key)
        assert -2**31 <= h < 2**31
        assert h & 0xFFFFFFFF == kafka_python_murmur2(key), key  # kafka-python: unsigned


def test_to_positive_clears_the_sign_bit_like_java():
    assert to_positive(-2**31) == 0  # abs() would give 2**31, outside int32
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(12345) == 12345


@pytest.mark.parametrize("keys", [
    random_keys(2000, 70),
    [b"user-%011d" % i for i in range(500)],          # one length, no tail
    [b"%d" % i for i in range(500)],                   # short, every tail length
    [b"", b"", b"a"],
    [bytes(range(256)) * 5, b"x"],                     # long and short together
    list(JAVA_MURMUR2),
])
def test_murmur2_many_equals_murmur2(keys):
    many = murmur2_many(keys)
    assert many.dtype == np.int32
    assert many.tolist() == [murmur2(k) for k in keys]
    assert partitions_for_keys(keys, 13).tolist() == [partition_for_key(k, 13) for k in keys]


def test_murmur2_many_of_no_keys():
    assert murmur2_many([]).tolist() == []
    assert partitions_for_keys([], 3).tolist() == []


def test_partitions_for_keys_match_java_vectors():
    keys = list(JAVA_PARTITION_OF_1000)
    assert partitions_for_keys(keys, 1000).tolist() == list(JAVA_PARTITION_OF_1000.values())


ALL = [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("cls", [DefaultPartitioner, RandomPartitioner])
def test_keyed_records_hash_over_all_partitions_whatever_is_available(cls):
    partitioner = cls(rng=random.Random(1))
    for key in random_keys(200, 20):
        expected = ALL[partition_for_key(key, len(ALL))]
        assert partitioner.partition("t", key, ALL, ALL) == expected
        assert partitioner.partition("t", key, ALL, [5]) == expected
        assert partitioner.partition("t", key, ALL, []) == expected
        assert partitioner(key, ALL, [1]) == expected  # kafka-python's callable shape


def test_keyed_records_index_into_the_given_partition_ids():
    ids = [10, 11, 12]
    assert DefaultPartitioner().partition("t", b"21", ids, ids) == ids[
        partition_for_key(b"21", 3)]


def test_sticky_keeps_one_available_partition_until_a_new_batch():
    partitioner = DefaultPartitioner(rng=random.Random(3))
    available = [1, 3, 5]
    first = partitioner.partition("t", None, ALL, available)
    assert first in available
    assert {partitioner.partition("t", None, ALL, available) for _ in range(100)} == {first}

    seen = [first]
    for _ in range(30):
        partitioner.on_new_batch("t", seen[-1], ALL, available)
        now = partitioner.partition("t", None, ALL, available)
        assert now in available and now != seen[-1]
        seen.append(now)
    assert set(seen) == set(available)


def test_sticky_ignores_a_stale_new_batch_report():
    partitioner = DefaultPartitioner(rng=random.Random(5))
    current = partitioner.partition("t", None, ALL, ALL)
    stale = next(p for p in ALL if p != current)
    partitioner.on_new_batch("t", stale, ALL, ALL)
    assert partitioner.partition("t", None, ALL, ALL) == current


def test_sticky_is_per_topic():
    partitioner = DefaultPartitioner(rng=random.Random(11))
    a = partitioner.partition("a", None, ALL, ALL)
    b = partitioner.partition("b", None, ALL, ALL)
    partitioner.on_new_batch("a", a, ALL, ALL)
    assert partitioner.partition("b", None, ALL, ALL) == b


def test_sticky_with_one_or_no_available_partition():
    partitioner = DefaultPartitioner(rng=random.Random(2))
    assert partitioner.partition("one", None, ALL, [4]) == 4
    partitioner.on_new_batch("one", 4, ALL, [4])
    assert partitioner.partition("one", None, ALL, [4]) == 4
    picks = set()
    for _ in range(60):
        current = partitioner.partition("none", None, ALL, [])
        picks.add(current)
        partitioner.on_new_batch("none", current, ALL, [])
    assert picks <= set(ALL) and len(picks) > 1


def test_round_robin_cycles_available_partitions_and_ignores_keys():
    partitioner = RoundRobinPartitioner()
    picks = [partitioner.partition("t", b"same-key", ALL, [0, 2, 4]) for _ in range(6)]
    assert picks == [0, 2, 4, 0, 2, 4]
    assert [partitioner.partition("u", None, ALL, []) for _ in range(7)] == ALL + [0]
    assert partitioner.partition("t", None, ALL, [0, 2, 4]) == 0  # "t" kept its own count
    partitioner.on_new_batch("t", 0, ALL, [0, 2, 4])
    assert partitioner(None, ALL, [0, 2, 4]) in (0, 2, 4)


def test_random_spreads_null_keys_over_available_partitions():
    partitioner = RandomPartitioner(rng=random.Random(9))
    assert {partitioner.partition("t", None, ALL, [1, 2]) for _ in range(200)} == {1, 2}
    assert {partitioner.partition("t", None, ALL, []) for _ in range(400)} == set(ALL)
    again = RandomPartitioner(rng=random.Random(9))
    first = RandomPartitioner(rng=random.Random(9))
    assert ([again.partition("t", None, ALL, ALL) for _ in range(20)]
            == [first.partition("t", None, ALL, ALL) for _ in range(20)])


def test_resolve_partitioner():
    assert isinstance(resolve_partitioner(None), DefaultPartitioner)
    assert isinstance(resolve_partitioner("default"), DefaultPartitioner)
    assert isinstance(resolve_partitioner("sticky"), DefaultPartitioner)
    assert isinstance(resolve_partitioner("round_robin"), RoundRobinPartitioner)
    assert isinstance(resolve_partitioner("random"), RandomPartitioner)
    mine = RoundRobinPartitioner()
    assert resolve_partitioner(mine) is mine

    calls = []

    def kafka_python_style(key_bytes, all_partitions, available):
        calls.append((key_bytes, list(all_partitions), list(available)))
        return all_partitions[-1]

    wrapped = resolve_partitioner(kafka_python_style)
    assert isinstance(wrapped, CallablePartitioner)
    assert wrapped.partition("t", b"k", ALL, [1]) == 5
    assert wrapped.partition("t", None, ALL, []) == 5
    wrapped.on_new_batch("t", 5, ALL, [])
    assert calls == [(b"k", ALL, [1]), (None, ALL, [])]


@pytest.mark.parametrize("bad", ["murmur3", 42])
def test_resolve_partitioner_rejects_unknown_values(bad):
    with pytest.raises(KafkaConfigurationError, match=repr(bad)):
        resolve_partitioner(bad)
