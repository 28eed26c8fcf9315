"""The Kafka wire gateway: many concurrent connections, and produce throughput through it.

Starts a cluster (``--brokers``, default 1) and its gateway (``ringlog gateway --kafka-port
0``) in a temporary directory, then:

1. **connections**: opens ``--connections`` TCP connections (default 1,000) to the
   gateway's listeners, each answered one ApiVersions request (so each holds its own ring
   connection to its broker), keeps them all open, then sends one Metadata request on every
   connection at once and reads all the answers: how many were answered, the time for the
   round, the gateway's RSS and threads with all connections open;
2. **produce**: kafka-python's ``KafkaProducer`` (acks=1, 100-byte values) through the
   gateway against ringlog's own ``KafkaProducer`` on the rings, same run, records/s each:
   the gateway's own cost (``--records``, default 100,000). With confluent-kafka installed
   it is measured too.

3. **cpu** (``--cpu-only``: this alone): confluent-kafka produces ``--records`` records
   (acks=1, 100-byte values, linger.ms 5, batch.size 16 KB: the bench suite's
   ``kafka_wire`` settings) through the gateway, then one consumer reads them
   back: CPU microseconds per record of the gateway process, of the brokers (psutil
   ``cpu_times`` deltas) and of the client (this process: ``time.process_time``, the same
   client for every server: what a loaded machine distorts least, for A/B runs of two
   checkouts by ``PYTHONPATH``), and each side's records/s; ``--peers tansu,noida_db``
   runs the same round against those Kafka-compatible brokers (``perf/suite/peers``), each
   alone once ringlog is stopped: their broker process's CPU per record.

4. **calls** (``--calls``: this alone): the gateway run inside this process, a profile hook
   on its threads (``threading.setprofile``), confluent-kafka producing ``--records``
   records as in 3: Python calls per Produce request in the gateway's threads (a count a
   loaded machine does not change).

5. **per request** (``--per-request``: this alone): confluent-kafka produces ``--records``
   records as in 3 (then one consumer reads them back) through a gateway process, with
   ``perf stat`` attached to the gateway process (all its threads): CPU microseconds
   (task clock, exact where psutil counts 10 ms ticks) and context switches per Produce
   (then Fetch) request; then the same round with ``strace -c -f`` attached: system calls
   per request, by call. Requests are counted by the gateway's stats page. Figures a
   loaded machine changes little, for A/B runs of two checkouts by ``PYTHONPATH``.

Medians of ``--repeats`` rounds; figures are printed (and ``--json`` writes them).

    .venv/bin/python -m perf.gateway_bench [--connections 1000] [--records 100000]
                                           [--cpu-only [--peers tansu,noida_db]]
                                           [--calls] [--per-request]
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import psutil

from cluster.protocol import frames
from cluster.protocol.frames import ApiKey
from cluster.supervisor.cluster import Cluster

VALUE = b"x" * 100


def _start_gateway(data_dir):
    argv = [sys.executable, "-m", "cluster.tools.gateway_cmd", "--data-dir", data_dir,
            "--kafka-port", "0"]
    popen = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = os.path.join(data_dir, "gateway.json")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with open(path) as file:
                record = json.load(file)
            if record.get("pid") == popen.pid and record.get("state") == "serving":
                return popen, record
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        time.sleep(0.05)
    popen.kill()
    raise RuntimeError("the gateway did not start")


def _read_frame(sock):
    prefix = b""
    while len(prefix) < 4:
        chunk = sock.recv(4 - len(prefix))
        if not chunk:
            raise ConnectionError("closed")
        prefix += chunk
    (size,) = struct.unpack(">i", prefix)
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return prefix + body


def _cpu(pids):
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def connections_round(record, count, broker_pids):
    """Open ``count`` connections, ApiVersions on each, then one Metadata on all at once."""
    ports = list(record["ports"].values())
    versions = frames.encode_request(frames.request_class(ApiKey.API_VERSIONS, 2)(), 1, "b")
    m = frames.request_module(ApiKey.METADATA, 8)
    metadata = frames.encode_request(m.MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False), 2, "b")
    socks = []
    started = time.perf_counter()
    try:
        for i in range(count):
            sock = socket.create_connection(("127.0.0.1", ports[i % len(ports)]), timeout=60)
            sock.sendall(versions)
            socks.append(sock)
        for sock in socks:
            _read_frame(sock)
        opened = time.perf_counter() - started
        gateway = psutil.Process(record["pid"])
        rss, threads = gateway.memory_info().rss, gateway.num_threads()
        started = time.perf_counter()
        cpu_gateway, cpu_brokers = _cpu([record["pid"]]), _cpu(broker_pids)
        for sock in socks:
            sock.sendall(metadata)
        answered = sum(1 for sock in socks if _read_frame(sock))
        round_s = time.perf_counter() - started
        cpu_gateway = _cpu([record["pid"]]) - cpu_gateway
        cpu_brokers = _cpu(broker_pids) - cpu_brokers
    finally:
        for sock in socks:
            sock.close()
    return {"connections": count, "answered": answered, "open_s": opened,
            "metadata_round_s": round_s, "round_cpu_s_gateway": cpu_gateway,
            "round_cpu_s_brokers": cpu_brokers, "gateway_rss_mb": rss / 2**20,
            "gateway_threads": threads}


def kafka_python_rate(bootstrap, records, topic):
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                             batch_size=65536)
    started = time.perf_counter()
    for _ in range(records):
        producer.send(topic, VALUE)
    producer.flush()
    elapsed = time.perf_counter() - started
    producer.close()
    return records / elapsed


def confluent_rate(bootstrap, records, topic, **config):
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                         **config})
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return records / (time.perf_counter() - started)


def cpu_round(bootstrap, gateway, broker_pids, records, topic):
    """Produce then consume ``records`` at ``bootstrap`` with confluent-kafka: CPU
    microseconds per record in the ``gateway`` pids, the ``broker_pids`` and this process
    (the client: its Python loop and librdkafka's threads, the same for every server),
    per side, and the rates."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    figures = {}
    cpu = (_cpu(gateway), _cpu(broker_pids), time.process_time())
    rate = confluent_rate(bootstrap, records, topic, **{"batch.size": 16384})
    after = (_cpu(gateway), _cpu(broker_pids), time.process_time())
    figures["produce"] = {"records_per_s": rate,
                          "gateway_us_per_record": (after[0] - cpu[0]) / records * 1e6,
                          "brokers_us_per_record": (after[1] - cpu[1]) / records * 1e6,
                          "client_us_per_record": (after[2] - cpu[2]) / records * 1e6}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        cpu = after
        started = time.perf_counter()
        count = 0
        deadline = time.monotonic() + 300
        while count < records and time.monotonic() < deadline:
            count += sum(1 for m in consumer.consume(10_000, timeout=0.1) if m.error() is None)
        elapsed = time.perf_counter() - started
        after = (_cpu(gateway), _cpu(broker_pids), time.process_time())
    finally:
        consumer.close()
    figures["consume"] = {"records_per_s": count / elapsed,
                          "gateway_us_per_record": (after[0] - cpu[0]) / records * 1e6,
                          "brokers_us_per_record": (after[1] - cpu[1]) / records * 1e6,
                          "client_us_per_record": (after[2] - cpu[2]) / records * 1e6}
    return figures


def _medians(rounds):
    return {side: {key: statistics.median(r[side][key] for r in rounds)
                   for key in rounds[0][side]} for side in ("produce", "consume")}


def peer_cpu(name, records, repeats, workdir):
    """``cpu_round`` against a Kafka-compatible broker of the bench suite (``tansu``,
    ``noida_db``: ``perf/suite/peers``), its topic of one partition: the broker's CPU
    counts as "brokers"."""
    module = importlib.import_module(f"perf.suite.peers.{name}")
    why = module.missing(None)
    if why:
        return {"skipped": why}
    broker = module.deploy(workdir, 1, 1, None)
    try:
        endpoint = broker.endpoint
        return _medians([cpu_round(endpoint["bootstrap"], [], broker.server_pids(), records,
                                   endpoint["topic"]) for _ in range(repeats)])
    finally:
        broker.stop()


def calls_round(records):
    """Python calls per Produce request in an in-process gateway's threads (module doc)."""
    import threading

    from cluster.gateway.config import GatewayConfig
    from cluster.gateway.server import Gateway
    main = threading.get_ident()
    calls = [0]

    def count(frame, event, arg):
        if event in ("call", "c_call") and threading.get_ident() != main:
            calls[0] += 1
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp, \
            Cluster(os.path.join(tmp, "data"), brokers=1, num_partitions=1,
                    default_replication_factor=1) as cluster:
        threading.setprofile(count)  # the bridge threads started from now on
        gateway = Gateway(cluster.data_dir, 0, GatewayConfig.from_overrides({}))
        try:
            gateway.start()
            confluent_rate(gateway.bootstrap(), 1000, "calls", **{"batch.size": 16384})
            requests = gateway.stats.value("request-total:Produce")
            calls[0] = 0
            confluent_rate(gateway.bootstrap(), records, "calls", **{"batch.size": 16384})
            requests = gateway.stats.value("request-total:Produce") - requests
            measured = calls[0]
        finally:
            threading.setprofile(None)
            gateway.stop()
    return {"produce_requests": requests, "records_per_request": records / requests,
            "gateway_calls_per_request": measured / requests}


def _gateway_counters(namespace, pid):
    """The gateway's stats page counters, once a publication after now is in (the page is
    written every second)."""
    from cluster.stats.reader import read_all
    time.sleep(1.2)
    for snapshot in read_all(namespace):
        if snapshot.role == "gateway" and snapshot.pid == pid:
            return snapshot.counters
    raise RuntimeError(f"no stats page of the gateway (pid {pid})")


def _attach(tool, pid, out):
    """``perf stat`` or ``strace -c -f`` attached to every thread of ``pid``, writing
    ``out``; stopped by SIGINT (``_detach``)."""
    if tool == "perf":
        argv = ["perf", "stat", "-x", ",", "-e", "task-clock,context-switches", "-o", out,
                "-p", str(pid)]
    else:
        argv = ["strace", "-c", "-f", "-o", out, "-p", str(pid)]
    popen = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # attached to every thread
    return popen


def _detach(popen):
    popen.send_signal(2)
    popen.wait(30)


def _perf_figures(path):
    """``{"task_ms", "context_switches"}`` from ``perf stat -x ,``'s output."""
    figures = {}
    with open(path) as file:
        for line in file:
            fields = line.strip().split(",")
            if len(fields) > 2 and fields[2] == "task-clock":
                figures["task_ms"] = float(fields[0])
            elif len(fields) > 2 and fields[2] == "context-switches":
                figures["context_switches"] = float(fields[0])
    return figures


def _strace_figures(path):
    """``{call: count}`` from ``strace -c``'s table."""
    calls = {}
    with open(path) as file:
        for line in file:
            fields = line.split()
            if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
                calls[fields[-1]] = int(fields[3])
    return calls


def per_request_round(bootstrap, namespace, pid, records, topic, tool, workdir):
    """Produce then consume ``records`` at ``bootstrap`` with ``tool`` ("perf" or "strace")
    attached to the gateway ``pid``: the tool's figures per Produce and per Fetch request."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    results = {}
    out = os.path.join(workdir, f"{tool}-{topic}.txt")
    for side in ("produce", "consume"):
        api = "Produce" if side == "produce" else "Fetch"
        before = _gateway_counters(namespace, pid).get(f"request-total:{api}", 0)
        popen = _attach(tool, pid, out)
        try:
            if side == "produce":
                confluent_rate(bootstrap, records, topic, **{"batch.size": 16384})
            else:
                consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                                     "enable.auto.commit": False})
                try:
                    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
                    count, deadline = 0, time.monotonic() + 300
                    while count < records and time.monotonic() < deadline:
                        count += sum(1 for m in consumer.consume(10_000, timeout=0.1)
                                     if m.error() is None)
                finally:
                    consumer.close()
        finally:
            _detach(popen)
        requests = _gateway_counters(namespace, pid).get(f"request-total:{api}", 0) - before
        if tool == "perf":
            figures = _perf_figures(out)
            results[side] = {"requests": requests,
                             "records_per_request": records / requests,
                             "gateway_cpu_us_per_request":
                                 figures["task_ms"] * 1000 / requests,
                             "context_switches_per_request":
                                 figures["context_switches"] / requests}
        else:
            calls = _strace_figures(out)
            top = sorted(calls.items(), key=lambda item: -item[1])[:8]
            results[side] = {"requests": requests,
                             "syscalls_per_request": sum(calls.values()) / requests,
                             **{f"{name}_per_request": count / requests
                                for name, count in top}}
    return results


def native_rate(data_dir, records, topic):
    from cluster.producer.kafka_producer import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=data_dir, acks=1, linger_ms=5,
                             batch_size=65536, max_block_ms=60_000)
    started = time.perf_counter()
    for _ in range(records):
        producer.send(topic, VALUE)
    producer.flush()
    elapsed = time.perf_counter() - started
    producer.close()
    return records / elapsed


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m perf.gateway_bench")
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--cpu-only", action="store_true",
                        help="only the CPU per record round (confluent-kafka)")
    parser.add_argument("--peers", default="",
                        help="with --cpu-only: the same round against these bench peers "
                             "too (tansu,noida_db), each alone after ringlog")
    parser.add_argument("--calls", action="store_true",
                        help="only the Python calls per Produce request in the gateway")
    parser.add_argument("--per-request", action="store_true",
                        help="only the gateway's CPU, context switches and system calls "
                             "per Produce and Fetch request (perf stat, strace)")
    args = parser.parse_args(argv)
    results = {}
    if args.calls:
        rounds = [calls_round(args.records) for _ in range(args.repeats)]
        results["calls"] = {key: statistics.median(r[key] for r in rounds)
                            for key in rounds[0]}
        print(json.dumps(results["calls"]), flush=True)
        return _write(args.json, results)
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:
        data_dir = os.path.join(tmp, "data")
        with Cluster(data_dir, brokers=args.brokers, num_partitions=1,
                     default_replication_factor=args.brokers) as cluster:
            popen, record = _start_gateway(cluster.data_dir)
            try:
                if args.per_request:
                    confluent_rate(record["bootstrap"], 1000, "warm", **{"batch.size": 16384})
                    rounds = {tool: [per_request_round(record["bootstrap"], cluster.namespace,
                                                       popen.pid, args.records,
                                                       f"{tool}-{repeat}", tool, tmp)
                                     for repeat in range(args.repeats)]
                              for tool in ("perf", "strace")}
                    results["per_request"] = {
                        tool: {side: {key: statistics.median(r[side].get(key, 0)
                                                             for r in tool_rounds)
                                      for key in tool_rounds[0][side]}
                               for side in ("produce", "consume")}
                        for tool, tool_rounds in rounds.items()}
                    print(json.dumps(results["per_request"], indent=1), flush=True)
                    return _write(args.json, results)
                if args.cpu_only:
                    results["cpu"] = {"ringlog_gateway": _medians([
                        cpu_round(record["bootstrap"], [record["pid"]],
                                  list(cluster.pids().values()), args.records,
                                  f"cpu-{repeat}") for repeat in range(args.repeats)])}
                    popen.terminate()
                    popen.wait(30)
                    cluster.stop()  # the peers run alone
                    for name in filter(None, args.peers.split(",")):
                        results["cpu"][name] = peer_cpu(name, args.records, args.repeats,
                                                        tmp)
                    print(json.dumps(results["cpu"]), flush=True)
                    return _write(args.json, results)
                results["connections"] = connections_round(record, args.connections,
                                                             list(cluster.pids().values()))
                print(json.dumps(results["connections"]), flush=True)
                time.sleep(5)  # the broker reaps the closed ring connections
                rates = {"native": [], "kafka-python via gateway": []}
                try:
                    import confluent_kafka  # noqa: F401
                    rates["confluent-kafka via gateway"] = []
                except ImportError:
                    pass
                for repeat in range(args.repeats):
                    rates["native"].append(native_rate(cluster.data_dir, args.records,
                                                       f"native-{repeat}"))
                    rates["kafka-python via gateway"].append(
                        kafka_python_rate(record["bootstrap"], args.records, f"kp-{repeat}"))
                    if "confluent-kafka via gateway" in rates:
                        rates["confluent-kafka via gateway"].append(
                            confluent_rate(record["bootstrap"], args.records, f"ck-{repeat}"))
                results["records_per_s"] = {k: statistics.median(v) for k, v in rates.items()}
                for name, rate in results["records_per_s"].items():
                    print(f"{name}: {rate:,.0f} records/s (median of {args.repeats}; "
                          f"x{rate / results['records_per_s']['native']:.2f} of native)",
                          flush=True)
            finally:
                popen.terminate()
                popen.wait(30)
    return _write(args.json, results)


def _write(path, results):
    if path:
        with open(path, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
