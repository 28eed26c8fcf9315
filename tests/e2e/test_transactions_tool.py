"""KafkaAdminClient's transaction methods and ``ringlog transactions`` against real brokers
and real producers: transactional producers leave one id CompleteCommit, one
CompleteAbort and one Ongoing, and an idempotent producer writes too; ``list`` shows each
id at the broker that coordinates it (filtered by state, producer id), ``describe`` an
id's state, epoch, timeout, start time and partitions, ``describe-producers`` the
partition leaders' producer state (the open transaction's first offset, the idempotent
producer's last sequence), ``find-hanging`` a transaction no coordinator knows of (written
by hand) and ``abort`` ends it. Unknown ids, missing topics or partitions and a data directory
without a running cluster fail with exit status 1 and a message naming them.

The ``e2e`` fixture stops the cluster and fails the test if any process it started still
runs or any shared-memory object of its cluster is left."""
from __future__ import annotations

import time

import pytest

from cluster import KafkaAdminClient, KafkaProducer, NewTopic, TopicPartition
from cluster.errors import (
    IllegalArgumentError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)
from cluster.metadata.model import TRANSACTION_STATE_TOPIC
from cluster.tools.cli import main as ringlog
from replica_proc.coordinator_common.partitioning import partition_for
from segments.record.records import RecordBatchBuilder
from tests.support.bounds import BOUND
from tests.support.broker import produce_to_leader

pytestmark = pytest.mark.multiprocess

TOPIC = "ledger"
TXN_PARTITIONS = 3
IDEMPOTENT_SENDS = 4
#: The producer id of a transaction written without its coordinator (hanging).
ZOMBIE_PID = 424_242
#: The columns of kafka-transactions.sh (TransactionsCommand.java).
LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                    "TransactionDurationMs", "TopicPartitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                     "LastTimestamp", "CurrentTransactionStartOffset")


