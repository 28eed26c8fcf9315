"""What ``ringlog profile`` writes from its samples, and the demo's per-process table."""
from __future__ import annotations

import json

from cluster.tools.observe import report, rows
from cluster.tools.observe.sampler import Sample, Sampler
from tests.support.snapshots import generation, latency, snapshot

MIB = 1 << 20


def run_of_two_processes():
    """Three reads: a broker growing from 50 to 80 MiB and collecting, a producer sending;
    the second read catches the producer before it republished."""
    samples = []
    for n, t in enumerate((100.0, 101.0, 102.0)):
        broker = snapshot(pid=1, updated=t, rss=(50 + 15 * n) * MIB,
                          gc=(generation(10 * n, [0.001] * (10 * n)), generation(n),
                              generation(0)),
                          counters={"records-in-total": 1000.0 * n,
                                    "ring-occupancy-bytes": 512.0 * n},
                          histograms={"request-latency-ms:Produce": latency([2.0] * (5 * n))})
        producer = snapshot(role="producer", name="producer-1", pid=2,
                            updated=100.0 if n < 2 else 102.0, rss=30 * MIB,
                            gc=(generation(n, [0.02] if n == 2 else []), generation(0),
                                generation(0)),
                            counters={"record-send-total": 1000.0 * n})
        samples.append(Sample(t, (broker, producer)))
    return samples


def test_timelines_count_each_publish_once():
    lines = report.timelines(run_of_two_processes())
    assert [len(line) for line in lines.values()] == [3, 2]


def test_summary_names_peaks_gc_share_longest_pause_and_growth():
    text = report.summary(run_of_two_processes())
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert lines[0] == "2 processes sampled, 3 samples over 2.0 s"
    assert "broker 80.0 MiB (broker broker-0 (1); 1 processes)" in lines
    assert "producer 30.0 MiB (producer producer-1 (2); 1 processes)" in lines
    # the broker paused 20 x 1 ms in 2 s; the producer 20 ms between its two publishes
    assert "broker broker-0 (1) 1.00 % (20.0 ms in 22 collections)" in lines
    assert "producer producer-1 (2) 1.00 % (20.0 ms in 2 collections)" in lines
    assert ("longest GC pause: 20.00 ms, generation 0, producer producer-1 (2) (since the "
            "process started)") in lines
    grew = lines[lines.index("what grew most (RSS, first to last sample):") + 1:]
    assert grew == ["broker broker-0 (1) +30.0 MiB", "producer producer-1 (2) +0.0 MiB",
                    "gauge: ring-occupancy-bytes of broker broker-0 (1) +1,024"]


def test_summary_without_pages():
    assert report.summary([Sample(1.0, ())]) == \
        "no process published a stats page during the run\n"


def test_process_table_has_a_line_per_process():
    table = report.process_table(run_of_two_processes()).splitlines()
    assert table[0].split()[:4] == ["ROLE", "NAME", "PID", "PEAK"]
    broker, producer = table[1].split(), table[2].split()
    assert broker[:5] == ["broker", "broker-0", "1", "80.0", "20/2/0"]
    assert broker[5] == "1.00" and broker[6] == "1.50"
    assert producer[:5] == ["producer", "producer-1", "2", "30.0", "2/0/0"]
    assert producer[5] == "20.00"


def test_json_holds_every_sample_and_field(tmp_path):
    path = report.write_json(tmp_path, run_of_two_processes(), {"command": []})
    found = json.loads(open(path, encoding="utf-8").read())
    assert found["run"] == {"command": []}
    assert [s["t"] for s in found["samples"]] == [100.0, 101.0, 102.0]
    broker = found["samples"][2]["processes"][0]
    assert broker["rss"] == 80 * MIB and broker["gc"][0]["collections"] == 20
    assert broker["histograms"]["request-latency-ms:Produce"]["counts"] == [0, 10, 0, 0, 0]


def test_pngs_are_drawn(tmp_path):
    paths = report.write_pngs(tmp_path, run_of_two_processes())
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == sorted(report.PNGS)
    for path in paths:
        assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_pngs_without_samples(tmp_path):
    for path in report.write_pngs(tmp_path, []):
        assert open(path, "rb").read(4) == b"\x89PNG"


def test_the_sampler_keeps_reads_and_skips_failed_ones():
    reads = iter([[snapshot(pid=1)], OSError("page gone"), [snapshot(pid=2)]])

    def read():
        found = next(reads)
        if isinstance(found, Exception):
            raise found
        return found
    clock = iter([10.0, 11.0, 12.0])
    sampler = Sampler(read, interval=1.0, clock=lambda: next(clock))
    assert sampler.sample_once().processes[0].pid == 1
    assert sampler.sample_once() is None
    assert sampler.sample_once().t == 11.0
    assert [s.processes[0].pid for s in sampler.samples] == [1, 2]
    assert sampler.failed_reads == 1


def test_the_sampler_thread_reads_until_stopped():
    sampler = Sampler(lambda: [snapshot()], interval=0.01)
    with sampler:
        pass
    # at least the first read and the last one stop() makes
    assert len(sampler.samples) >= 2


# -- what the plots show (issue 22) ----------------------------------------------------------

def test_rings_show_occupancy_in_percent_of_capacity_with_the_ring_size():
    line = [(100.0 + n, snapshot(updated=100.0 + n, counters={
        "ring-occupancy-bytes": 1024.0 * 1024 * n, "ring-capacity-bytes": 4.0 * 1024 * 1024,
        "ring-count": 4.0, "ring-occupancy-percent-max": 50.0 * n})) for n in range(3)]
    fullest, together, sizes = report.ring_series(line, 100.0)
    assert fullest == [(0.0, 0.0), (1.0, 50.0), (2.0, 100.0)]
    assert together == [(0.0, 0.0), (1.0, 25.0), (2.0, 50.0)]
    assert sizes == {1024.0 * 1024}
    assert report.ring_series([(100.0, snapshot(counters={}))], 100.0) is None


def test_request_latency_leaves_out_a_consumers_fetch_wait():
    consumer = snapshot(role="consumer", histograms={"fetch-latency-ms": latency([500.0])})
    assert rows.request_latency(consumer) is None  # a long poll waits by design
    producer = snapshot(role="producer", histograms={
        "request-latency-ms:Produce": latency([2.0]), "fetch-latency-ms": latency([500.0])})
    assert rows.request_latency(producer).max == 2.0


def test_a_process_that_produces_and_consumes_shows_as_both():
    both = snapshot(role="consumer", name="copier", pid=7, counters={
        "records-consumed-total": 10.0, "record-send-total": 10.0})
    assert rows.role(both) == "consumer+producer"
    assert rows.row(both).role == "consumer+producer"  # ringlog top's ROLE
    assert report.label(both) == "consumer+producer copier (7)"
    assert rows.role(snapshot(role="producer", counters={"record-send-total": 1.0})) == \
        "producer"
    assert rows.role(snapshot(counters={"records-in-total": 1.0})) == "broker"
    text = report.summary([Sample(1.0, (both,)), Sample(2.0, (both,))])
    assert "consumer+producer" in text.splitlines()[3]  # peak RSS per role
