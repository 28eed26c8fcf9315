"""Rebalance time: how long a consumer group leaves partitions unconsumed when a member
joins and when a member dies.

Run from the repository root: ``.venv/bin/python -m perf.rebalance_bench [--rounds 10]
[--profile defaults|fast|fastest] [--brokers 3] [--out DIR]``.

A cluster of ``--brokers`` brokers, one topic of 12 partitions (replication factor
min(3, brokers)), a producer process writing one record to every partition every 10 ms.
Each round uses a new group: three member processes (KafkaConsumer with ``group_id``,
spawned; each appends to its own file the generation and partitions of every assignment and
of every poll that returned records) join and consume every partition; then

1. **join**: a fourth member is started; t0 = the moment it subscribes; done = the first
   moment every partition has been read in a later generation than the one at t0;
2. **kill**: once the four consume every partition in one generation, one of the first
   three is sent SIGKILL at t0; done = the first moment every partition has been read in a
   later generation than the one at t0 (its session timeout must pass first).

The members then stop (a stop file, then SIGKILL by pid for any still running). Printed:
median, min and max of both times over the rounds and how many generations each took (1
means one rebalance: no member was dropped by mistake); a JSON document with every round
in ``--out`` (default perf/results).

Profiles (broker ``group.initial.rebalance.delay.ms`` and ``group.min.session.timeout.ms``;
consumer ``session_timeout_ms`` and ``heartbeat_interval_ms``):

- ``defaults``: Kafka's: 3000, 6000; 45000, 3000.
- ``fast``: 0, 6000; 6000, 500 — the shortest session Kafka's brokers accept by default;
  the settings of the multi-process group tests.
- ``fastest``: 0, 1000; 1500, 150 — a member is dropped after 1.5 s without heartbeat.

``group.initial.rebalance.delay.ms`` only delays the first join of an empty group: it is
part of each round's set-up, not of what is measured.
"""
from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

TOPIC = "rebalance"
PARTITIONS = 12
#: Seconds a round may wait for a group to settle or for the partitions to be read again.
ROUND_TIMEOUT = 120.0
PRODUCE_EVERY = 0.01

PROFILES = {
    "defaults": (dict(group_initial_rebalance_delay_ms=3000,
                      group_min_session_timeout_ms=6000),
                 dict(session_timeout_ms=45000, heartbeat_interval_ms=3000)),
    "fast": (dict(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=6000),
             dict(session_timeout_ms=6000, heartbeat_interval_ms=500)),
    "fastest": (dict(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1000),
                dict(session_timeout_ms=1500, heartbeat_interval_ms=150)),
}


def _now():
    return time.monotonic()


# -- child processes (spawned) -----------------------------------------------------------------

def _producer(data_dir, stop_path):
    from cluster import KafkaProducer
    with KafkaProducer(bootstrap_servers=data_dir, linger_ms=0) as producer:
        while not os.path.exists(stop_path):
            for partition in range(PARTITIONS):
                producer.send(TOPIC, b"tick", partition=partition)
            time.sleep(PRODUCE_EVERY)


