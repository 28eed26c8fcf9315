"""``ringlog chaos``: run a workload against a cluster while injecting faults, then check
that nothing acknowledged was lost (the Jepsen idea, built in).

::

    ringlog chaos --data-dir D --brokers 3 --scenario leader-kill-storm --duration 60s
                  --seed 7 [--topic T --partitions P --replication-factor 3
                  --min-insync-replicas 2 --producers K --consumers K --out DIR --kills N
                  --enable-idempotence]
    ringlog chaos --data-dir D --scenario leader-kill-storm --workload transactional-copy
                  --records N [--copier-kills N --zombies N ...]

1. The cluster: if one runs in D (a broker holds its lock, or the supervisor of
   ``cluster.json`` is alive) it is used as it is, and must have a watching supervisor
   (``ringlog cluster start``) to restart the brokers the faults stop; the tool then
   stops nothing it did not start and deletes nothing. Otherwise it starts one in D
   (``Cluster``, ``replica.lag.time.max.ms``=2000) and stops it at the end; D stays.
2. It creates the topic (refusing one that exists) and waits until every partition leads.
3. Producer and consumer processes (``workload``) and the leadership monitor run for the
   duration while the fault injector plays the scenario's seeded schedule (``schedule``,
   ``faults``); faults are printed as they happen.
4. Then the faults stop (paused brokers continue, dead ones start), the producers stop,
   the cluster settles (every partition led with a full ISR, bounded), the consumers stop
   and a final consumer drains every partition to its high watermark.
5. The replicas are compared below the HW (``replicas``), the history checked
   (``checker``; with ``--enable-idempotence`` the producers are idempotent and a
   duplicate is an anomaly), and the output folder gets ``history.json`` and ``timeline.png``
   (``report``); the summary is printed. Exit status 0 without anomalies, 1 with any, 2
   when the tool itself could not run (its reason on stderr), 130 when Ctrl-C or SIGTERM
   interrupted it (no verdict: it says so, stops what it started, as below, in seconds,
   and leaves the history written so far in the output folder).

``--workload transactional-copy`` is Kafka's transactions_test:
idempotent producers write ``--records`` records to ``<topic>-input``; one transactional
copier per partition copies them to ``<topic>-output`` (read_committed consumer, offsets
sent to the transaction), while besides the scenario's broker faults (the scenarios that
keep output = input checkable: not divergence or unclean elections) copiers are SIGKILLed
and restarted with their transactional id (``--copier-kills``) and zombie copiers are
started beside live ones (``--zombies``). ``--consumers`` then counts read_committed
readers of the output. Step 5 also checks output = input exactly once, no aborted read
and every zombie fenced (``copy_checker``); steps 3-4 are ``transactional_copy``'s.

``--workload consumer-group``: ``--consumers`` members of one consumer group consume the
topic (subscribe, commit after each poll) while members are SIGKILLed and started again
(``--member-kills``); step 5 also checks that every record below the group's final
committed offsets was read by a member (``group_consume``).

Every process it starts is stopped at the end, on Ctrl-C or SIGTERM too (at any moment,
a fault under way included: a broker it paused continues, one it killed is started again
on a running cluster, and a cluster it started is stopped), and any shared-memory object
a client process it had to kill left behind is unlinked. Ctrl-C reaches the tool alone,
not its client processes (``workload.start_client``). The run
itself: ``run.Chaos`` (or ``transactional_copy.CopyChaos``), in the main thread; the
injector and the monitor run in threads of their own.
"""
from __future__ import annotations

from cluster.errors import KafkaError
from cluster.supervisor.supervisor import ClusterStartError
from cluster.tools.chaos.group_consume import WORKLOAD as GROUP, GroupChaos
from cluster.tools.chaos.run import ANOMALIES, Chaos
from cluster.tools.chaos.schedule import SCENARIOS
from cluster.tools.chaos.transactional_copy import WORKLOAD, CopyChaos
from cluster.tools.support import (
    ToolError,
    duration,
    fail,
    setup_logging,
    stop_on_sigterm,
)

__all__ = ["ANOMALIES", "INTERRUPTED", "TOOL_FAILED", "add_arguments", "duration", "run"]

