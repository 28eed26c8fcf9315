"""The producer-perf-test figures of the goals' first row: ``ringlog producer-perf-test``
against a fresh one-broker cluster, beside confluent-kafka's ``produce()`` call rate with no
broker to deliver to.

* ringlog: ``python -m cluster.tools.cli producer-perf-test --num-records N --record-size
  100 --throughput -1 --producer-props acks=1`` on a topic of one partition (the tool's
  own summary line: records/s from its first send to the last acknowledgement);
* confluent-kafka: a ``confluent_kafka.Producer`` whose bootstrap server is a port nothing
  listens on, its local queue large enough for every record (``queue.buffering.max.*``),
  ``produce()`` called N times with 100-byte values: the calls/s, what librdkafka's Python
  API costs per record before any delivery (the records are purged, never sent). Run as
  ``python -m perf.suite.producer_perf confluent N`` in its own process, so librdkafka's
  threads and its connection retries stay out of the suite's process.

``measure(workdir, records, timeout)`` -> ``{"ringlog": {...}, "confluent_kafka": {...}}``,
each ``{"rps", "records"}`` or ``{"error"}``. Called by the suite's main thread.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from perf.suite import payloads
from perf.suite.peers import ringlog

#: Value bytes of the goal's row.
SIZE = 100
#: A local TCP port nothing listens on (the discard service's, unused on a host like this).
NO_BROKER = "127.0.0.1:9"
_SUMMARY = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def measure(workdir, records, timeout):
    """Both figures (module doc); a failure of one is its ``{"error"}``."""
    return {"ringlog": _guarded(_ringlog, workdir, records, timeout),
            "confluent_kafka": _guarded(_confluent, records, timeout)}


def _guarded(function, *args):
    try:
        return function(*args)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _ringlog(workdir, records, timeout):
    deployment = ringlog.deploy(workdir, 1, 1, {})
    try:
        endpoint = deployment.endpoint
        output = _run(["-m", "cluster.tools.cli", "producer-perf-test",
                       "--bootstrap-server", endpoint["bootstrap"], "--topic",
                       endpoint["topic"], "--num-records", str(records), "--record-size",
                       str(SIZE), "--throughput", "-1", "--producer-props", "acks=1"],
                      timeout)
    finally:
        deployment.stop()
    found = _SUMMARY.findall(output)
    if not found:
        raise RuntimeError(f"no summary line in producer-perf-test's output: {output[-300:]!r}")
    sent, rate = found[-1]
    return {"rps": float(rate), "records": int(sent), "summary": output.strip().splitlines()[-1]}


def _confluent(records, timeout):
    output = _run(["-m", __name__, "confluent", str(records)], timeout)
    return json.loads(output.strip().splitlines()[-1])


def _run(arguments, timeout):
    done = subprocess.run([sys.executable, *arguments], cwd=_ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode:
        raise RuntimeError(f"exit code {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout


def confluent_calls(records):
    """``produce()`` calls/s of a confluent-kafka Producer with no reachable broker."""
    try:
        from confluent_kafka import Producer
    except ImportError as exc:
        raise RuntimeError(f"confluent-kafka is not installed ({exc}): pip install "
                           f"confluent-kafka") from None
    producer = Producer({"bootstrap.servers": NO_BROKER, "acks": 1, "linger.ms": 5,
                         "queue.buffering.max.messages": max(records, 100_000) * 2,
                         "queue.buffering.max.kbytes": 2**31 - 1, "log_level": 0})
    pool = payloads.pool(SIZE)
    n = len(pool)
    produce = producer.produce
    start = time.perf_counter()
    for i in range(records):
        produce("bench", pool[i % n])
    elapsed = time.perf_counter() - start
    producer.purge()
    producer.flush(0)
    return {"rps": records / elapsed, "records": records}


if __name__ == "__main__":
    if sys.argv[1:2] != ["confluent"] or len(sys.argv) != 3:
        sys.exit("usage: python -m perf.suite.producer_perf confluent RECORDS")
    print(json.dumps(confluent_calls(int(sys.argv[2]))))
