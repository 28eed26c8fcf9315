"""``ringlog producer-perf-test``, ``consumer-perf-test`` and ``e2e-latency`` against a real
cluster: Kafka's lines, with the counts asked for and self-consistent figures (never
timings); the latency bookkeeping, the throttle and the progress line on their own."""
from __future__ import annotations

import io
import re

import pytest

from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
from cluster.client.future import Future
from cluster.tools import console_consumer, consumer_perf, e2e_latency, producer_perf
from cluster.tools.producer_perf import Stats
from cluster.tools.progress import Progress
from cluster.tools.throttle import Throttle
from tests.support.tools import run_tool, tool_cluster

cluster = tool_cluster(brokers=1)

SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th\.")


def create(cluster, name, partitions=1):
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)])


def producer_perf_test(cluster, topic, *argv):
    return run_tool(producer_perf, "--bootstrap-server", cluster.bootstrap_servers,
                    "--topic", topic, *argv)


def check_summary(line, records, record_size):
    sent, rate, mb_rate, avg, top, *percentiles = SUMMARY.fullmatch(line).groups()
    assert int(sent) == records
    assert float(rate) > 0
    assert float(mb_rate) == pytest.approx(float(rate) * record_size / 2**20, rel=0.02, abs=0.01)
    assert 0 <= float(avg) <= float(top)
    percentiles = [int(p) for p in percentiles]
    assert percentiles == sorted(percentiles) and percentiles[-1] <= float(top)


@pytest.mark.multiprocess
@pytest.mark.parametrize("mode", [(), ("--bulk", "--bulk-records", 7000)])
def test_producer_perf_prints_kafkas_summary(cluster, capsys, mode):
    topic = f"perf-{len(mode)}"
    create(cluster, topic, partitions=2)
    assert producer_perf_test(cluster, topic, "--num-records", 30000, "--record-size", 100,
                              "--throughput", -1, "--producer-props", "acks=1",
                              "linger.ms=2", *mode) == 0
    out = capsys.readouterr().out.splitlines()
    check_summary(out[-1], 30000, 100)
    assert consumer_perf_test(cluster, topic, "--messages", 30000) == 0
    assert data_line(capsys)["data.consumed.in.nMsg"] == "30000"


@pytest.mark.multiprocess
def test_producer_perf_throttled_with_payloads_from_a_file(cluster, capsys, tmp_path):
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha|beta|gamma")
    assert producer_perf_test(cluster, "from-file", "--num-records", 300, "--payload-file",
                              payloads, "--payload-delimiter", "|", "--throughput", 3000,
                              "--producer-props", "acks=all", "--print-metrics") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"Reading payloads from: {payloads}", "Number of messages read: 3"]
    summary = next(line for line in out if SUMMARY.fullmatch(line))
    assert SUMMARY.fullmatch(summary).group(1) == "300"
    assert re.fullmatch(r"producer-metrics:record-send-total:\{client-id=perf-producer-client\}"
                        r" +: 300", next(line for line in out if "record-send-total" in line))
    assert run_tool(console_consumer, "--bootstrap-server", cluster.bootstrap_servers,
                    "--topic", "from-file", "--from-beginning", "--max-messages", 300,
                    "--timeout-ms", 5000) == 0
    assert set(capsys.readouterr().out.split()) == {"alpha", "beta", "gamma"}


@pytest.mark.multiprocess
def test_producer_perf_monotonic_payloads(cluster, capsys, tmp_path):
    # Kafka's way to name the cluster: bootstrap.servers among the client properties
    assert run_tool(producer_perf, "--topic", "counted", "--num-records", 50,
                    "--payload-monotonic", "--throughput", -1, "--bulk", "--producer-props",
                    f"bootstrap_servers={cluster.bootstrap_servers}") == 0
    capsys.readouterr()
    config = tmp_path / "consumer.properties"
    config.write_text(f"bootstrap.servers={cluster.bootstrap_servers}\nmax.poll.records=7\n")
    assert run_tool(console_consumer, "--consumer.config", config, "--topic", "counted",
                    "--from-beginning", "--max-messages", 50, "--timeout-ms", 5000) == 0
    assert capsys.readouterr().out.split() == [str(i) for i in range(50)]


@pytest.mark.multiprocess
def test_producer_perf_counts_failed_records_apart(cluster, capsys):
    assert producer_perf_test(cluster, "too-big", "--num-records", 20, "--record-size", 3000,
                              "--throughput", -1, "--producer-props",
                              "max.request.size=2000") == 1
    out, err = capsys.readouterr()
    assert SUMMARY.fullmatch(out.splitlines()[-1]).group(1) == "0"
    assert err.startswith("20 records failed; the first error: RecordTooLargeError: [Error 10] ")


