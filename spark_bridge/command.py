"""``ringlog spark-bridge``: feed a topic's committed records into a sink through a
local-mode Spark streaming query, exactly once (``spark_bridge.bridge``).

::

    ringlog spark-bridge --bootstrap-server D --topic T --sink parquet:DIR --checkpoint DIR
        [--trigger 1s | --available-now] [--transform module:function]
        [--starting-offsets earliest|latest|JSON] [--max-offsets-per-trigger N]
        [--fail-on-data-loss true|false] [--isolation-level read_uncommitted|read_committed]
        [--master local[2]] [--conf KEY=VALUE ...]

``--sink`` is ``parquet:DIR``, ``json:DIR``, ``csv:DIR`` or ``console:``
(``spark_bridge.sinks``); ``--transform`` names a DataFrame -> DataFrame function
(``spark_bridge.transform``). ``--starting-offsets``, ``--max-offsets-per-trigger``,
``--fail-on-data-loss`` and ``--isolation-level`` are the source options
``startingOffsets``, ``maxOffsetsPerTrigger``, ``failOnDataLoss`` and
``kafka.isolation.level`` of Spark's Kafka source, with its defaults (a new query starts at
the latest offsets; a restarted one where its checkpoint says; read_uncommitted). With
``--isolation-level read_committed`` the sink gets the records of committed transactions
only, each once, never those of aborted ones: micro-batches end at the last stable offset.
``--trigger`` is the micro-batch interval (``500ms``, ``1s``, ``2.5s``, ``1m``); without it
a batch starts as soon as the previous one ends. ``--master`` and ``--conf`` are
spark-submit's.

Bad ``--sink``, ``--transform``, ``--trigger`` or source flag values fail before Spark
starts (exit 1, the message naming the value). The bridge prints a line per micro-batch and
a summary when it stops: on SIGTERM or Ctrl-C (exit 0; then one more line: the last
committed batch, the offsets it ended at, and the command that resumes) or, with
``--available-now``, once the records committed at start are in the sink. Started again with
the same ``--checkpoint``, it goes on where the last run's last committed batch ended,
whatever way that run ended.
"""
from __future__ import annotations

import os
import re
import shlex
import signal

from cluster.config import parse_overrides
from cluster.tools.support import ToolError, add_bootstrap_argument, fail, setup_logging
from spark_bridge.bridge import Bridge, BridgeConfig
from spark_bridge.options import ISOLATION_LEVEL, ISOLATION_LEVELS
from spark_bridge.sinks import parse_sink
from spark_bridge.transform import load_transform

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)\Z")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
#: ``--master`` when not given.
DEFAULT_MASTER = "local[2]"


def add_arguments(parser):
    add_bootstrap_argument(parser)
    parser.add_argument("--topic", required=True, help="the topic to read")
    parser.add_argument("--sink", required=True, metavar="KIND:PATH",
                        help="parquet:DIR, json:DIR, csv:DIR or console:")
    parser.add_argument("--checkpoint", required=True, metavar="DIR",
                        help="Spark's checkpoint directory: where the query's progress lives")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--trigger", metavar="INTERVAL",
                      help="start a micro-batch every INTERVAL (500ms, 1s, 1m); default: as "
                           "soon as the previous one ends")
    when.add_argument("--available-now", action="store_true",
                      help="process what is committed now, in one or more batches, then stop")
    parser.add_argument("--transform", metavar="MODULE:FUNCTION",
                        help="a function DataFrame -> DataFrame applied before the sink")
    parser.add_argument("--starting-offsets", metavar="OFFSETS",
                        help="source option startingOffsets: earliest, latest (default) or "
                             "JSON like {\"t\":{\"0\":23}}; used by a new checkpoint only")
    parser.add_argument("--max-offsets-per-trigger", metavar="N",
                        help="source option maxOffsetsPerTrigger: records per micro-batch")
    parser.add_argument("--fail-on-data-loss", metavar="BOOL",
                        help="source option failOnDataLoss: true (default) or false")
    parser.add_argument("--isolation-level", metavar="LEVEL",
                        help="source option kafka.isolation.level: read_uncommitted "
                             "(default) or read_committed (records of committed "
                             "transactions only)")
    parser.add_argument("--master", default=DEFAULT_MASTER,
                        help="Spark master (default local[2])")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting, as spark-submit's --conf (repeatable)")


