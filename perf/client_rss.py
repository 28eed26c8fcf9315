"""Resident memory of ringlog's processes, by hand: each role in a fresh interpreter.

::

    .venv/bin/python -m perf.client_rss [--records 10000] [--size 100] [--partitions 1000]

Prints, in MB, the RSS (and its anonymous / file / shared-memory parts, from
``/proc/<pid>/status``) of:

* a bare interpreter;
* one after ``import cluster``, and after ``from cluster import KafkaProducer,
  KafkaConsumer``;
* a producer process after ``--records`` ``send()`` calls (and a flush);
* a consumer process after polling them all back (``poll()``, a ConsumerRecord each);
* the broker, once it holds a topic of ``--partitions`` partitions besides the one above.

Each child is ``python -c`` of a few lines that import nothing but ``cluster`` (it reads
/proc itself), so the figures are what an application pays; the parent, the timer, starts
the cluster (one broker) and reads the broker's figures from /proc/<pid>/status. RssShmem
counts the ring pages a process touched (both ends of a ring map the same pages).

Owner: the main thread; it starts one 1-broker cluster in a temporary directory and stops it
(and every child) whatever happens.
"""
from __future__ import annotations

import argparse
import ast
import json
import shutil
import subprocess
import sys
import tempfile

TOPIC = "rss"
WIDE_TOPIC = "wide"
FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")
#: Seconds a child may take.
CHILD_TIMEOUT = 120


def rss_of(pid="self"):
    """{field: MB} of FIELDS from /proc/<pid>/status."""
    figures = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in FIELDS:
                figures[name] = int(value.split()[0]) / 1024
    return figures


# -- children: each runs as ``python -c`` (nothing imported but what it measures) and prints
# the repr of its RSS figures as its last line -----------------------------------------------

_PRELUDE = f"""
import sys
def rss():
    figures = {{}}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in {FIELDS!r}:
                figures[name] = int(value.split()[0]) / 1024
    print(repr(figures), flush=True)
data_dir, records, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
"""

CHILDREN = {
    "bare": "rss()",
    "import cluster": "import cluster\nrss()",
    "import KafkaProducer, KafkaConsumer": (
        "from cluster import KafkaConsumer, KafkaProducer\nrss()"),
    "producer": f"""
from cluster import KafkaProducer
value = b"x" * size
with KafkaProducer(bootstrap_servers=data_dir, linger_ms=5, acks=1) as producer:
    for _ in range(records):
        producer.send({TOPIC!r}, value)
    producer.flush()
    rss()
""",
    "consumer": f"""
from cluster import KafkaConsumer, TopicPartition
consumer = KafkaConsumer(bootstrap_servers=data_dir, auto_offset_reset="earliest",
                         enable_auto_commit=False)
consumer.assign([TopicPartition({TOPIC!r}, 0)])
count = 0
while count < records:
    count += sum(len(batch) for batch in consumer.poll(100).values())
rss()
consumer.close()
""",
}


# -- the parent ---------------------------------------------------------------------------------

def _run_child(name, args, data_dir=""):
    out = subprocess.run(
        [sys.executable, "-c", _PRELUDE + CHILDREN[name], data_dir, str(args.records),
         str(args.size)],
        capture_output=True, text=True, timeout=CHILD_TIMEOUT, check=False)
    if out.returncode:
        raise RuntimeError(f"{name} failed ({out.returncode}): {out.stderr[-2000:]}")
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


def _line(name, figures):
    parts = "  ".join(f"{field} {figures.get(field, 0):6.1f}" for field in FIELDS[1:])
    print(f"{name:40s} {figures['VmRSS']:7.1f} MB   ({parts})", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m perf.client_rss", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)

    results = {}
    for name in ("bare", "import cluster", "import KafkaProducer, KafkaConsumer"):
        results[name] = _run_child(name, args)
        _line(name, results[name])

    from cluster import Cluster, KafkaAdminClient, NewTopic
    workdir = tempfile.mkdtemp(prefix="ringlog-rss-")
    cluster = Cluster(workdir, brokers=1, auto_create_topics_enable=False)
    try:
        cluster.start()
        with KafkaAdminClient(bootstrap_servers=workdir) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 1)])
        for name in ("producer", "consumer"):
            results[f"{name} ({args.records:,} records)"] = figures = _run_child(
                name, args, workdir)
            _line(f"{name} ({args.records:,} records)", figures)
        with KafkaAdminClient(bootstrap_servers=workdir) as admin:
            admin.create_topics([NewTopic(WIDE_TOPIC, args.partitions, 1)])
        [pid] = cluster.pids().values()
        name = f"broker ({args.partitions + 1:,} partitions)"
        results[name] = rss_of(pid)
        _line(name, results[name])
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