@pytest.mark.multiprocess
def test_producer_perf_argument_errors(cluster, capsys):
    assert producer_perf_test(cluster, "x", "--num-records", 0, "--record-size", 10,
                              "--throughput", -1) == 1
    assert "--num-records should be greater than zero, found 0" in capsys.readouterr().err
    assert producer_perf_test(cluster, "x", "--num-records", 10, "--record-size", 10,
                              "--throughput", 0) == 1
    assert "use -1 for no limit" in capsys.readouterr().err
    assert producer_perf_test(cluster, "x", "--num-records", 10, "--record-size", 10,
                              "--throughput", -1, "--producer-props", "batch.size=big") == 1
    assert "'big'" in capsys.readouterr().err


# -- consumer-perf-test ------------------------------------------------------------------------

def consumer_perf_test(cluster, topic, *argv):
    return run_tool(consumer_perf, "--bootstrap-server", cluster.bootstrap_servers,
                    "--topic", topic, "--timeout", 5000, *argv)


def data_line(capsys):
    header, data = capsys.readouterr().out.splitlines()[-2:]
    assert header == consumer_perf.HEADER
    return dict(zip(header.split(", "), data.split(", ")))


@pytest.mark.multiprocess
@pytest.mark.parametrize("bulk", [(), ("--bulk",)])
def test_consumer_perf_prints_kafkas_line(cluster, capsys, bulk):
    topic = f"consumed-{len(bulk)}"
    assert producer_perf_test(cluster, topic, "--num-records", 20000, "--record-size", 100,
                              "--throughput", -1) == 0
    capsys.readouterr()
    assert consumer_perf_test(cluster, topic, "--messages", 15000, *bulk) == 0
    fields = data_line(capsys)
    assert fields["data.consumed.in.nMsg"] == "15000"
    assert fields["data.consumed.in.MB"] == f"{15000 * 100 / 2**20:.4f}"
    assert float(fields["nMsg.sec"]) > 0 and fields["rebalance.time.ms"] == "0"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}", fields["start.time"])
    assert fields["fetch.nMsg.sec"] == fields["nMsg.sec"]


@pytest.mark.multiprocess
def test_consumer_perf_stops_at_the_timeout(cluster, capsys):
    assert producer_perf_test(cluster, "short", "--num-records", 500, "--record-size", 10,
                              "--throughput", -1) == 0
    capsys.readouterr()
    assert consumer_perf_test(cluster, "short", "--messages", 1000, "--timeout", 300,
                              "--hide-header", "--print-metrics") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("WARNING: Exiting before consuming the expected number of "
                             "messages: timeout (300 ms) exceeded.")
    assert out[1].split(", ")[4] == "500"
    assert any(line.startswith("Metric Name") for line in out)


@pytest.mark.multiprocess
def test_consumer_perf_include_pattern_and_errors(cluster, capsys):
    assert producer_perf_test(cluster, "pattern-a", "--num-records", 100, "--record-size", 10,
                              "--throughput", -1) == 0
    assert producer_perf_test(cluster, "pattern-b", "--num-records", 100, "--record-size", 10,
                              "--throughput", -1) == 0
    capsys.readouterr()
    assert run_tool(consumer_perf, "--bootstrap-server", cluster.bootstrap_servers,
                    "--include", "pattern-.", "--messages", 200, "--timeout", 5000) == 0
    assert data_line(capsys)["data.consumed.in.nMsg"] == "200"
    assert consumer_perf_test(cluster, "pattern-a", "--messages", 10, "--group", "g") == 0
    assert data_line(capsys)["data.consumed.in.nMsg"] == "10"  # through a group
    assert run_tool(consumer_perf, "--bootstrap-server", cluster.bootstrap_servers,
                    "--messages", 10) == 1
    assert "Exactly one of --topic or --include is required" in capsys.readouterr().err


@pytest.mark.multiprocess
def test_consumer_perf_detailed_stats(cluster, capsys):
    assert producer_perf_test(cluster, "detailed", "--num-records", 3000, "--record-size", 10,
                              "--throughput", 6000) == 0
    capsys.readouterr()
    assert consumer_perf_test(cluster, "detailed", "--messages", 3000, "--show-detailed-stats",
                              "--reporting-interval", 1) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == consumer_perf.DETAILED_HEADER
    counts = [int(line.split(", ")[4]) for line in out[1:]]
    assert counts and counts == sorted(counts) and counts[-1] <= 3000


# -- e2e-latency -------------------------------------------------------------------------------