#: Exit status of a run that could not run (``ANOMALIES``: one that found anomalies).
TOOL_FAILED = 2
#: Exit status of a run that Ctrl-C or SIGTERM interrupted (128 + SIGINT, as a shell's).
INTERRUPTED = 130
#: The default workload's name.
PRODUCE_CONSUME = "produce-consume"


def add_arguments(parser):
    parser.add_argument("--data-dir", required=True, metavar="D",
                        help="the cluster's data directory (a running cluster there is used)")
    parser.add_argument("--brokers", type=int, default=3,
                        help="brokers of the cluster to start (default 3; a running "
                             "cluster keeps its own)")
    parser.add_argument("--scenario", required=True, choices=sorted(SCENARIOS), metavar="NAME",
                        help="; ".join(f"{k}: {v}" for k, v in SCENARIOS.items()))
    parser.add_argument("--duration", type=duration, default=60.0,
                        help="how long the workload and the faults run (default 60s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the fault schedule (same seed, same schedule)")
    parser.add_argument("--topic", default="chaos", help="topic to create (default chaos)")
    parser.add_argument("--partitions", type=int, default=3, help="the topic's (default 3)")
    parser.add_argument("--replication-factor", type=int, default=3,
                        help="the topic's (default 3)")
    parser.add_argument("--min-insync-replicas", type=int, default=2,
                        help="the topic's min.insync.replicas (default 2)")
    parser.add_argument("--producers", type=int, default=2,
                        help="producer processes (default 2)")
    parser.add_argument("--consumers", type=int, default=2,
                        help="consumer processes besides the final drain (default 2)")
    parser.add_argument("--kills", type=int, default=None,
                        help="faults to inject (default: one per 10 s of duration)")
    parser.add_argument("--unkeyed", action="store_true",
                        help="send without keys (default: keys k0..k15)")
    parser.add_argument("--enable-idempotence", action="store_true",
                        help="idempotent producers (enable.idempotence=true, up to 5 requests "
                             "in flight): a record written twice is an anomaly (default: "
                             "at-least-once producers, one request in flight, duplicates "
                             "reported)")
    parser.add_argument("--workload", choices=(PRODUCE_CONSUME, WORKLOAD, GROUP),
                        default=PRODUCE_CONSUME,
                        help=f"{PRODUCE_CONSUME} (default): producers and consumers of "
                             f"--topic; {WORKLOAD}: transactional copiers copy "
                             f"<topic>-input to <topic>-output, checked exactly once; "
                             f"{GROUP}: --consumers members of one consumer group, "
                             f"killed and restarted, checked at least once")
    parser.add_argument("--records", type=int, default=10_000,
                        help=f"{WORKLOAD}: records of the input (default 10000)")
    parser.add_argument("--copier-kills", type=int, default=None,
                        help=f"{WORKLOAD}: copier SIGKILLs (default: one per 10 s of "
                             f"duration)")
    parser.add_argument("--zombies", type=int, default=1,
                        help=f"{WORKLOAD}: zombie copiers (default 1)")
    parser.add_argument("--subscribe", action="store_true",
                        help=f"{WORKLOAD}: the copiers subscribe to the input as members "
                             f"of one consumer group (KIP-447: a rebalance moves partitions "
                             f"between them) instead of each being assigned its partition")
    parser.add_argument("--member-kills", type=int, default=None,
                        help=f"{GROUP}: group member SIGKILLs (default: one per 10 s of "
                             f"duration)")
    parser.add_argument("--record-bytes", type=int, default=0,
                        help="pad each produced value to this many bytes (e.g. 3000000: "
                             "records larger than a ring frame; the topic's "
                             "max.message.bytes is raised to fit; default 0: short values)")
    parser.add_argument("--settle", type=duration, default=30.0,
                        help="longest wait for the cluster to settle after the faults "
                             "(default 30s)")
    parser.add_argument("--out", default=None,
                        help="output folder (default chaos-<scenario>-seed<seed>); must "
                             "not hold files")


def run(args):
    setup_logging()
    try:
        with stop_on_sigterm():
            kind = {WORKLOAD: CopyChaos, GROUP: GroupChaos}.get(args.workload, Chaos)
            return kind(args).run()
    except KeyboardInterrupt:  # the run said so and stopped what it started
        return INTERRUPTED
    except (ToolError, ValueError, OSError, KafkaError, ClusterStartError) as exc:
        fail(exc, "chaos: ")
        return TOOL_FAILED


