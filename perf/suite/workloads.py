"""The ten workloads of the performance suite, their sizes per profile, the cases
they make for each peer, and the figures of a case's runs.

1. ``pair``       1 producer, 1 consumer, 1 channel (ringlog: 1 partition on 1 broker),
                  record by record, run together: producer, consumer, end-to-end records/s.
2. ``three``      3 producers + 3 consumers. ringlog: a 6-partition topic over 3 brokers,
                  every producer spreading over all 6 partitions (default partitioner),
                  consumer n assigned partitions n and n + 3. Peers: 3 channels (streams,
                  pipes, queues), producer n -> channel n -> consumer n.
3. ``bulk``       workload 1 through each peer's bulk path (see the peer modules).
4. ``latency``    1 producer at a fixed rate (1,000 and 10,000 records/s), 1 consumer;
                  p50/p99/p99.9 from send to receive (``latency``).
5. ``partitions`` 1 producer over N partitions of one broker, 1 consumer of all of them
                  (Redis: N streams, the producer's pipelines going to each in turn).
6. ``processes``  N client processes, N/2 producers and N/2 consumers, N/2 channels
                  (ringlog: partitions of one broker), producer n -> channel n -> consumer n;
                  the total record count is split over the producers.
7. ``size``       workload 1 with values of 10 B to 1 MB; counts shrink with the size
                  (a byte budget) so each case takes about as long; the 1 MB case's
                  ``e2e_mb_s`` compares with the machine's ``memcpy_gb_s`` of the same run.
8. ``replicated`` ringlog against itself: workload 1 on a 3-broker cluster with the
                  partition replicated 3 times, acks=all and min.insync.replicas 2, beside
                  the same pair at replication factor 1 and acks=1, in the same run (Kafka's
                  2014 figures for the same comparison: 421,823 against 821,557, 0.51×).
9. ``replicated latency`` workload 4 at 10,000 records/s, the same two settings.
10. ``grouped``   workload 2 with the consumers in a consumer group: ringlog's subscribe with
                  a ``group_id`` (the group's range assignor gives each of the 3 members 2
                  partitions; each starts once it owns its share) and commit their position
                  when their partitions are revoked; beside Redis Streams, whose consumers
                  read by XREADGROUP in every workload.

Peers much slower than ringlog send fewer records, much faster ones more (``SCALE``), so
that each case takes a second or a few: the figures are rates, which compare whatever the
count; the count each case sent is in its parameters.

End-to-end records/s run from the first producer's first send to the last consumer's
last receive; producer records/s from the first send to the last acknowledgement (or last
send, for peers without one); consumer records/s from first to last receive.

Pure data and arithmetic; any thread may call it.
"""
from __future__ import annotations

import dataclasses
import statistics

import numpy as np

from perf.suite import latency
from perf.suite.harness import Task

WORKLOADS = {
    1: "1 producer + 1 consumer, 1 partition, 1 broker, acks=1",
    2: "3 producers + 3 consumers, 6 partitions over 3 brokers",
    3: "bulk send and read API",
    4: "latency at a fixed rate",
    5: "partitions: 1 producer + 1 consumer over N partitions",
    6: "client processes: N/2 producers + N/2 consumers",
    7: "record size",
    8: "replication: RF 3, acks=all, min.insync.replicas 2 beside RF 1, acks=1 (3 brokers)",
    9: "latency with replication at 10,000 records/s (3 brokers)",
    10: "workload 2 through a consumer group (ringlog: subscribe with group_id)",
}
#: Workloads whose cases compare ringlog with itself (replication settings): their rows are
#: labelled by REPLICATION's keys and their ratios are against the first setting.
SELF_COMPARED = (8, 9)
#: The settings of workloads 8 and 9: label -> (replication factor, acks).
REPLICATION = {"RF 1, acks=1": (1, "1"), "RF 3, acks=all": (3, "all")}
#: Workloads whose figures are latencies (the others are throughputs).
LATENCY_WORKLOADS = (4, 9)
#: Which peers run which workload (5 is ringlog's and Redis' only: N streams map to N
#: partitions; the others have no natural N-channel single consumer).
#: ringlog_gateway (a Kafka client through the gateway) and the Kafka-compatible brokers
#: (noida_db, tansu: confluent-kafka over TCP) run workloads 1 and 2 only.
_NATIVE = ("ringlog", "redis_streams", "zmq_pushpull", "mp_queue")
RUNS = {1: "all", 2: "all", 3: _NATIVE, 4: _NATIVE, 5: ("ringlog", "redis_streams"),
        6: _NATIVE, 7: _NATIVE, 8: ("ringlog",), 9: ("ringlog",),
        10: ("ringlog", "redis_streams")}