@pytest.mark.multiprocess
@pytest.mark.parametrize("pace", [(), ("--throughput", 2000)])
def test_e2e_latency_prints_percentiles(cluster, capsys, pace):
    topic = f"e2e-{len(pace)}"
    assert run_tool(e2e_latency, "--bootstrap-server", cluster.bootstrap_servers, "--topic",
                    topic, "--num-records", 400, "--record-size", 64, "--acks", "1",
                    *pace) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f'Topic "{topic}" does not exist. Will create topic with 1 '
                      f'partition(s) and replication factor = 1')
    assert re.fullmatch(r"400 records sent in [\d.]+ s \([\d.]+ records/sec\); 400 received "
                        r"in another process, 0 lost, 0 duplicated", out[1])
    avg = float(re.fullmatch(r"Avg latency: ([\d.]+) ms", out[2]).group(1))
    p50, p99, p999 = map(float, re.fullmatch(
        r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)", out[3]).groups())
    assert 0 < p50 <= p99 <= p999 and avg > 0


@pytest.mark.multiprocess
def test_e2e_latency_argument_errors(cluster, capsys):
    common = ("--bootstrap-server", cluster.bootstrap_servers, "--topic", "e2e-x",
              "--num-records", 10)
    assert run_tool(e2e_latency, *common, "--record-size", 64, "--acks", "0") == 1
    assert "Please use 1 or all, found --acks 0" in capsys.readouterr().err
    assert run_tool(e2e_latency, *common, "--record-size", 8, "--acks", "all") == 1
    assert "--record-size must be at least 24" in capsys.readouterr().err


@pytest.mark.multiprocess
def test_e2e_latency_reports_failed_and_lost_records(cluster, capsys):
    assert run_tool(e2e_latency, "--bootstrap-server", cluster.bootstrap_servers, "--topic",
                    "e2e-big", "--num-records", 5, "--record-size", 2000, "--acks", "all",
                    "--throughput", 1000, "--timeout-ms", 300, "--producer-props",
                    "max.request.size=1500") == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[-1].endswith("0 received in another process, 5 lost, 0 duplicated")
    assert "5 sends failed; the first: RecordTooLargeError: [Error 10] " in err
    assert "5 records never arrived" in err


# -- the pieces ------------------------------------------------------------------------------

class FakeBatch:
    def __init__(self):
        self.done = Future()


def test_stats_measure_each_record_from_send_to_its_batch():
    clock = [0]
    out = io.StringIO()
    stats = Stats(5, 100, clock_ns=lambda: clock[0], out=out)
    first, second = FakeBatch(), FakeBatch()
    for i, (sent_ms, batch) in enumerate([(0, first), (1, first), (2, second), (3, second),
                                          (4, first)]):
        stats.times[i] = sent_ms * 1_000_000
        stats.new_run(i, batch)
    clock[0] = 6_000_000
    first.done.success((0, -1))     # records 0, 1, 4: 6, 5 and 2 ms
    clock[0] = 5_000_000_000        # the first 5-s window
    stats.collect(5)
    assert out.getvalue() == ("3 records sent, 0.6 records/sec (0.00 MB/sec), 4.3 ms avg "
                              "latency, 6.0 ms max latency.\n")
    clock[0] = 13_000_000
    second.done.failure(RuntimeError("broker gone"))
    stats.collect(5)
    assert stats.failed == 2 and str(stats.first_error) == "broker gone"
    clock[0] = 10_000_000_000
    stats.print_total()
    assert out.getvalue().splitlines()[-1] == (
        "3 records sent, 0.300000 records/sec (0.00 MB/sec), 4.33 ms avg latency, 6.00 ms max "
        "latency, 5 ms 50th, 6 ms 95th, 6 ms 99th, 6 ms 99.9th.")


def test_throttle_sleeps_only_when_ahead():
    now = [0.0]
    slept = []
    throttle = Throttle(1000, min_sleep=0.002, clock=lambda: now[0], sleep=slept.append)
    throttle.pace(1)            # 1 ms ahead: below min_sleep
    throttle.pace(5)            # 5 ms ahead
    now[0] = 0.010
    throttle.pace(8)            # behind: no sleep
    assert slept == [pytest.approx(0.005)]
    unthrottled = Throttle(-1, sleep=slept.append)
    unthrottled.pace(10**9)
    assert slept == [pytest.approx(0.005)]
    with pytest.raises(ValueError, match="use -1 for no limit"):
        Throttle(0)


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_only_on_a_terminal():
    now = [0.0]
    terminal = Terminal()
    with Progress(200, "records sent", stream=terminal, clock=lambda: now[0]) as progress:
        progress.update(10)     # not due yet
        now[0] = 1.0
        progress.update(100)
    line = "100/200 records sent (50%), 100/s"
    assert terminal.getvalue() == "\r" + line + "\r" + " " * len(line) + "\r"
    pipe = io.StringIO()
    with Progress(200, "records sent", stream=pipe, clock=lambda: now[0]) as progress:
        now[0] = 5.0
        progress.update(200)
    assert pipe.getvalue() == ""
