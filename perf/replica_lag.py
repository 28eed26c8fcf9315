"""Follower lag: time from a leader's append to its follower's append, with the follower's
loop woken by the leader's answer (its outbound connection rings its doorbell) against the
same brokers where the answer wakes nobody and the follower sees it at its next loop turn
(``replica_proc.broker.POLL_INTERVAL``, the polling floor).

Run from the repository root: ``.venv/bin/python -m perf.replica_lag [--appends N]``.

Two brokers (processes), one topic of one partition with replication factor 2. The
producer (this process) sends one 100-byte record at a time with acks=1 and waits for the
acknowledgement; then it watches the follower's segment file (``os.stat`` in a loop) until
it has grown by the record's batch. Reported per mode: the median and p90, over
``--appends`` records, of acknowledgement -> follower's file grown (the follower's lag
after the leader's append, less the acknowledgement's own way back, which the same figure
"send -> acknowledgement" shows), in µs.

The "poll floor" mode starts the brokers through this module (``--broker``), which makes
the fetchers connect without a waker: the leader's answers post the connection's own
semaphore, which nobody waits on, so the follower finds them when its loop next wakes for
something else or after its poll interval. Everything else is the same code.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

BOUND = 30.0


def _broker_without_wakeup(argv):
    """A broker whose replica fetchers' connections wake nobody (the polling floor)."""
    from replica_proc import __main__ as broker_main, replica_fetcher
    from shm_ring import connect

    def connect_without_waker(cluster_id, broker_id, timeout, capacity, policy, waker):
        return connect(cluster_id, broker_id, timeout=1.0, capacity=capacity, policy=policy)
    init = replica_fetcher.ReplicaFetcherManager.__init__
    init.__kwdefaults__ = None
    init.__defaults__ = tuple(connect_without_waker if d is connect else d
                              for d in init.__defaults__)
    return broker_main.main(argv)


def _log_size(path):
    return sum(os.stat(os.path.join(path, n)).st_size for n in os.listdir(path)
               if n.endswith(".log"))


def measure(appends, wakeup):
    from cluster import Cluster, KafkaAdminClient, KafkaProducer, NewTopic
    command = None if wakeup else (sys.executable, "-m", "perf.replica_lag", "--broker")
    data_dir = tempfile.mkdtemp(prefix="replica-lag-")
    kwargs = {} if command is None else {"broker_command": command}
    cluster = Cluster(data_dir, brokers=2, **kwargs).start()
    try:
        with KafkaAdminClient(bootstrap_servers=data_dir) as admin:
            admin.create_topics([NewTopic("lag", 1, 2)])
        image = cluster.wait_for_metadata(
            lambda i: "lag" in i.topics and i.topics["lag"].partitions[0].leader >= 0)
        state = image.topics["lag"].partitions[0]
        follower = next(r for r in state.replicas if r != state.leader)
        path = os.path.join(data_dir, f"broker-{follower}", "lag-0")
        leader_path = os.path.join(data_dir, f"broker-{state.leader}", "lag-0")
        acks, lags = [], []
        with KafkaProducer(bootstrap_servers=data_dir, acks=1, linger_ms=0,
                           max_block_ms=BOUND * 1000) as producer:
            producer.send("lag", b"warm-up").get(BOUND)
            while _log_size(path) != _log_size(leader_path):
                time.sleep(0.01)
            for n in range(appends):
                size = _log_size(path)
                sent = time.perf_counter()
                producer.send("lag", b"%08d" % n + b"." * 92).get(BOUND)
                acked = time.perf_counter()
                deadline = acked + BOUND
                while _log_size(path) == size:
                    if time.perf_counter() > deadline:
                        raise TimeoutError(f"the follower did not append record {n}")
                grown = time.perf_counter()
                acks.append(acked - sent)
                lags.append(grown - acked)
                time.sleep(0.002)  # let both loops park again, as between sparse appends
        return acks, lags
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def _us(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--broker"]:
        return _broker_without_wakeup(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=300)
    args = parser.parse_args(argv)
    for name, wakeup in (("wake-up", True), ("poll floor", False)):
        acks, lags = measure(args.appends, wakeup)
        print(f"{name:>10}: ack -> follower append median {statistics.median(lags) * 1e6:8.0f}"
              f" µs, p90 {_us(lags, 0.9):8.0f} µs; send -> ack median "
              f"{statistics.median(acks) * 1e6:6.0f} µs ({len(lags)} appends)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