#: Record-count factors of peers much slower or faster than ringlog: (record by record,
#: bulk), every workload but 4.
SCALE = {"redis_streams": (0.25, 0.05), "mp_queue": (0.5, 2.0), "zmq_pushpull": (3.0, 5.0)}

#: Sizes per profile. ``records``: per producer; ``total``: over all producers (w6);
#: ``budget``: bytes per case (w7) with ``records`` as the cap; ``duration``: s per rate.
PROFILES = {
    "full": {
        1: dict(records=300_000, repeats=5),
        2: dict(records=150_000),
        10: dict(records=150_000),
        3: dict(records=2_000_000),
        4: dict(rates=(1_000, 10_000), duration=4.0, repeats=3),
        5: dict(partitions=(1, 10, 100, 1000, 10_000), records=200_000),
        6: dict(processes=(2, 8, 32, 64), total=300_000),
        7: dict(sizes=(10, 100, 1_000, 10_000, 100_000, 1_000_000), budget=40_000_000,
                records=300_000),
        8: dict(records=300_000, repeats=3),
        9: dict(rate=10_000, duration=4.0, repeats=3),
        "timeout": 180.0,
    },
    "quick": {
        1: dict(records=100_000, repeats=1),
        3: dict(records=300_000),
        4: dict(rates=(1_000, 10_000), duration=1.0),
        7: dict(sizes=(100, 10_000, 1_000_000), budget=10_000_000, records=100_000),
        8: dict(records=100_000, repeats=1),
        9: dict(rate=10_000, duration=1.0),
        "timeout": 60.0,
    },
    "quickest": {
        1: dict(records=3_000, repeats=1),
        2: dict(records=1_000),
        10: dict(records=1_000),
        3: dict(records=5_000),
        4: dict(rates=(1_000,), duration=0.3),
        5: dict(partitions=(1, 4), records=2_000),
        6: dict(processes=(2, 4), total=2_000),
        7: dict(sizes=(10, 1_000), budget=1_000_000, records=2_000),
        8: dict(records=1_000, repeats=1),
        9: dict(rate=1_000, duration=0.3),
        "timeout": 60.0,
    },
}


#: Fewest records of a throughput case (after scaling and the byte budget).
MIN_RECORDS = 100


@dataclasses.dataclass(frozen=True)
class Case:
    """One peer on one point of one workload. ``x``: the point (partitions, processes,
    size, rate, replication label) or None; ``spread``: every producer writes to every
    channel (ringlog's workload 2, everyone's workload 5); ``brokers``, ``replication``
    (the topic's replication factor, min.insync.replicas one less) and ``acks``: for
    ringlog only."""

    workload: int
    peer: str
    x: object
    producers: int
    consumers: int
    channels: int
    brokers: int
    size: int
    records: int
    bulk: bool = False
    rate: float = 0.0
    repeats: int = 1
    spread: bool = False
    replication: int = 1
    acks: str = "1"
    group: bool = False

    @property
    def key(self):
        return f"w{self.workload}/{self.peer}" + ("" if self.x is None else f"/{self.x}")

    def tasks(self, timeout):
        """The harness tasks of one run."""
        everything = tuple(range(self.channels))
        common = dict(size=self.size, bulk=self.bulk, rate=self.rate, timeout=timeout,
                      acks=self.acks, group=self.group)
        producers = [Task("producer", i, everything if self.spread else
                          everything[i::self.producers], self.records, **common)
                     for i in range(self.producers)]
        total = self.records * self.producers
        consumers = [Task("consumer", i, everything[i::self.consumers], total, **common)
                     for i in range(self.consumers)]
        return producers + consumers


def profile(name):
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; expected one of {', '.join(PROFILES)}")
    return PROFILES[name]


def cases(profile_name, peers, selected=None):
    """Every case of ``profile_name`` for ``peers`` (in order), workloads ``selected``
    (default: all the profile has)."""
    sizes = profile(profile_name)
    chosen = [w for w in WORKLOADS if w in sizes and (selected is None or w in selected)]
    out = []
    for workload in chosen:
        allowed = RUNS[workload]
        for peer in peers:
            if allowed == "all" or peer in allowed:
                out.extend(_cases_of(workload, peer, sizes[workload]))
    return out


