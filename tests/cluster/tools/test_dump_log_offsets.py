"""`ringlog dump-log --offsets-decoder`: __consumer_offsets records printed as Kafka 3.x's
kafka-dump-log --offsets-decoder prints them (compact JSON keys and payloads)."""
from __future__ import annotations

from cluster.protocol.consumer_protocol import encode_assignment, encode_subscription
from cluster.tools.cli import main
from replica_proc.group_coordinator import records
from segments.log import PartitionLog
from segments.record.records import RecordBatchBuilder

T = 1_700_000_000_000


def write_offsets_log(path, pairs):
    log = PartitionLog(path)
    builder = RecordBatchBuilder()
    for key, value in pairs:
        builder.append(T, key, value)
    log.append(builder.build())
    log.close()
    return path / ("0" * 20 + ".log")


def dump(segment, capsys, *flags):
    assert main(["dump-log", "--files", str(segment), *flags]) == 0
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]


def test_offset_commits_group_metadata_and_tombstones_are_decoded(tmp_path, capsys):
    commit_key = records.encode_key(records.OffsetCommitKey("g", "t", 3))
    group_key = records.encode_key(records.GroupMetadataKey("g"))
    member = records.MemberMetadata(
        "m-1", "client", "/127.0.0.1", 10000, 30000, encode_subscription(["t"]),
        encode_assignment({"t": [0, 3]}), None)
    segment = write_offsets_log(tmp_path / "__consumer_offsets-0", [
        (commit_key, records.encode_value(records.OffsetCommitValue(42, "meta", T, 5))),
        (group_key, records.encode_value(records.GroupMetadataValue(
            "consumer", 1, "range", "m-1", T, (member,)))),
        (commit_key, None),
        (b"\x00\x07junk", b"x"),
    ])
    lines = dump(segment, capsys, "--offsets-decoder")
    assert lines[0].endswith(
        ' key: {"type":"1","data":{"group":"g","topic":"t","partition":3}} payload: '
        '{"version":"3","data":{"offset":42,"leaderEpoch":5,"metadata":"meta",'
        f'"commitTimestamp":{T}}}}}')
    assert lines[1].endswith(
        ' key: {"type":"2","data":{"group":"g"}} payload: {"version":"3","data":{'
        '"protocolType":"consumer","generation":1,"protocol":"range","leader":"m-1",'
        f'"currentStateTimestamp":{T},"members":[{{"memberId":"m-1","groupInstanceId":null,'
        '"clientId":"client","clientHost":"/127.0.0.1","rebalanceTimeout":30000,'
        '"sessionTimeout":10000,"subscription":{"topics":["t"],"userData":null,'
        '"ownedPartitions":[],"generationId":-1,"rackId":null},"assignment":{'
        '"assignedPartitions":[{"topic":"t","partitions":[0,3]}],"userData":null}}]}}')
    assert lines[2].endswith(' key: {"type":"1","data":{"group":"g","topic":"t",'
                             '"partition":3}} payload: <DELETE>')
    assert lines[3].endswith(" key: unknown::version=7 payload: unknown")


def test_without_the_decoder_the_bytes_are_printed(tmp_path, capsys):
    key = records.encode_key(records.GroupMetadataKey("g"))
    segment = write_offsets_log(tmp_path / "__consumer_offsets-1", [(key, None)])
    [line] = dump(segment, capsys, "--print-data-log")
    assert "key: " in line and "payload" not in line and "{" not in line
