"""``ringlog ship``: tail log files into a topic, at least once (Filebeat, Fluent Bit's tail
input, Vector's file source, for a ringlog cluster).

::

    ringlog ship --bootstrap-server D --topic T --path GLOB [--path GLOB ...]
        [--checkpoint FILE] [--from beginning|end] [--once] [--parse none|json]
        [--key TEMPLATE] [--service-pattern REGEX]
        [--max-line-bytes N] [--line-overflow split|truncate] [--max-buffer-bytes N]
        [--scan-interval S] [--rotate-wait S] [--checkpoint-interval S]
        [--progress-interval S] [--producer-property K=V ...] [--producer.config FILE]

Each line of the files the globs match is a record (``records``, ``tailer``, ``shipper``
say how). The producer is acks=all and idempotent (``enable.idempotence`` true; they
cannot be turned off here), ``linger.ms`` 50 and ``batch.size`` 131072 unless
``--producer-property`` says otherwise. The checkpoint (default
``ringlog-ship-<topic>.checkpoint`` in the current directory) is read at start: known
files resume at their acknowledged position, others start at ``--from`` (``beginning``, the
default, or ``end`` for the files present at start; files appearing later are always read
from their beginning).

``--once`` reads every file to its end (its last line even without a newline), waits for
the acknowledgements, checkpoints and exits 0. Otherwise the shipper follows the files
until SIGTERM or Ctrl-C, then flushes, checkpoints and prints each file's checkpointed
position (stdout) before exiting 0. A progress line goes to stderr every
``--progress-interval`` seconds (0: never) and at the end; the process publishes a stats
page (role ``shipper``) that ``ringlog top`` shows. Exit 1 with a message for bad
arguments, a damaged checkpoint, or a cluster that cannot be reached at start.
"""
from __future__ import annotations

import os
import signal
import sys
import time

from cluster.client.kafka_client import locate_cluster
from cluster.errors import KafkaError
from cluster.metadata import data_dir as dd
from cluster.producer.kafka_producer import KafkaProducer
from cluster.stats.publisher import StatsRegistration, process_stats, set_process_role
from cluster.tools.ship.checkpoint import CheckpointError, load
from cluster.tools.ship.files import OsFiles
from cluster.tools.ship.lines import OVERFLOWS, SPLIT
from cluster.tools.ship.records import KeyTemplate
from cluster.tools.ship.shipper import Shipper
from cluster.tools.ship.tailer import Tailer
from cluster.tools.support import (
    ToolError,
    add_bootstrap_argument,
    add_producer_arguments,
    client_properties,
    fail,
    has_property,
    setup_logging,
)

#: The producer settings the shipper needs (--producer-property cannot change them).
FIXED = {"acks": "all", "enable.idempotence": "true"}
#: Its defaults for throughput (--producer-property wins).
DEFAULTS = {"linger.ms": "50", "batch.size": "131072", "client.id": "ringlog-ship"}
#: Room a record needs beyond its line in a request (headers, record and batch overhead).
RECORD_ROOM = 4096


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--topic", required=True, help="the topic to ship to")
    parser.add_argument("--path", action="append", required=True, metavar="GLOB",
                        help="files to ship, a glob (repeatable)")
    parser.add_argument("--checkpoint", metavar="FILE",
                        help="the checkpoint file (default ringlog-ship-<topic>.checkpoint)")
    parser.add_argument("--from", dest="start", choices=("beginning", "end"),
                        default="beginning",
                        help="where to start files the checkpoint does not know "
                             "(default beginning)")
    parser.add_argument("--once", action="store_true",
                        help="ship every file to its end, then exit")
    parser.add_argument("--parse", choices=("none", "json"), default="none",
                        help="json: parse each line as a JSON object (bad lines are "
                             "counted and shipped raw)")
    parser.add_argument("--key", default="{file}", metavar="TEMPLATE",
                        help="record key template: {host}, {service}, {file} (default "
                             "{file}; '' for no key)")
    parser.add_argument("--service-pattern", metavar="REGEX",
                        help="a regex with a group (?P<service>...) searched in the path")
    parser.add_argument("--max-line-bytes", type=int, default=512 * 1024, metavar="N",
                        help="longest line (default 524288); longer ones per --line-overflow")
    parser.add_argument("--line-overflow", choices=OVERFLOWS, default=SPLIT,
                        help="split a longer line into pieces (default) or truncate it")
    parser.add_argument("--max-buffer-bytes", type=int, default=16 << 20, metavar="N",
                        help="bytes sent and not yet acknowledged before reading stops "
                             "(default 16 MiB)")
    parser.add_argument("--scan-interval", type=float, default=1.0, metavar="S",
                        help="seconds between two scans of the globs (default 1)")
    parser.add_argument("--rotate-wait", type=float, default=5.0, metavar="S",
                        help="seconds a rotated file stays followed after it stops "
                             "growing (default 5)")
    parser.add_argument("--checkpoint-interval", type=float, default=1.0, metavar="S",
                        help="seconds between two checkpoint writes (default 1)")
    parser.add_argument("--progress-interval", type=float, default=10.0, metavar="S",
                        help="seconds between two progress lines on stderr (0: none)")
    add_producer_arguments(parser)


