"""``ringlog chaos --workload transactional-copy``: as Kafka's
transactions_test and Jepsen run it, under the broker faults of ``--scenario`` and the
copier faults of ``schedule.COPIER_FAULTS``.

1. Two topics, ``<topic>-input`` and ``<topic>-output``, with ``--partitions`` each.
2. Idempotent producers (``workload.produce``) write ``--records`` records to the input,
   spread over the first ``FILL_SHARE`` of the duration, so the copiers copy while the
   faults happen.
3. One copier per input partition (``copier``, ``copiers``) copies it to the output
   partition of the same number in transactions; ``--consumers`` readers read the output
   read_committed during the run (``workload.consume``, files ``reader-<n>.jsonl``).
4. The broker faults (aimed at the output topic's partitions; their leaders are often
   transaction and group coordinators too) and the copier faults (``--copier-kills``,
   ``--zombies``) play for the duration; then the brokers are healed, every copier that
   is down is started again, the producers finish, and the copiers are given until
   ``--settle`` to catch up with the input (the group's committed offsets at the input's
   end offsets) before they are stopped.
5. Once no transaction is open in the output (its last stable offsets at its high
   watermarks), the output is read to its end read_committed and read_uncommitted, and
   the input to its end; the history is checked as the produce-consume workload's (on the
   input: nothing acknowledged lost, nothing written twice) and by ``copy_checker``
   (output = input exactly once, no aborted read, the zombies fenced).

Owner: the command's main thread (a ``run.Chaos``); the fault threads as there.
"""
from __future__ import annotations

import os
import time

from cluster import KafkaConsumer, TopicPartition
from cluster.tools.chaos import checker, copy_checker, history, workload
from cluster.tools.chaos.copier import END_TIMEOUT_MS, CopierSpec
from cluster.tools.chaos.copiers import Copiers
from cluster.tools.chaos.replicas import compare_replicas
from cluster.tools.chaos.run import CLIENT_START, Chaos
from cluster.tools.chaos.schedule import build_copier_schedule
from cluster.tools.support import ToolError

WORKLOAD = "transactional-copy"
#: The broker scenarios it runs with: the others write records of their own to the topic
#: (divergence) or lose acknowledged ones by design (unclean elections).
SCENARIOS = ("leader-kill-storm", "rolling-sigterm", "sigstop-follower", "sigstop-leader",
             "page-cache-loss", "segment-flip-follower", "segment-flip-leader",
             "txnindex-flip")
#: Share of the duration over which the producers send the input.
FILL_SHARE = 0.9
#: Seconds the copiers have to stop (their last transaction may wait for a coordinator).
COPIER_STOP = END_TIMEOUT_MS / 1000 + 10.0
#: Seconds between two looks at the copy's progress or the output's open transactions.
POLL = 0.2


def topics(topic):
    """(input topic, output topic) of ``--topic``."""
    return f"{topic}-input", f"{topic}-output"


