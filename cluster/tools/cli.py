"""The ``ringlog`` command line: one subcommand per Kafka tool, with Kafka's flags.

Each subcommand lives in the module that owns its subject and exposes
``add_arguments(parser)`` and ``run(args) -> exit code``; this module only routes to it,
so adding a tool is one line in ``COMMANDS``. A shared-memory name of the cluster that
another user created first (``shm_ring.SquattedNameError``) ends any tool with that one
line and exit code 1, not a traceback; Ctrl-C (KeyboardInterrupt) ends any tool with exit
code 130, not a traceback, from the start (the tools' imports) on.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from shm_ring.naming import SquattedNameError

#: subcommand -> (module, one-line help). Kafka's tool in brackets.
COMMANDS = {
    "cluster": ("cluster.tools.cluster_cmd", "start, stop or report the broker processes of a data "
                                             "directory [kafka-server-start / -stop]"),
    "broker": ("cluster.tools.broker_cmd", "start, stop or kill one broker of a running cluster "
                                           "[kafka-server-start / -stop, per broker]"),
    "gateway": ("cluster.tools.gateway_cmd", "serve a running cluster to any Kafka client on "
                                             "loopback TCP [a Kafka listener]"),
    "topics": ("cluster.tools.topics", "create, list, describe, alter and delete topics "
                                       "[kafka-topics]"),
    "leader-election": ("cluster.tools.leader_election", "move leadership back to preferred "
                                                         "replicas, or elect leaders of "
                                                         "offline partitions "
                                                         "[kafka-leader-election]"),
    "consumer-groups": ("cluster.tools.consumer_groups", "list, describe and delete consumer "
                                                         "groups; reset or delete their "
                                                         "offsets [kafka-consumer-groups]"),
    "transactions": ("cluster.tools.transactions", "list and describe transactions and the "
                                                   "active producers of a partition "
                                                   "[kafka-transactions]"),
    "get-offsets": ("cluster.tools.get_offsets", "print the offsets of topic partitions at a time, "
                                                 "the earliest or the latest [kafka-get-offsets]"),
    "configs": ("cluster.tools.configs", "describe and alter topic and broker configs, applied "
                                         "without a restart [kafka-configs]"),
    "console-producer": ("cluster.tools.console_producer", "send lines of standard input as "
                                                           "records [kafka-console-producer]"),
    "ship": ("cluster.tools.ship.command", "tail log files into a topic, at least once, "
                                           "across crashes and rotation [Filebeat, "
                                           "Fluent Bit, Vector]"),
    "console-consumer": ("cluster.tools.console_consumer", "print records to standard output "
                                                           "[kafka-console-consumer]"),
    "producer-perf-test": ("cluster.tools.producer_perf", "producer throughput and latency "
                                                          "[kafka-producer-perf-test]"),
    "consumer-perf-test": ("cluster.tools.consumer_perf", "consumer throughput "
                                                          "[kafka-consumer-perf-test]"),
    "e2e-latency": ("cluster.tools.e2e_latency", "latency from send() to a consumer in another "
                                                 "process [EndToEndLatency]"),
    "spark-bridge": ("spark_bridge.command", "feed a topic into a sink through a "
                                                       "local Spark streaming query, exactly "
                                                       "once [Spark's Kafka source]"),
    "chaos": ("cluster.tools.chaos.command", "run producers and consumers while injecting "
                                             "broker faults, then check that nothing "
                                             "acknowledged was lost [Jepsen, replication_test]"),
    "top": ("cluster.tools.observe.top", "every process of a cluster and its clients, live: "
                                         "memory, CPU, GC, records/s, lag [top]"),
    "metrics": ("cluster.tools.observe.metrics", "the stats pages as a Prometheus scrape "
                                                 "target, named after Kafka's JMX metrics "
                                                 "[JMX exporter]"),
    "profile": ("cluster.tools.observe.profile", "sample every process for a while or while "
                                                 "a command runs; write JSON, PNG timelines "
                                                 "and a summary"),
    "dump-log": ("cluster.tools.dump_log", "print the batches, records and index entries of "
                                           "segment files [kafka-dump-log]"),
}


def build_parser():
    parser = argparse.ArgumentParser(
        prog="ringlog", description="ringlog: a Kafka-style event log on one host.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(module_name)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)  # imports every tool: Ctrl-C may come
    except KeyboardInterrupt:
        return 130
    try:
        return args._run(args)
    except KeyboardInterrupt:
        return 130
    except SquattedNameError as exc:
        print(f"ringlog {args.command}: {exc}", file=sys.stderr, flush=True)
        return 1
    except BrokenPipeError:  # `ringlog dump-log ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