def run(args):
    setup_logging()
    stopping = []

    def stop(signum, frame):
        stopping.append(signum)
    try:
        shipper, stats = _build(args)
    except (ToolError, CheckpointError, KafkaError, ValueError) as exc:
        return fail(exc, "ringlog ship: ")
    previous = [signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)]
    try:
        shipper.run(lambda: bool(stopping))
    finally:
        for s, handler in zip((signal.SIGTERM, signal.SIGINT), previous):
            signal.signal(s, handler)
        entries = shipper.finish()
        shipper.print_progress()
        shipper.producer.close()
        stats.close()
    for path, entry in entries:
        print(f"checkpointed {path} (log.file.id {entry.id}) at position "
              f"{entry.position}", flush=True)
    return 0


def _build(args):
    if args.max_line_bytes < 1:
        raise ToolError(f"--max-line-bytes must be at least 1, found {args.max_line_bytes}")
    if args.max_buffer_bytes < 1:
        raise ToolError(f"--max-buffer-bytes must be at least 1, found "
                        f"{args.max_buffer_bytes}")
    key_template = KeyTemplate(args.key, args.service_pattern)
    props = client_properties(args.bootstrap_server, args.producer_config,
                              args.producer_property)
    for name, value in DEFAULTS.items():
        if not has_property(props, name):
            props[name] = value
    for name, value in FIXED.items():
        props.pop(name.replace(".", "_"), None)
        props[name] = value
    max_request = int(props.get("max.request.size", props.get("max_request_size", 1 << 20)))
    if args.max_line_bytes + RECORD_ROOM > max_request:
        raise ToolError(f"--max-line-bytes {args.max_line_bytes} does not fit a request of "
                        f"max.request.size {max_request} (lower it, or raise "
                        f"max.request.size)")
    checkpoint_path = args.checkpoint or f"ringlog-ship-{args.topic}.checkpoint"
    restored = load(checkpoint_path)
    name = f"ship-{os.getpid()}"
    set_process_role("shipper", name)
    producer = KafkaProducer(**props)
    data_dir, cluster_id = locate_cluster([props["bootstrap.servers"]])
    # the page of this start of the cluster (its namespace), beside the producer's
    stats = (process_stats(dd.read_shm_namespace(data_dir, cluster_id), "shipper", name)
             if cluster_id else StatsRegistration(None))
    tailer = Tailer(OsFiles(), args.path, time.monotonic, restored=restored,
                    from_end=args.start == "end", once=args.once, rotate_wait=args.rotate_wait,
                    max_line_bytes=args.max_line_bytes, overflow=args.line_overflow)
    shipper = Shipper(producer, args.topic, tailer, key_template,
                      checkpoint_path=checkpoint_path, parse=args.parse,
                      max_buffer_bytes=args.max_buffer_bytes, scan_interval=args.scan_interval,
                      checkpoint_interval=args.checkpoint_interval,
                      progress_interval=args.progress_interval,
                      partition_by_key=not has_property(props, "partitioner"))
    stats.add_source(shipper.stats_source)
    print(f"ringlog ship: {', '.join(args.path)} -> topic {args.topic}; checkpoint "
          f"{checkpoint_path} ({len(restored)} files known)", file=sys.stderr, flush=True)
    return shipper, stats