class CopyChaos(Chaos):
    """A run of the transactional-copy workload (module doc)."""

    transactional = True

    def __init__(self, args):
        super().__init__(args)
        self.input_topic, self.output_topic = topics(args.topic)
        self.group = f"{args.topic}-copiers"
        self.copiers = None
        self.copier_kills = (args.copier_kills if args.copier_kills is not None
                             else max(1, int(args.duration // 10)))

    def topics(self):
        return [self.input_topic, self.output_topic]

    def _check_args(self):
        super()._check_args()
        a = self.args
        if a.scenario not in SCENARIOS:
            raise ToolError(f"--workload {WORKLOAD} runs with the scenarios "
                            f"{', '.join(SCENARIOS)}, not {a.scenario!r}")
        if a.record_bytes:
            raise ToolError(f"--record-bytes is for the produce-consume workload, not "
                            f"--workload {WORKLOAD}")
        if a.records < 1 or self.copier_kills < 0 or a.zombies < 0:
            raise ToolError(f"--records must be >= 1, --copier-kills and --zombies >= 0, "
                            f"found {a.records}, {self.copier_kills}, {a.zombies}")

    def _run_workload(self):
        a = self.args
        injector = self._open_faults(self.output_topic)
        self.copiers = Copiers(a.partitions, self._copier_spec, self.fault_log,
                               on_event=self._print_event)
        for n in range(a.consumers):
            self._spawn("consumer", workload.consume, n, history.READER_FILES,
                        topic=self.output_topic, isolation_level="read_committed")
        rate = a.records / (a.duration * FILL_SHARE) / a.producers
        for n in range(a.producers):
            self._spawn("producer", workload.produce, n, history.PRODUCER_FILES,
                        topic=self.input_topic, idempotent=True, rate=rate,
                        records=a.records // a.producers + (n < a.records % a.producers))
        for copier in range(a.partitions):
            self.copiers.start(copier)
        self._wait(lambda: self._producers_started() and self._copiers_started(),
                   CLIENT_START)
        schedule = build_copier_schedule(a.seed, a.duration, self.copier_kills, a.zombies,
                                         a.partitions)
        self._announce(f"{a.records} records by {a.producers} idempotent producers, "
                       f"{a.partitions} transactional copiers ({len(schedule)} copier "
                       f"faults), {a.consumers} read_committed readers")
        self._play(injector, (self.copiers, schedule))
        self.copiers.heal()
        self._wait(lambda: not any(p.is_alive() for k, p, _ in self.processes
                                   if k == "producer"), a.settle)
        self._stop_clients("producer")
        settled = self._wait(lambda: self._all_led(full_isr=True), a.settle)
        caught_up, _committed = self._committed_to_end(self.input_topic, self.group,
                                                       a.settle)
        self._stop_copiers()
        stable = self._output_stable(a.settle)
        output = workload.drain(self.data_dir, self.output_topic, a.partitions,
                                os.path.join(self.out, history.OUTPUT_DRAIN_FILE), a.settle,
                                isolation_level="read_committed")
        uncommitted = workload.drain(
            self.data_dir, self.output_topic, a.partitions,
            os.path.join(self.out, history.OUTPUT_UNCOMMITTED_FILE), a.settle)
        self._stop_clients("consumer")
        drained = workload.drain(self.data_dir, self.input_topic, a.partitions,
                                 os.path.join(self.out, history.DRAIN_FILE), a.settle)
        found = self._history(settled, drained, injector, self.input_topic,
                              workload=WORKLOAD, records=a.records,
                              input_topic=self.input_topic, output_topic=self.output_topic,
                              copier_schedule=[s.to_json() for s in schedule])
        found.copy = {"caught_up": caught_up, "stable": stable,
                      "undrained": sorted(set(output["undrained"])
                                          | set(uncommitted["undrained"]))}
        image = self.page.read()
        found.replicas += compare_replicas(
            self.data_dir, self.output_topic,
            {p.partition: list(p.replicas) for p in image.topics[self.output_topic].partitions},
            uncommitted["high_watermarks"])
        verdict = checker.check(found, idempotent=True)
        anomalies, counts = copy_checker.check(found)
        verdict.anomalies += anomalies
        verdict.copy = counts
        if self.copiers.error is not None:
            verdict.anomalies.append({"kind": "injector-error",
                                      "error": str(self.copiers.error)})
        return self._report(found, verdict, injector, settled)

    def replay_arguments(self):
        return [*super().replay_arguments(), "--workload", WORKLOAD,
                "--records", str(self.args.records),
                "--copier-kills", str(self.copier_kills), "--zombies", str(self.args.zombies),
                *(["--subscribe"] if self.args.subscribe else [])]

    def _copier_spec(self, copier, incarnation):
        return CopierSpec(self.data_dir, self.input_topic, self.output_topic, self.group,
                          copier, incarnation,
                          os.path.join(self.out, f"copier-{copier}.{incarnation}.jsonl"),
                          seed=self.args.seed, subscribe=self.args.subscribe)

    def _copiers_started(self):
        """Whether every first incarnation has returned from init_transactions."""
        return all(any(op["op"] == "init" for op in history.read_lines(
            os.path.join(self.out, f"copier-{c}.0.jsonl"))) for c in range(self.args.partitions))

    def _output_stable(self, timeout):
        """Wait up to ``timeout`` seconds until no transaction is open in the output (every
        partition's last stable offset is its high watermark); whether none is."""
        tps = [TopicPartition(self.output_topic, p) for p in range(self.args.partitions)]
        deadline = time.monotonic() + timeout
        with KafkaConsumer(bootstrap_servers=self.data_dir,
                           isolation_level="read_committed") as committed, \
                KafkaConsumer(bootstrap_servers=self.data_dir) as uncommitted:
            while time.monotonic() < deadline:
                try:
                    if (committed.end_offsets(tps, timeout_ms=1000)
                            == uncommitted.end_offsets(tps, timeout_ms=1000)):
                        return True
                except Exception:  # a leader moving: ask again
                    pass
                time.sleep(POLL)
        return False

    def _stop_copiers(self):
        if self.copiers is not None:
            self.copiers.stop(COPIER_STOP)
            self._unlink_client_objects(self.copiers.killed_pids())

    def _stop_clients(self, kind=None):
        if kind is None:  # stopping everything (the run is over or failed)
            self._stop_copiers()
        super()._stop_clients(kind)