def run(args):
    setup_logging()
    try:
        config = bridge_config(args)
    except (ToolError, ValueError) as exc:  # SinkSpecError, TransformError are ValueErrors
        return fail(exc)
    bridge = Bridge(config)
    with _stop_on_signals(bridge):
        return bridge.run()


def bridge_config(args):
    """The BridgeConfig for parsed ``args``; ToolError or ValueError (SinkSpecError,
    TransformError) naming the bad value. Loads the transform, so a bad one fails here."""
    if not args.bootstrap_server:
        raise ToolError("--bootstrap-server must be specified (the cluster's data directory)")
    source_options = {}
    for name, value in (("startingOffsets", args.starting_offsets),
                        ("maxOffsetsPerTrigger", args.max_offsets_per_trigger),
                        ("failOnDataLoss", args.fail_on_data_loss),
                        (ISOLATION_LEVEL, args.isolation_level)):
        if value is not None:
            source_options[name] = value
    if args.fail_on_data_loss is not None and args.fail_on_data_loss.lower() not in (
            "true", "false"):
        raise ToolError(f"--fail-on-data-loss must be true or false, found "
                        f"{args.fail_on_data_loss!r}")
    if args.isolation_level is not None and args.isolation_level not in ISOLATION_LEVELS:
        raise ToolError(f"--isolation-level must be {' or '.join(ISOLATION_LEVELS)}, found "
                        f"{args.isolation_level!r}")
    return BridgeConfig(
        bootstrap_servers=args.bootstrap_server,
        topic=args.topic,
        sink=parse_sink(args.sink),
        checkpoint=os.path.abspath(args.checkpoint),
        trigger_ms=None if args.trigger is None else parse_interval(args.trigger),
        available_now=args.available_now,
        source_options=source_options,
        transform=None if args.transform is None else load_transform(args.transform),
        transform_spec=args.transform,
        master=args.master,
        spark_conf=parse_overrides(args.conf),
        resume_command=resume_command(args),
    )


def resume_command(args):
    """The command line that runs the bridge of ``args`` again, on the same checkpoint (its
    path made absolute): printed when the bridge stops, so it says what to run next."""
    argv = ["ringlog", "spark-bridge", "--bootstrap-server", args.bootstrap_server,
            "--topic", args.topic, "--sink", args.sink,
            "--checkpoint", os.path.abspath(args.checkpoint)]
    for flag, value in (("--trigger", args.trigger), ("--transform", args.transform),
                        ("--starting-offsets", args.starting_offsets),
                        ("--max-offsets-per-trigger", args.max_offsets_per_trigger),
                        ("--fail-on-data-loss", args.fail_on_data_loss),
                        ("--isolation-level", args.isolation_level),
                        ("--master", None if args.master == DEFAULT_MASTER else args.master)):
        if value is not None:
            argv += [flag, value]
    if args.available_now:
        argv.append("--available-now")
    for setting in args.conf:
        argv += ["--conf", setting]
    return shlex.join(argv)


def parse_interval(text):
    """``"500ms"``, ``"1s"``, ``"2.5s"``, ``"1m"``, ``"1h"`` -> milliseconds; ToolError
    naming ``text`` otherwise."""
    match = _DURATION.match(text.strip().lower())
    if match is None:
        raise ToolError(f"--trigger {text!r} must be a number and a unit: ms, s, m or h "
                        f"(e.g. 500ms, 1s)")
    return round(float(match.group(1)) * _UNIT_MS[match.group(2)])


class _stop_on_signals:
    """While inside, SIGTERM and SIGINT ask ``bridge`` to stop (its ``run`` returns after
    stopping the query and Spark), instead of raising in the middle of a call into Spark.
    A signal while Spark starts is acted on once it has started."""

    def __init__(self, bridge):
        self.bridge = bridge
        self.previous = {}

    def __enter__(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame):
        self.bridge.request_stop()

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

