"""spark.read.format("ringlog") with Spark's ``kafka.isolation.level`` over a partition
holding committed, aborted and open transactions (written as a producer and its
coordinator would: tests/support/transactions.py): read_committed plans to the last stable
offset (also when a timestamp option asks for the latest offset) and returns the committed
records only; read_uncommitted every data record; no transaction marker is ever a row."""
from __future__ import annotations

import pytest

from tests.spark_bridge.helpers import create_topic, module_cluster, reader, rows_of
from tests.support.transactions import (
    INTERLEAVED,
    committed_values,
    data_values,
    write_interleaved,
)

pytestmark = [pytest.mark.multiprocess, pytest.mark.spark, pytest.mark.slow]

cluster = module_cluster("spark-read-committed", brokers=1)


@pytest.fixture(scope="module")
def offsets(cluster):
    create_topic(cluster, "txn", 1)
    return write_interleaved(cluster.namespace, cluster.broker_ids[0], "txn")


def values_by_offset(rows):
    return [value for (_, _), (_, value, _, _) in sorted(rows.items())]


def test_read_committed_skips_aborted_records_and_stops_at_the_lso(spark, cluster, offsets):
    rows = rows_of(reader(spark, cluster, subscribe="txn",
                          **{"kafka.isolation.level": "read_committed"}).load())
    assert values_by_offset(rows) == committed_values()
    visible = {offset for offset, (_, _, shown) in zip(offsets, INTERLEAVED) if shown}
    assert {offset for (_, offset) in rows} == visible


def test_read_uncommitted_returns_every_data_record(spark, cluster, offsets):
    rows = rows_of(reader(spark, cluster, subscribe="txn").load())
    assert values_by_offset(rows) == data_values()


def test_timestamps_under_read_committed_end_at_the_lso(spark, cluster, offsets):
    # No record at or after endingTimestamp: the ending offset is the latest one, which under
    # read_committed is the last stable offset, as for endingOffsets=latest.
    rows = rows_of(reader(spark, cluster, subscribe="txn", startingTimestamp="0",
                          endingTimestamp=str(2**62),
                          **{"kafka.isolation.level": "read_committed"}).load())
    assert values_by_offset(rows) == committed_values()
    visible = {offset for offset, (_, _, shown) in zip(offsets, INTERLEAVED) if shown}
    assert {offset for (_, offset) in rows} == visible