def _member(data_dir, group, name, base, consumer_config):
    """Writes ``join t``, ``owns t G p...`` and ``read t G p...`` lines to ``base``.log
    until ``base``.stop exists."""
    from cluster import ConsumerRebalanceListener, KafkaConsumer
    with open(base + ".log", "a", buffering=1) as log:
        consumer = KafkaConsumer(bootstrap_servers=data_dir, group_id=group, client_id=name,
                                 auto_offset_reset="latest", enable_auto_commit=False,
                                 max_poll_interval_ms=ROUND_TIMEOUT * 1000,
                                 retry_backoff_ms=20, **consumer_config)

        class Recorder(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                pass

            def on_partitions_assigned(self, assigned):
                parts = " ".join(str(tp.partition) for tp in consumer.assignment())
                log.write(f"owns {_now()} {consumer.group_metadata().generation_id} "
                          f"{parts}\n")
        try:
            log.write(f"join {_now()}\n")
            consumer.subscribe([TOPIC], listener=Recorder())
            while not os.path.exists(base + ".stop"):
                polled = consumer.poll(timeout_ms=20)
                if polled:
                    parts = " ".join(str(tp.partition) for tp in polled)
                    log.write(f"read {_now()} {consumer.group_metadata().generation_id} "
                              f"{parts}\n")
        finally:
            consumer.close(autocommit=False)


# -- the bench's side ----------------------------------------------------------------------------

def _lines(base):
    try:
        with open(base + ".log") as file:
            text = file.read()
    except FileNotFoundError:
        return []
    return [line.split() for line in text.split("\n")[:-1]]  # the last: partial or empty


def _events(bases):
    """[(kind, time, generation, partitions)] of every member's file."""
    found = []
    for base in bases:
        for line in _lines(base):
            if line[0] == "join":
                found.append(("join", float(line[1]), -1, ()))
            elif len(line) >= 3:
                try:
                    found.append((line[0], float(line[1]), int(line[2]),
                                  tuple(int(p) for p in line[3:])))
                except ValueError:
                    raise ValueError(f"{base}.log: bad line {line}") from None
    return found


def _wait(predicate, what):
    deadline = _now() + ROUND_TIMEOUT
    while True:
        value = predicate()
        if value is not None:
            return value
        if _now() > deadline:
            raise TimeoutError(f"{what} did not happen within {ROUND_TIMEOUT} s")
        time.sleep(0.005)


def _stable(bases):
    """The generation in which the members of ``bases`` all own partitions, together all of
    them, and every partition was read; None while there is none."""
    events = _events(bases)
    latest = {}
    for base in bases:
        owns = [e for e in _events([base]) if e[0] == "owns"]
        if not owns:
            return None
        latest[base] = owns[-1][2]
    generations = set(latest.values())
    if len(generations) != 1:
        return None
    generation = generations.pop()
    read = {p for kind, _, g, parts in events if kind == "read" and g == generation
            for p in parts}
    return generation if read == set(range(PARTITIONS)) else None


def _covered_after(bases, generation):
    """The first moment every partition was read in a generation after ``generation``."""
    first = {}
    for kind, at, g, parts in _events(bases):
        if kind == "read" and g > generation:
            for p in parts:
                first[p] = min(first.get(p, at), at)
    return max(first.values()) if len(first) == PARTITIONS else None


def _last_generation(bases):
    return max((g for kind, _, g, _ in _events(bases) if kind == "owns"), default=-1)


def one_round(ctx, data_dir, tmp, number, consumer_config):
    """One join and one kill; {"join_s", "kill_s", "join_generations", "kill_generations"}."""
    group = f"bench-{number}"
    bases = [os.path.join(tmp, f"{group}-m{n}") for n in range(4)]
    processes = []

    def start(base):
        process = ctx.Process(target=_member, args=(data_dir, group, os.path.basename(base),
                                                     base, consumer_config), daemon=True)
        process.start()
        processes.append(process)
        return process

    try:
        for base in bases[:3]:
            start(base)
        before = _wait(lambda: _stable(bases[:3]), "three members consuming")
        start(bases[3])
        joined = _wait(lambda: next((float(line[1]) for line in _lines(bases[3])
                                     if line[0] == "join"), None), "the fourth member")
        covered = _wait(lambda: _covered_after(bases, before), "consumption after the join")
        result = {"join_s": covered - joined}
        four = _wait(lambda: _stable(bases), "four members consuming")
        result["join_generations"] = four - before
        victim = processes[1]
        t0 = _now()
        os.kill(victim.pid, signal.SIGKILL)
        victim.join()
        alive = [b for b in bases if b != bases[1]]
        covered = _wait(lambda: _covered_after(alive, four), "consumption after the kill")
        result["kill_s"] = covered - t0
        after = _wait(lambda: _stable(alive), "three members consuming again")
        result["kill_generations"] = after - four
        return result
    finally:
        for base in bases:
            open(base + ".stop", "w").close()
        for process in processes:
            process.join(ROUND_TIMEOUT)
            if process.is_alive():
                os.kill(process.pid, signal.SIGKILL)
                process.join()


def _summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="fast")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--out", default=os.path.join("perf", "results"))
    args = parser.parse_args(argv)
    from cluster import Cluster, KafkaAdminClient, NewTopic
    broker_config, consumer_config = PROFILES[args.profile]
    ctx = multiprocessing.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="rebalance-bench-")
    rounds = []
    with Cluster(os.path.join(tmp, "data"), brokers=args.brokers,
                 offsets_topic_num_partitions=3, **broker_config) as cluster:
        with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, min(3, args.brokers))])
        stop = os.path.join(tmp, "producer.stop")
        producer = ctx.Process(target=_producer, args=(cluster.bootstrap_servers, stop),
                               daemon=True)
        producer.start()
        try:
            for number in range(args.rounds):
                rounds.append(one_round(ctx, cluster.bootstrap_servers, tmp, number,
                                        consumer_config))
                print(f"round {number}: {rounds[-1]}", file=sys.stderr, flush=True)
        finally:
            open(stop, "w").close()
            producer.join(ROUND_TIMEOUT)
            if producer.is_alive():
                os.kill(producer.pid, signal.SIGKILL)
                producer.join()
    shutil.rmtree(tmp)
    report = {"profile": args.profile, "broker": broker_config, "consumer": consumer_config,
              "brokers": args.brokers, "partitions": PARTITIONS, "rounds": rounds,
              "join_s": _summary([r["join_s"] for r in rounds]),
              "kill_s": _summary([r["kill_s"] for r in rounds])}
    for name in ("join_s", "kill_s"):
        s = report[name]
        print(f"{args.profile}: {name[:-2]} -> every partition consumed again: median "
              f"{s['median']:.3f} s, min {s['min']:.3f} s, max {s['max']:.3f} s over "
              f"{len(rounds)} rounds")
    print(f"generations per join: {[r['join_generations'] for r in rounds]}; per kill: "
          f"{[r['kill_generations'] for r in rounds]}")
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = os.path.join(args.out, f"rebalance-{args.profile}-{stamp}.json")
    with open(path, "w") as file:
        json.dump(report, file, indent=2)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