def _cases_of(workload, peer, p):
    ringlog = peer in ("ringlog", "ringlog_gateway")  # the same cluster, partitions spread
    pair = dict(producers=1, consumers=1, channels=1, brokers=1, size=100)
    scale, bulk_scale = SCALE.get(peer, (1.0, 1.0))
    p = {name: max(MIN_RECORDS, int(value * (bulk_scale if workload == 3 else scale)))
         if name in ("records", "total") else value for name, value in p.items()}
    if workload == 1:
        return [Case(1, peer, None, records=p["records"], repeats=p["repeats"], **pair)]
    if workload in (2, 10):
        return [Case(workload, peer, None, producers=3, consumers=3,
                     channels=6 if ringlog else 3, brokers=3 if ringlog else 1, size=100,
                     records=p["records"], spread=ringlog, group=workload == 10)]
    if workload == 3:
        return [Case(3, peer, None, records=p["records"], bulk=True, **pair)]
    if workload == 4:
        return [Case(4, peer, rate, records=int(rate * p["duration"]),
                     rate=float(rate), repeats=p.get("repeats", 1), **pair)
                for rate in p["rates"]]
    if workload == 5:
        return [Case(5, peer, n, producers=1, consumers=1, channels=n, brokers=1, size=100,
                     records=p["records"], spread=True)
                for n in p["partitions"]]
    if workload == 6:
        return [Case(6, peer, n, producers=n // 2, consumers=n // 2, channels=n // 2,
                     brokers=1, size=100, records=max(1, p["total"] // (n // 2)))
                for n in p["processes"]]
    if workload == 7:
        return [Case(7, peer, size, producers=1, consumers=1, channels=1, brokers=1,
                     size=size, records=max(MIN_RECORDS, min(p["records"], p["budget"] // size)))
                for size in p["sizes"]]
    if workload == 8:
        return [Case(8, peer, label, producers=1, consumers=1, channels=1, brokers=3, size=100,
                     records=p["records"], repeats=p["repeats"], replication=factor, acks=acks)
                for label, (factor, acks) in REPLICATION.items()]
    if workload == 9:
        rate = p["rate"]
        return [Case(9, peer, label, producers=1, consumers=1, channels=1, brokers=3, size=100,
                     records=int(rate * p["duration"]), rate=float(rate),
                     repeats=p.get("repeats", 1), replication=factor, acks=acks)
                for label, (factor, acks) in REPLICATION.items()]
    raise ValueError(f"unknown workload {workload}")


# -- figures ------------------------------------------------------------------------------------

def run_figures(case, run):
    """The figures of one run (a harness.CaseRun) of ``case``."""
    sent = sum(p["records"] for p in run.producers)
    received = sum(c["records"] for c in run.consumers)
    p_first = min(p["first_ns"] for p in run.producers)
    p_last = max(p["last_ns"] for p in run.producers)
    readers = [c for c in run.consumers if c["first_ns"] is not None]
    figures = {"sent": sent, "received": received, "lost": sent - received,
               "producer_rps": _rate(sent, p_last - p_first),
               "server_peak_rss": run.server_peak_rss,
               "producer_peak_rss": max(p["peak_rss"] for p in run.producers),
               "consumer_peak_rss": max(c["peak_rss"] for c in run.consumers),
               "client_peak_rss_mean": statistics.fmean(
                   [c["peak_rss"] for c in run.producers + run.consumers])}
    if readers:
        c_first = min(c["first_ns"] for c in readers)
        c_last = max(c["last_ns"] for c in readers)
        figures["consumer_rps"] = _rate(received, c_last - c_first)
        figures["e2e_rps"] = _rate(received, c_last - p_first)
        figures["e2e_mb_s"] = figures["e2e_rps"] * case.size / 1e6
    if case.rate:
        figures["achieved_rate"] = figures["producer_rps"]
        found = [c["latencies_ns"] for c in run.consumers if "latencies_ns" in c]
        figures["latency"] = latency.summarize(np.concatenate(found) if found else [])
    return figures


def _rate(count, ns):
    return count / (ns / 1e9) if ns > 0 else None


def median_figures(runs):
    """One figure set from several runs: the median of each number, the latency of the
    run with the median p99, each run's end-to-end records/s kept as ``e2e_rps_runs``."""
    if len(runs) == 1:
        merged = dict(runs[0])
    else:
        merged = {}
        for name, value in runs[0].items():
            values = [r.get(name) for r in runs]
            if isinstance(value, (int, float)) and all(isinstance(v, (int, float))
                                                       for v in values):
                merged[name] = statistics.median(values)
            else:
                merged[name] = value
        if "latency" in runs[0]:
            by_p99 = sorted(runs, key=lambda r: r["latency"].get("p99", 0.0))
            merged["latency"] = by_p99[len(by_p99) // 2]["latency"]
    merged["e2e_rps_runs"] = [r.get("e2e_rps") for r in runs]
    merged["repeats"] = len(runs)
    return merged
