"""``ringlog chaos --workload consumer-group``: producers write the topic while
``--consumers`` members of one consumer group (``workload.member``: subscribe, read,
commit synchronously after each poll) consume it, and besides the scenario's broker
faults members are SIGKILLed and started again (``--member-kills``; ``copiers.Copiers``
runs them, ``kind`` "member"), so the group rebalances under load.

After the faults: the brokers healed, every killed member started again, the producers
stopped, the cluster settled, the members are given until ``--settle`` to commit the
topic's end offsets, then stopped; the final drain reads every partition. The history is
checked as the produce-consume workload's (nothing acknowledged lost, one value per
offset, ...) and by ``check`` below: Kafka's at-least-once group consumption.

Owner: the command's main thread (a ``run.Chaos``); the fault threads as there.
"""
from __future__ import annotations

import os

import numpy as np

from cluster.tools.chaos import checker, history, workload
from cluster.tools.chaos.copiers import Copiers
from cluster.tools.chaos.run import CLIENT_START, Chaos
from cluster.tools.chaos.schedule import build_copier_schedule
from cluster.tools.support import ToolError

WORKLOAD = "consumer-group"
#: Seconds the members have to stop (a rebalance may be under way).
MEMBER_STOP = 30.0


class GroupChaos(Chaos):
    """A run of the consumer-group workload (module doc)."""

    def __init__(self, args):
        super().__init__(args)
        self.group = f"{args.topic}-group"
        self.members = None
        self.member_kills = (args.member_kills if args.member_kills is not None
                             else max(1, int(args.duration // 10)))

    def _check_args(self):
        super()._check_args()
        if self.args.consumers < 1 or self.member_kills < 0:
            raise ToolError(f"--workload {WORKLOAD} needs --consumers >= 1 (the group's "
                            f"members) and --member-kills >= 0, found "
                            f"{self.args.consumers}, {self.member_kills}")

    def replay_arguments(self):
        return [*super().replay_arguments(), "--workload", WORKLOAD,
                "--member-kills", str(self.member_kills)]

    def _run_workload(self):
        a = self.args
        injector = self._open_faults(a.topic)
        self.members = Copiers(a.consumers, self._member_spec, self.fault_log,
                               on_event=self._print_event, target=workload.member,
                               kind="member")
        for n in range(a.producers):
            self._spawn("producer", workload.produce, n, history.PRODUCER_FILES)
        for member in range(a.consumers):
            self.members.start(member)
        self._wait(self._producers_started, CLIENT_START)
        schedule = build_copier_schedule(a.seed, a.duration, self.member_kills, 0,
                                         a.consumers, kill="member-kill", aims=(None,))
        self._announce(f"{a.producers} {'idempotent ' if a.enable_idempotence else ''}"
                       f"producers, {a.consumers} members of group {self.group} "
                       f"({len(schedule)} member kills)")
        self._play(injector, (self.members, schedule))
        self.members.heal()
        self._stop_clients("producer")
        settled = self._wait(lambda: self._all_led(full_isr=True), a.settle)
        caught_up, committed = self._committed_to_end(a.topic, self.group, a.settle)
        self._stop_members()
        drained = workload.drain(self.data_dir, a.topic, a.partitions,
                                 os.path.join(self.out, history.DRAIN_FILE), a.settle)
        found = self._history(settled, drained, injector, a.topic, workload=WORKLOAD,
                              group=self.group,
                              member_schedule=[s.to_json() for s in schedule])
        found.group = {"caught_up": caught_up, "committed": committed}
        verdict = checker.check(found, idempotent=a.enable_idempotence)
        anomalies, counts = check(found)
        verdict.anomalies += anomalies
        verdict.counts.update(counts)
        if self.members.error is not None:
            verdict.anomalies.append({"kind": "injector-error",
                                      "error": str(self.members.error)})
        return self._report(found, verdict, injector, settled)

    def _member_spec(self, member, incarnation):
        a = self.args
        return workload.ClientSpec(
            self.data_dir, a.topic, a.partitions, member,
            os.path.join(self.out, f"member-{member}.{incarnation}.jsonl"), group=self.group)

    def _stop_members(self):
        if self.members is not None:
            self.members.stop(MEMBER_STOP)
            self._unlink_client_objects(self.members.killed_pids())

    def _stop_clients(self, kind=None):
        if kind is None:  # stopping everything (the run is over or failed)
            self._stop_members()
        super()._stop_clients(kind)


def check(found):
    """(anomalies, counts) of the group's consumption in ``found`` (a History), pure:

    - ``unconsumed``: records the final drain read below the offset the group committed
      at the end that no member read (at-least-once broken: a member committed past
      what it had read), one anomaly per partition with the count and the first offset;
    - ``group-incomplete``: the group's committed offsets did not reach the partitions'
      end offsets within ``--settle``.
    Counted: the members' reads, commits, incarnations, the drained records they read."""
    drain = checker.reads_of(found.drain_reads)
    seen = (np.zeros(len(drain), bool) if found.members_read is None
            else np.asarray(found.members_read, bool))
    committed = {int(p): o for p, o in found.group.get("committed", {}).items()}
    limit = np.array([committed.get(int(p), 0) for p in drain.partition], np.int64)
    missed = np.flatnonzero(~seen & (drain.offset < limit))
    anomalies = []
    for partition in np.unique(drain.partition[missed]):
        rows = missed[drain.partition[missed] == partition]
        anomalies.append({"kind": "unconsumed", "partition": int(partition),
                          "records": len(rows), "first": int(drain.offset[rows].min()),
                          "committed": committed.get(int(partition))})
    if not found.group.get("caught_up", True):
        anomalies.append({"kind": "group-incomplete", "committed": committed,
                          "reason": "the group did not commit the end offsets in time"})
    incarnations = {(f["c"], f["i"]) for f in found.faults if f["fault"] == "member-start"}
    counts = {"member_commits": len(found.member_commits),
              "member_incarnations": len(incarnations),
              "member_kills": sum(1 for f in found.faults if f["fault"] == "member-kill"),
              "drained_read_by_members": int(np.count_nonzero(seen))}
    return anomalies, counts
