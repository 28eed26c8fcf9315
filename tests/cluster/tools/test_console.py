"""``ringlog console-producer`` and ``console-consumer``: lines in, records out, against a
real cluster; Kafka's line reader and message formatter on their own."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
from cluster.producer.partitioner import partition_for_key
from cluster.tools import console_consumer, console_producer
from cluster.tools.console_consumer import MessageFormatter
from cluster.tools.console_producer import LineReader
from cluster.tools.support import Terminated, ToolError, stop_on_sigterm
from consumer_proc.consumer_record import ConsumerRecord
from tests.support.tools import run_tool, tool_cluster

cluster = tool_cluster(brokers=1, group_initial_rebalance_delay_ms=0)


def create(cluster, name, partitions):
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)])


def produce(cluster, topic, lines, *argv):
    return run_tool(console_producer, "--bootstrap-server", cluster.bootstrap_servers,
                    "--topic", topic, *argv, stdin=lines)


def consume(cluster, topic, *argv):
    return run_tool(console_consumer, "--bootstrap-server", cluster.bootstrap_servers,
                    "--topic", topic, "--timeout-ms", 5000, *argv)


@pytest.mark.multiprocess
def test_round_trip_with_keys_and_properties(cluster, capsys):
    create(cluster, "lines", 3)
    keys = [f"host-{i % 7}" for i in range(40)]
    lines = "".join(f"{key}:request {i}\n" for i, key in enumerate(keys)).encode()
    assert produce(cluster, "lines", lines, "--property", "parse.key=true",
                   "--property", "key.separator=:", "--producer-property", "acks=all") == 0
    assert consume(cluster, "lines", "--from-beginning", "--max-messages", 40,
                   "--property", "print.key=true", "--property", "print.offset=true",
                   "--property", "print.partition=true", "--property", "print.timestamp=true",
                   "--property", "key.separator=|") == 0
    out, err = capsys.readouterr()
    assert err.splitlines()[-1] == "Processed a total of 40 messages"
    rows = [line.split("|") for line in out.splitlines()]
    assert len(rows) == 40
    seen = {}
    for timestamp, partition, offset, key, value in rows:
        assert timestamp.startswith("CreateTime:") and int(timestamp[11:]) > 0
        partition = int(partition.removeprefix("Partition:"))
        assert partition == partition_for_key(key.encode(), 3)  # Kafka's murmur2 placement
        seen.setdefault(partition, []).append((int(offset.removeprefix("Offset:")), key, value))
    for partition, records in seen.items():
        assert [offset for offset, _, _ in records] == list(range(len(records)))
        expected = [(k, f"request {i}") for i, k in enumerate(keys)
                    if partition_for_key(k.encode(), 3) == partition]
        assert [(key, value) for _, key, value in records] == expected


@pytest.mark.multiprocess
def test_headers_and_null_marker(cluster, capsys):
    lines = b"trace:abc,span:1\tk1\thello\nNONE\tk2\tNONE\nh:NONE\tNONE\tbye\n"
    assert produce(cluster, "headers", lines, "--property", "parse.headers=true",
                   "--property", "parse.key=true", "--property", "null.marker=NONE") == 0
    assert consume(cluster, "headers", "--from-beginning", "--max-messages", 3,
                   "--property", "print.headers=true", "--property", "print.key=true") == 0
    assert capsys.readouterr().out.splitlines() == [
        "trace:abc,span:1\tk1\thello", "NO_HEADERS\tk2\tnull", "h:null\tnull\tbye"]


@pytest.mark.multiprocess
def test_partition_and_offset(cluster, capsys):
    create(cluster, "seek", 2)
    lines = b"".join(b"v%d\n" % i for i in range(10))
    assert produce(cluster, "seek", lines, "--producer-property", "partitioner=round_robin") == 0
    assert consume(cluster, "seek", "--partition", 1, "--offset", 2,
                   "--property", "print.offset=true", "--timeout-ms", 500) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["Offset:2\tv5", "Offset:3\tv7", "Offset:4\tv9"]
    assert err.splitlines()[-1] == "Processed a total of 3 messages"
    assert consume(cluster, "seek", "--partition", 0, "--offset", "latest",
                   "--timeout-ms", 300) == 0
    assert capsys.readouterr() == ("", "Processed a total of 0 messages\n")
    assert consume(cluster, "seek", "--partition", 0, "--from-beginning",
                   "--max-messages", 1) == 0
    assert capsys.readouterr().out == "v0\n"


@pytest.mark.multiprocess
def test_include_pattern(cluster, capsys):
    for name in ("inc.a", "inc.b", "incx"):
        assert produce(cluster, name, f"from {name}\n".encode(), "--sync") == 0
    assert run_tool(console_consumer, "--bootstrap-server", cluster.bootstrap_servers,
                    "--include", r"inc\..*", "--from-beginning", "--max-messages", 2,
                    "--timeout-ms", 5000, "--isolation-level", "read_committed") == 0
    assert sorted(capsys.readouterr().out.splitlines()) == ["from inc.a", "from inc.b"]


@pytest.mark.multiprocess
def test_sync_and_compression(cluster, capsys):
    lines = b"".join(b"compressed line %d\n" % i for i in range(100))
    assert produce(cluster, "zipped", lines, "--sync", "--compression-codec",
                   "--batch-size", 4096, "--request-required-acks", "1") == 0
    assert consume(cluster, "zipped", "--from-beginning", "--max-messages", 100) == 0
    assert capsys.readouterr().out.encode() == lines


@pytest.mark.multiprocess
def test_a_line_that_does_not_parse_stops_the_producer(cluster, capsys):
    lines = b"k:first\nno separator\nk:never\n"
    assert produce(cluster, "parse", lines, "--property", "parse.key=true",
                   "--property", "key.separator=:") == 1
    assert "No key separator found on line number 2: 'no separator'" in \
        capsys.readouterr().err
    assert consume(cluster, "parse", "--from-beginning", "--timeout-ms", 500,
                   "--property", "print.key=true") == 0
    assert capsys.readouterr().out == "k\tfirst\n"
    assert produce(cluster, "parse", lines, "--property", "parse.key=true",
                   "--property", "key.separator=:", "--property", "ignore.error=true") == 0
    assert consume(cluster, "parse", "--partition", 0, "--offset", 1, "--timeout-ms", 500,
                   "--property", "print.key=true") == 0
    assert capsys.readouterr().out.splitlines() == [
        "k\tfirst", "null\tno separator", "k\tnever"]


@pytest.mark.multiprocess
def test_bad_settings_are_named(cluster, capsys):
    assert produce(cluster, "bad", b"x\n", "--producer-property", "no.such.thing=1") == 1
    assert "no.such.thing" in capsys.readouterr().err
    assert produce(cluster, "bad", b"x\n", "--compression-codec", "brotli") == 1
    assert "'brotli'" in capsys.readouterr().err
    assert run_tool(console_producer, "--topic", "bad", stdin=b"x\n") == 1
    assert "--bootstrap-server must be specified" in capsys.readouterr().err
    assert run_tool(console_consumer, "--bootstrap-server", cluster.bootstrap_servers) == 1
    assert "Exactly one of --topic or --include is required" in capsys.readouterr().err
    assert run_tool(console_consumer, "--bootstrap-server", cluster.bootstrap_servers,
                    "--include", "x", "--partition", 0) == 1
    assert "The topic is required when partition is specified." in capsys.readouterr().err
    assert consume(cluster, "bad", "--offset", 3) == 1
    assert "The partition is required when offset is specified." in capsys.readouterr().err
    assert consume(cluster, "bad", "--partition", 0, "--offset", "soon") == 1
    assert "The provided offset value 'soon' is incorrect" in capsys.readouterr().err
    assert consume(cluster, "bad", "--partition", 0, "--offset", 1, "--from-beginning") == 1
    assert "from-beginning and offset cannot be specified together" in capsys.readouterr().err
    assert consume(cluster, "bad", "--from-beginning",
                   "--consumer-property", "auto.offset.reset=latest") == 1
    assert "Can't simultaneously specify --from-beginning and 'auto.offset.reset=latest'" in \
        capsys.readouterr().err
    assert consume(cluster, "bad", "--group", "g1", "--consumer-property", "group.id=g2") == 1
    assert "The group ids provided in different places" in capsys.readouterr().err


@pytest.mark.multiprocess
def test_failed_sends_are_reported(cluster, capsys):
    create(cluster, "small", 1)
    big = b"x" * 2000 + b"\n"
    assert produce(cluster, "small", b"ok\n" + big, "--producer-property",
                   "max.request.size=1500") == 1
    err = capsys.readouterr().err
    assert "Error when sending message to topic small with key: null, value: 2000 bytes " \
           "with error: RecordTooLargeError: [Error 10] " in err


# -- the line reader and the formatter alone ------------------------------------------------------

def test_line_reader_follows_kafka():
    reader = LineReader({"parse.key": "true", "key.separator": "::"})
    assert reader.parse(b"a::b::c\r\n") == (b"a", b"b::c", None)
    assert reader.parse(b"::value\n") == (b"", b"value", None)
    not_utf8 = b"\xff\xfe::\x80"
    assert reader.parse(not_utf8) == (b"\xff\xfe", b"\x80", None)
    with pytest.raises(ToolError, match="No key separator found on line number 4: 'plain'"):
        reader.parse(b"plain\n")
    plain = LineReader({})
    assert plain.parse(b"a\tb\n") == (None, b"a\tb", None)
    headers = LineReader({"parse.headers": "true", "headers.separator": "[,;]"})
    assert headers.parse(b"a:1;b:\tv") == (None, b"v", [("a", b"1"), ("b", b"")])
    with pytest.raises(ToolError, match="No header key separator found in pair 'x'"):
        headers.parse(b"x\tv")
    marked = LineReader({"parse.headers": "true", "null.marker": "-"})
    with pytest.raises(ToolError, match="Header keys should not be equal to the null marker"):
        marked.parse(b"-:1\tv")


def test_line_reader_refuses_clashing_separators():
    with pytest.raises(ToolError, match="headers.separator and headers.key.separator may not "
                                        "be equal"):
        LineReader({"headers.separator": ":"})
    with pytest.raises(ToolError, match="null.marker and key.separator may not be equal"):
        LineReader({"null.marker": "\t"})
    LineReader({"key.separator": ":"})  # the key separator may equal a header separator


def test_formatter_follows_kafka():
    record = ConsumerRecord("t", 2, 0, 41, 1700000000000, 1, b"k", b"v", [("h", None)], None,
                            1, 1, 1)
    assert MessageFormatter({}).format(record) == b"v\n"
    every = MessageFormatter({"print.timestamp": "true", "print.partition": "TRUE",
                              "print.offset": "true", "print.headers": "true",
                              "print.key": "true", "key.separator": " ",
                              "line.separator": ";", "null.literal": "~"})
    assert every.format(record) == b"LogAppendTime:1700000000000 Partition:2 Offset:41 h:~ k v;"
    no_value = MessageFormatter({"print.key": "true", "print.value": "false"})
    assert no_value.format(record._replace(key=None)) == b"null\n"
    assert MessageFormatter({"print.value": "false"}).format(record) == b""


def test_sigterm_unwinds_like_ctrl_c():
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), stop_on_sigterm():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # interrupted: the handler raises
    assert signal.getsignal(signal.SIGTERM) is previous
    outcome = []

    def in_a_thread():
        with stop_on_sigterm():  # signals belong to the main thread: nothing installed
            outcome.append(signal.getsignal(signal.SIGTERM) is previous)
    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert outcome == [True]


@pytest.mark.multiprocess
def test_properties_files(cluster, capsys, tmp_path):
    reader = tmp_path / "reader.properties"
    reader.write_text("parse.key=true\nkey.separator=\\=\n")
    formatter = tmp_path / "formatter.properties"
    formatter.write_text("print.key=true\nkey.separator=->\n")
    # kafka-python's spelling of a key the tool also sets (linger.ms) is one key, not two
    assert produce(cluster, "files", b"a=1\nb=2\n", "--reader-config", reader,
                   "--producer-property", "linger_ms=0") == 0
    assert consume(cluster, "files", "--from-beginning", "--max-messages", 2,
                   "--formatter-config", formatter, "--property", "print.offset=true") == 0
    assert capsys.readouterr().out.splitlines() == ["Offset:0->a->1", "Offset:1->b->2"]
    assert produce(cluster, "files", b"x\n", "--reader-config", tmp_path / "missing") == 1
    assert capsys.readouterr().err == (f"cannot read the reader config "
                                       f"'{tmp_path / 'missing'}': No such file or directory\n")


@pytest.mark.multiprocess
def test_a_group_commits_what_was_printed_and_the_next_run_resumes_there(cluster, capsys):
    create(cluster, "grouped", 3)
    lines = [f"line {i}" for i in range(30)]
    assert produce(cluster, "grouped", "".join(f"{line}\n" for line in lines).encode(),
                   "--producer-property", "acks=all") == 0
    assert consume(cluster, "grouped", "--group", "printers", "--from-beginning",
                   "--max-messages", 10) == 0
    out, err = capsys.readouterr()
    first = out.splitlines()
    assert len(first) == 10 and err.endswith("Processed a total of 10 messages\n")
    # committed on exit: a member of the same group starts where the first one stopped
    # (the 20 others: one it had printed would come twice, and the sum below be short)
    assert consume(cluster, "grouped", "--consumer-property", "group.id=printers",
                   "--max-messages", 20) == 0
    rest = capsys.readouterr().out.splitlines()
    assert sorted(first + rest) == sorted(lines)
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        committed = admin.list_consumer_group_offsets("printers")
    assert sorted(tp.partition for tp in committed) == [0, 1, 2]
    assert sum(om.offset for om in committed.values()) == len(lines)
    # another group has its own offsets: it reads everything again
    assert consume(cluster, "grouped", "--group", "others", "--from-beginning",
                   "--max-messages", 30) == 0
    assert sorted(capsys.readouterr().out.splitlines()) == sorted(lines)