def transactions_tool(cluster_dir, capsys, *argv):
    code = ringlog(["transactions", "--bootstrap-server", str(cluster_dir), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def table(out):
    """(header cells, rows of cells) of a printed table (cells are tab-terminated)."""
    lines = [[cell.strip() for cell in line.split("\t")[:-1]] for line in out.splitlines()]
    return lines[0], lines[1:]


def wait_for_states(admin, expected):
    """The listing once each id of ``expected`` {id: state} is in its state."""
    deadline = time.monotonic() + BOUND
    while True:
        listed = {t.transactional_id: t for t in admin.list_transactions()}
        if {i: t.state for i, t in listed.items() if i in expected} == expected:
            return listed
        assert time.monotonic() < deadline, listed
        time.sleep(0.05)


@pytest.fixture
def scene(e2e):
    """A 3-broker cluster where "committer" committed 3 records to partition 0, "aborter"
    aborted one on partition 1, "open" has a transaction open on partition 0 (its record's
    offset in ``open_offset``) and an idempotent producer sent IDEMPOTENT_SENDS records to
    partition 1."""
    cluster = e2e.cluster(brokers=3, transaction_state_log_num_partitions=TXN_PARTITIONS,
                          offsets_topic_num_partitions=2, broker_session_timeout_ms=1500,
                          broker_heartbeat_interval_ms=100)
    servers = cluster.bootstrap_servers
    with KafkaAdminClient(bootstrap_servers=servers) as admin:
        admin.create_topics([NewTopic(TOPIC, 2, 3)])
    producers = {name: KafkaProducer(bootstrap_servers=servers, transactional_id=name)
                 for name in ("committer", "aborter", "open")}
    plain = KafkaProducer(bootstrap_servers=servers, enable_idempotence=True, acks="all")
    try:
        for p in producers.values():
            p.init_transactions()
            p.begin_transaction()
        for n in range(3):
            producers["committer"].send(TOPIC, b"c%d" % n, partition=0)
        producers["committer"].commit_transaction()
        producers["aborter"].send(TOPIC, b"a", partition=1)
        producers["aborter"].flush(BOUND)
        producers["aborter"].abort_transaction()
        open_offset = producers["open"].send(TOPIC, b"o", partition=0).get(BOUND).offset
        for n in range(IDEMPOTENT_SENDS):
            plain.send(TOPIC, b"i%d" % n, partition=1).get(BOUND)
        yield cluster, producers, open_offset
        producers["open"].abort_transaction()
    finally:
        plain.close(timeout=5)
        for p in producers.values():
            p.close(timeout=5)


def coordinator_of(cluster, transactional_id):
    image = cluster.wait_for_metadata(lambda i: TRANSACTION_STATE_TOPIC in i.topics)
    index = partition_for(transactional_id, TXN_PARTITIONS)
    return image.topics[TRANSACTION_STATE_TOPIC].partitions[index].leader


def test_the_admin_client_lists_and_describes_transactions_and_producers(scene):
    cluster, producers, open_offset = scene
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        listed = wait_for_states(admin, {"committer": "CompleteCommit",
                                         "aborter": "CompleteAbort", "open": "Ongoing"})
        for name, listing in listed.items():
            assert listing.coordinator_id == coordinator_of(cluster, name)
        assert [t.transactional_id for t in admin.list_transactions(
            state_filter=["Ongoing"])] == ["open"]
        assert [t.transactional_id for t in admin.list_transactions(
            producer_id_filter=[listed["aborter"].producer_id])] == ["aborter"]
        with pytest.raises(IllegalArgumentError, match="Bogus"):
            admin.list_transactions(state_filter=["Bogus"])

        described = admin.describe_transactions(["open", "committer"])
        d = described["open"]
        assert (d.state, d.producer_id, d.coordinator_id) == (
            "Ongoing", listed["open"].producer_id, coordinator_of(cluster, "open"))
        assert d.topic_partitions == {TopicPartition(TOPIC, 0)}
        assert d.transaction_timeout_ms == 60_000
        assert abs(d.transaction_start_time_ms - time.time() * 1000) < 60_000 * 5
        assert described["committer"].state == "CompleteCommit"
        assert described["committer"].topic_partitions == frozenset()
        with pytest.raises(TransactionalIdNotFoundError, match="nobody"):
            admin.describe_transactions(["nobody"])

        states = admin.describe_producers([TopicPartition(TOPIC, 0),
                                           TopicPartition(TOPIC, 1)])
        by_id = {(tp.partition, s.producer_id): s for tp, found in states.items()
                 for s in found}
        committer = by_id[(0, listed["committer"].producer_id)]
        assert committer.current_transaction_start_offset is None
        assert committer.last_sequence == 2 and committer.coordinator_epoch is not None
        assert by_id[(0, listed["open"].producer_id)].current_transaction_start_offset == \
            open_offset
        [plain] = [s for (p, pid), s in by_id.items()
                   if p == 1 and pid != listed["aborter"].producer_id]
        assert (plain.producer_epoch, plain.last_sequence, plain.coordinator_epoch,
                plain.current_transaction_start_offset) == (
            0, IDEMPOTENT_SENDS - 1, None, None)
        with pytest.raises(UnknownTopicOrPartitionError, match="missing"):
            admin.describe_producers([TopicPartition("missing", 0)])
        with pytest.raises(UnknownTopicOrPartitionError, match=f"{TOPIC}-9"):
            admin.describe_producers([TopicPartition(TOPIC, 9)])


def test_the_admin_client_follows_a_killed_coordinator_and_leader(scene):
    """The coordinator of "open" and the leader of its partition SIGKILLed: the admin
    client finds the new coordinator (which loaded the open transaction) and the new
    leader (whose producer state it replicated) and answers as before."""
    cluster, producers, open_offset = scene
    tp = TopicPartition(TOPIC, 0)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        listed = wait_for_states(admin, {"open": "Ongoing"})
        before = admin.describe_transactions(["open"])["open"]
        image = cluster.metadata()
        doomed = {coordinator_of(cluster, "open"), image.topics[TOPIC].partitions[0].leader}
        for broker_id in doomed:
            cluster.kill_broker(broker_id)
        cluster.wait_for_metadata(lambda i: not doomed & {
            i.topics[TOPIC].partitions[0].leader,
            i.topics[TRANSACTION_STATE_TOPIC].partitions[
                partition_for("open", TXN_PARTITIONS)].leader} and all(
            p.leader >= 0 for p in (i.topics[TOPIC].partitions[0], i.topics[
                TRANSACTION_STATE_TOPIC].partitions[partition_for("open", TXN_PARTITIONS)])))
        after = admin.describe_transactions(["open"])["open"]
        assert after.coordinator_id not in doomed
        assert after._replace(coordinator_id=before.coordinator_id) == before
        [state] = [s for s in admin.describe_producers([tp])[tp]
                   if s.producer_id == listed["open"].producer_id]
        assert state.current_transaction_start_offset == open_offset
        assert listed["open"].producer_id in {
            t.producer_id for t in admin.list_transactions(state_filter=["Ongoing"])}
    for broker_id in doomed:  # so that the fixture's abort finds min.insync.replicas
        cluster.start_broker(broker_id)


def test_the_transactions_tool(scene, capsys):
    cluster, producers, open_offset = scene
    data = cluster.bootstrap_servers
    with KafkaAdminClient(bootstrap_servers=data) as admin:
        listed = wait_for_states(admin, {"committer": "CompleteCommit",
                                         "aborter": "CompleteAbort", "open": "Ongoing"})

    code, out, _ = transactions_tool(data, capsys, "list")
    assert code == 0
    headers, rows = table(out)
    assert tuple(headers) == LIST_HEADERS
    assert sorted(rows) == sorted(
        [t.transactional_id, str(t.coordinator_id), str(t.producer_id), t.state]
        for t in listed.values())
    code, out, _ = transactions_tool(data, capsys, "list", "--state-filters", "Ongoing",
                                     "CompleteAbort")
    assert code == 0 and sorted(row[0] for row in table(out)[1]) == ["aborter", "open"]
    code, out, err = transactions_tool(data, capsys, "list", "--state-filters", "Bogus")
    assert code == 1 and "Bogus" in err and out == ""

    code, out, _ = transactions_tool(data, capsys, "describe", "--transactional-id", "open")
    assert code == 0
    headers, [row] = table(out)
    assert tuple(headers) == DESCRIBE_HEADERS
    fields = dict(zip(headers, row))
    assert fields["CoordinatorId"] == str(coordinator_of(cluster, "open"))
    assert (fields["TransactionalId"], fields["ProducerId"], fields["TransactionState"],
            fields["TransactionTimeoutMs"], fields["TopicPartitions"]) == (
        "open", str(listed["open"].producer_id), "Ongoing", "60000", f"{TOPIC}-0")
    assert int(fields["TransactionDurationMs"]) >= 0
    code, out, _ = transactions_tool(data, capsys, "describe", "--transactional-id",
                                     "committer")
    headers, [row] = table(out)
    fields = dict(zip(headers, row))
    assert code == 0 and (fields["TransactionState"], fields["TopicPartitions"]) == (
        "CompleteCommit", "")
    code, out, err = transactions_tool(data, capsys, "describe", "--transactional-id",
                                       "nobody")
    assert code == 1 and out == ""
    assert "transactional-id `nobody`" in err and "TransactionalIdNotFoundError" in err

    code, out, _ = transactions_tool(data, capsys, "describe-producers", "--topic", TOPIC,
                                     "--partition", "0")
    assert code == 0
    headers, rows = table(out)
    assert tuple(headers) == PRODUCERS_HEADERS
    by_id = {row[0]: row for row in rows}
    assert by_id[str(listed["open"].producer_id)][5] == str(open_offset)
    assert by_id[str(listed["committer"].producer_id)][3:6:2] == ["2", "None"]
    code, out, err = transactions_tool(data, capsys, "describe-producers", "--topic",
                                       "missing", "--partition", "0")
    assert code == 1 and "missing" in err and "UnknownTopicOrPartitionError" in err


def test_the_tool_without_a_running_cluster(e2e, tmp_path, capsys):
    code, out, err = transactions_tool(tmp_path / "nothing-here", capsys, "list")
    assert code == 1 and out == ""
    assert "nothing-here" in err and "meta.properties" in err
    cluster = e2e.cluster(brokers=1, name="stopped")
    cluster.stop()
    code, out, err = transactions_tool(cluster.bootstrap_servers, capsys, "describe",
                                       "--transactional-id", "t")
    assert code == 1 and out == ""
    assert "stopped" in err and "is not running" in err


def write_hanging_transaction(cluster, partition, age_ms):
    """A transactional batch of ZOMBIE_PID on ``partition``, written straight to its
    leader (no coordinator ever hears of it), its timestamp ``age_ms`` old; its offset."""
    builder = RecordBatchBuilder(0, 1 << 16, producer_id=ZOMBIE_PID, producer_epoch=0,
                                 base_sequence=0, is_transactional=True)
    builder.append(int(time.time() * 1000) - age_ms, b"k", b"zombie")
    return produce_to_leader(cluster, TOPIC, partition, bytes(builder.build())).base_offset


def test_find_hanging_and_abort(scene, capsys):
    cluster, producers, open_offset = scene
    data = cluster.bootstrap_servers
    with KafkaAdminClient(bootstrap_servers=data) as admin:
        wait_for_states(admin, {"open": "Ongoing"})
    start = write_hanging_transaction(cluster, 1, age_ms=120_000)

    # timeout 0: "open" is a candidate too, but its coordinator counts TOPIC-0 in it
    code, out, _ = transactions_tool(data, capsys, "find-hanging", "--topic", TOPIC,
                                     "--max-transaction-timeout", "0")
    assert code == 0
    headers, rows = table(out)
    assert tuple(headers) == ("Topic", "Partition", "ProducerId", "ProducerEpoch",
                              "CoordinatorEpoch", "StartOffset", "LastTimestamp",
                              "Duration(min)")
    assert [row[:6] + row[7:] for row in rows] == [
        [TOPIC, "1", str(ZOMBIE_PID), "0", "-1", str(start), "2"]]
    leader = cluster.metadata().topics[TOPIC].partitions[1].leader
    code, out, _ = transactions_tool(data, capsys, "find-hanging", "--broker-id", str(leader),
                                     "--max-transaction-timeout", "1")
    assert code == 0 and [row[2] for row in table(out)[1]] == [str(ZOMBIE_PID)]
    code, out, _ = transactions_tool(data, capsys, "find-hanging", "--topic", TOPIC)
    assert code == 0 and table(out)[1] == []  # younger than the default 15 minutes

    code, out, err = transactions_tool(data, capsys, "abort", "--topic", TOPIC,
                                       "--partition", "1", "--start-offset", "12345")
    assert code == 1 and "Could not find any open transactions starting at offset 12345 " \
        f"on partition {TOPIC}-1" in err
    code, out, err = transactions_tool(data, capsys, "abort", "--topic", TOPIC,
                                       "--partition", "1", "--producer-id", "7")
    assert code == 1 and "--producer-epoch" in err
    code, out, err = transactions_tool(data, capsys, "abort", "--topic", TOPIC,
                                       "--partition", "1", "--start-offset", str(start))
    assert (code, out, err) == (0, "", "")
    code, out, _ = transactions_tool(data, capsys, "find-hanging", "--topic", TOPIC,
                                     "--partition", "1", "--max-transaction-timeout", "0")
    assert code == 0 and table(out)[1] == []
    with KafkaAdminClient(bootstrap_servers=data) as admin:
        [zombie] = [p for p in admin.describe_producers([TopicPartition(TOPIC, 1)])[
            TopicPartition(TOPIC, 1)] if p.producer_id == ZOMBIE_PID]
        assert zombie.current_transaction_start_offset is None
        assert zombie.coordinator_epoch == 0

    # identified by producer id and epochs instead (a negative coordinator epoch is 0)
    write_hanging_transaction(cluster, 0, age_ms=120_000)
    code, out, _ = transactions_tool(data, capsys, "find-hanging", "--topic", TOPIC,
                                     "--partition", "0", "--max-transaction-timeout", "1")
    assert code == 0 and [row[2] for row in table(out)[1]] == [str(ZOMBIE_PID)]
    code, out, err = transactions_tool(data, capsys, "abort", "--topic", TOPIC,
                                       "--partition", "0", "--producer-id", str(ZOMBIE_PID),
                                       "--producer-epoch", "0", "--coordinator-epoch", "-1")
    assert (code, out, err) == (0, "", "")
    code, out, _ = transactions_tool(data, capsys, "find-hanging", "--topic", TOPIC,
                                     "--max-transaction-timeout", "0")
    assert code == 0 and table(out)[1] == []

    code, out, err = transactions_tool(data, capsys, "find-hanging")
    assert code == 1 and "requires either --topic or --broker-id" in err
