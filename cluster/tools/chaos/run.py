"""One run of ``ringlog chaos`` (``Chaos``; the steps: ``command``'s doc): the cluster
opened or started, the topics created, the produce-consume workload played under the
faults, the history checked and reported, and everything the run started stopped
whatever happens. The transactional-copy workload (``transactional_copy.CopyChaos``)
goes through the same phases with a workload of its own.

Ctrl-C or SIGTERM at any moment (``KeyboardInterrupt``, ``support.Terminated``) says so
and unwinds to the stop (``_stop_everything``): the fault threads told to stop (a paused
broker continues, a killed one is started again: a running cluster is left whole) and
joined within ``THREAD_STOP``, the clients stopped (their ``workload.StopEvent``, SIGKILL
after ``CLIENT_STOP``), the cluster the run started stopped; each step runs whatever the
previous one raised, and a further Ctrl-C does not cut the stop short
(``support.signals_deferred``).

Owner: the command's main thread; the injector and the monitor run in threads of their own.
"""
from __future__ import annotations

import os
import shlex
import threading
import time

import posix_ipc

from cluster import Cluster, KafkaAdminClient, KafkaConsumer, NewTopic, TopicPartition
from cluster.errors import TopicAlreadyExistsError
from cluster.metadata import data_dir as dd
from cluster.metadata.page import MetadataPage
from cluster.stats.reader import reap_dead
from cluster.supervisor.broker_control import check_watching_supervisor
from cluster.supervisor.supervisor import (
    START_TIMEOUT,
    BrokerCountError,
    read_record,
    running_brokers,
    supervising,
)
from cluster.tools.chaos import checker, history, report, workload
from cluster.tools.chaos.brokers import OwnedBrokers, SupervisedBrokers
from cluster.tools.chaos.faults import FaultInjector
from cluster.tools.chaos.monitor import LeadershipMonitor
from cluster.tools.chaos.replicas import compare_replicas
from cluster.tools.chaos.schedule import build_schedule
from cluster.tools.progress import Progress
from cluster.tools.support import Terminated, ToolError, signals_deferred
from shm_ring.naming import list_objects

#: Exit status of a run that found anomalies.
ANOMALIES = 1
#: Broker config of a cluster the tool starts (a replica.lag.time.max.ms short enough for a test).
CLUSTER_CONFIG = {"replica.lag.time.max.ms": 2000}
#: Seconds a client process has to stop after its stop event before it is killed.
CLIENT_STOP = workload.DELIVERY_TIMEOUT_MS / 1000 + workload.OUTCOME_SLACK + 5.0
#: Seconds the fault threads have, all together, to end once told to stop (a step may be
#: waiting for a broker it started to serve: ``START_TIMEOUT``).
THREAD_STOP = START_TIMEOUT + 5.0
#: Seconds client processes may take to start (a spawned interpreter imports the client)
#: before the faults start anyway.
CLIENT_START = 60.0
#: Seconds to wait for the topic's partitions to have leaders after creating it.
TOPIC_WAIT = 30.0
#: Seconds between two looks at a group's committed offsets.
COMMIT_POLL = 0.2
#: Scenarios that only the transactional-copy workload can run (their target exists only
#: in a topic written in transactions).
TRANSACTIONAL_SCENARIOS = ("txnindex-flip",)
#: A run whose faults ran late goes on until they are all played, by at most this many
#: times its duration.
EXTENSION = 1.0



class Chaos:
    """One run of the tool with the produce-consume workload (module doc); ``run()``
    returns the exit status."""

    #: whether its workload writes transactions (TRANSACTIONAL_SCENARIOS need them)
    transactional = False

    def __init__(self, args):
        self.args = args
        self.data_dir = os.path.abspath(args.data_dir)
        self.out = os.path.abspath(args.out or f"chaos-{args.scenario}-seed{args.seed}")
        self.kills = args.kills if args.kills is not None else max(1, int(args.duration // 10))
        self.schedule = ()         # made once the brokers are known
        self.cluster = None        # a Cluster this run started
        self.brokers = None
        self.page = None
        self.processes = []        # (kind, process, stop event)
        self.fault_log = None      # the faults' HistoryWriter (``_open_faults``)
        self.stop_faults = threading.Event()
        self.stop_monitor = threading.Event()
        self.threads = []
        self.start = None
        #: {"scheduled", "played", "extended_by"}: the faults (``_play``)
        self.played = {}

    # -- the run ----------------------------------------------------------------------------

    def run(self):
        self._check_args()
        os.makedirs(self.out, exist_ok=True)
        if os.listdir(self.out):
            raise ToolError(f"the output folder {self.out} is not empty; give another --out")
        try:
            self._open_cluster()
            self.schedule = build_schedule(self.args.scenario, self.args.seed,
                                           self.args.duration, self.kills,
                                           self.args.partitions, len(self.brokers.broker_ids))
            self._create_topic()
            verdict = self._run_workload()
        except KeyboardInterrupt as exc:
            self._say_interrupted(exc)
            raise
        finally:
            with signals_deferred(self._say_stopping):
                self._stop_everything()
        return 0 if verdict.ok else ANOMALIES

    def _check_args(self):
        a = self.args
        for name in ("brokers", "partitions", "replication_factor", "min_insync_replicas",
                     "producers"):
            if getattr(a, name) < 1:
                raise ToolError(f"--{name.replace('_', '-')} must be >= 1, found "
                                f"{getattr(a, name)}")
        if a.consumers < 0 or self.kills < 0 or a.record_bytes < 0:
            raise ToolError(f"--consumers, --kills and --record-bytes must be >= 0, found "
                            f"{a.consumers}, {self.kills}, {a.record_bytes}")
        if a.scenario in TRANSACTIONAL_SCENARIOS and not self.transactional:
            raise ToolError(f"--scenario {a.scenario} damages what only transactions write: "
                            f"run it with --workload transactional-copy")

    def _open_cluster(self):
        running = running_brokers(self.data_dir) if os.path.isdir(self.data_dir) else {}
        record = read_record(self.data_dir) if os.path.isdir(self.data_dir) else {}
        if running or supervising(record):
            try:
                check_watching_supervisor(self.data_dir, record, sorted(running))
            except Exception as exc:
                raise ToolError(f"cannot restart the brokers of the running cluster: {exc}") \
                    from None
            ids = sorted(set(running) | set(record.get("brokers", [])))
            self.brokers = SupervisedBrokers(self.data_dir, ids)
            print(f"chaos: using the running cluster in {self.data_dir}, brokers {ids}")
        else:
            try:
                self.cluster = Cluster(self.data_dir, brokers=self.args.brokers,
                                       config=CLUSTER_CONFIG)
            except BrokerCountError as exc:  # a stopped cluster of another size
                raise ToolError(f"--brokers {self.args.brokers}: {exc}") from None
            self.cluster.start()
            self.brokers = OwnedBrokers(self.cluster)
            print(f"chaos: started a cluster of {self.args.brokers} brokers in {self.data_dir}"
                  f" (pids {self.cluster.pids()})")
        if self.args.replication_factor > len(self.brokers.broker_ids):
            raise ToolError(f"--replication-factor {self.args.replication_factor} is more "
                            f"than the {len(self.brokers.broker_ids)} brokers")
        self.page = MetadataPage.open(dd.read_shm_namespace(self.data_dir))

    def topics(self):
        """The topics the run creates and checks."""
        return [self.args.topic]

    def _create_topic(self):
        a = self.args
        configs = {"min.insync.replicas": str(a.min_insync_replicas)}
        if a.record_bytes:
            configs["max.message.bytes"] = str(a.record_bytes + workload.REQUEST_OVERHEAD)
        if a.scenario.startswith("unclean-election-"):
            configs["unclean.leader.election.enable"] = str(
                a.scenario == "unclean-election-on").lower()
        admin = KafkaAdminClient(bootstrap_servers=self.data_dir)
        try:
            for topic in self.topics():
                try:
                    admin.create_topics([NewTopic(topic, a.partitions, a.replication_factor,
                                                  topic_configs=configs)])
                except TopicAlreadyExistsError:
                    raise ToolError(f"topic {topic!r} exists in {self.data_dir}; the tool "
                                    f"checks only a topic it creates: give another --topic"
                                    ) from None
        finally:
            admin.close()
        if not self._wait(lambda: self._all_led(full_isr=False), TOPIC_WAIT):
            raise ToolError(f"the partitions of {' and '.join(map(repr, self.topics()))} did "
                            f"not all get a leader within {TOPIC_WAIT} s")

    def _run_workload(self):
        a = self.args
        injector = self._open_faults(a.topic)
        for n in range(a.consumers):
            self._spawn("consumer", workload.consume, n, history.CONSUMER_FILES)
        for n in range(a.producers):
            self._spawn("producer", workload.produce, n, history.PRODUCER_FILES)
        self._wait(self._producers_started, CLIENT_START)
        self._announce(f"{a.producers} {'idempotent ' if a.enable_idempotence else ''}"
                       f"producers, {a.consumers} consumers")
        self._play(injector)
        self._stop_clients("producer")
        settled = self._wait(lambda: self._all_led(full_isr=True), a.settle)
        self._stop_clients("consumer")
        drained = workload.drain(self.data_dir, a.topic, a.partitions,
                                 os.path.join(self.out, history.DRAIN_FILE), a.settle)
        found = self._history(settled, drained, injector, a.topic)
        verdict = checker.check(found, idempotent=a.enable_idempotence)
        return self._report(found, verdict, injector, settled)

    # -- the phases every workload goes through -------------------------------------------------

    def _open_faults(self, topic):
        """The injector aiming at ``topic``, writing to the fault log (``fault_log``, open
        until ``_history``); the leadership monitor of ``topic`` started."""
        self.fault_log = workload.HistoryWriter(os.path.join(self.out, history.FAULTS_FILE))
        injector = FaultInjector(self.schedule, self.brokers, self.page.read, topic,
                                 self.data_dir, self.fault_log, on_event=self._print_event)
        monitor = LeadershipMonitor(self.page.read, topic,
                                    os.path.join(self.out, history.LEADERSHIP_FILE))
        self._thread(monitor.run, self.stop_monitor)
        return injector

    def _announce(self, clients):
        a = self.args
        self.start = time.time()
        print(f"chaos: {a.scenario}, seed {a.seed}, {len(self.schedule)} faults over "
              f"{a.duration:g} s; {clients} -> {self.out}", flush=True)

    def _play(self, injector, *others):
        """Run the injector (and ``others``: ``(player, schedule)`` of more fault players,
        whose ``run`` is given the schedule, the stop event and the start time) for the
        duration, extended while steps of their schedules are still to play (steps run
        late when restarts take longer than their slots) by at most ``EXTENSION`` times the
        duration; then stop them and heal the brokers. How many were played, and why not
        all, is printed and kept in ``self.played``."""
        started = time.monotonic()
        players = [injector] + [player for player, _schedule in others]
        scheduled = len(injector.schedule) + sum(len(schedule) for _p, schedule in others)
        threads = [self._thread(injector.run, self.stop_faults, started)]
        threads += [self._thread(player.run, schedule, self.stop_faults, started)
                    for player, schedule in others]
        duration = self.args.duration
        with Progress(int(duration), "s of chaos") as progress:
            while time.monotonic() - started < duration:
                time.sleep(0.1)
                progress.update(int(time.monotonic() - started))
        late = sum(player.pending() for player in players)
        if late:
            print(f"chaos: {late} of {scheduled} faults still to play after {duration:g} s "
                  f"(steps ran late: each waits for what it restarted); the run goes on "
                  f"until they are played, for at most {duration * EXTENSION:g} s more",
                  flush=True)
            limit = started + duration * (1 + EXTENSION)
            while (sum(player.pending() for player in players)
                   and time.monotonic() < limit):
                time.sleep(0.1)
        self.stop_faults.set()
        for thread in threads:
            thread.join()
        left = sum(player.pending() for player in players)
        self.played = {"scheduled": scheduled, "played": scheduled - left,
                       "extended_by": round(max(0.0, time.monotonic() - started - duration),
                                            3)}
        if left:
            print(f"chaos: {scheduled - left} of {scheduled} faults played; the other "
                  f"{left} were still due when the run stopped "
                  f"{duration * (1 + EXTENSION):g} s after it began (give a longer "
                  f"--duration or fewer faults)", flush=True)
        healed = self.brokers.heal()
        self.fault_log.write(fault="heal", started=healed)

    def _history(self, settled, drained, injector, topic, **run):
        """The run's history as its files hold it (``run``: more parameters), with the
        drain's end offsets and the replicas of ``topic`` compared (the leadership monitor
        stopped and the fault log closed first)."""
        a = self.args
        self.stop_monitor.set()
        self.fault_log.close()
        image = self.page.read()
        replicas = {p.partition: list(p.replicas) for p in image.topics[topic].partitions}
        run = {"scenario": a.scenario, "seed": a.seed, "topic": a.topic,
               "partitions": a.partitions, "replication_factor": a.replication_factor,
               "min_insync_replicas": a.min_insync_replicas,
               "idempotent": a.enable_idempotence, "brokers":
               self.brokers.broker_ids, "duration": a.duration, "start": self.start,
               "end": time.time(), "settled": settled,
               "injector_error": None if injector.error is None else str(injector.error),
               "faults_played": self.played,
               **run}
        found = history.load(self.out, run)
        found.drain = drained
        found.replicas = compare_replicas(self.data_dir, topic, replicas,
                                          drained["high_watermarks"])
        return found

    def _report(self, found, verdict, injector, settled):
        """history.json, timeline.png and the summary; the verdict."""
        if injector.error is not None:
            verdict.anomalies.append({"kind": "injector-error", "error": str(injector.error)})
        report.write_history(self.out, found, verdict, self.schedule)
        report.write_timeline(self.out, found, verdict)
        if not settled:
            print(f"chaos: the cluster did not settle (every partition led, full ISR) within "
                  f"{self.args.settle:g} s")
        for line in report.summary(verdict):
            print(line)
        if not verdict.ok:
            print("chaos: replay this run (same seed, same fault schedule) with:\n  "
                  + shlex.join(["ringlog", "chaos", *self.replay_arguments()]), flush=True)
        print(f"chaos: {report.HISTORY_JSON} and {report.TIMELINE_PNG} in {self.out}",
              flush=True)
        return verdict

    def replay_arguments(self):
        """The ``chaos`` arguments that replay this run: the same seed, schedule and
        workload, every default made explicit, into a new data directory (or, on a running
        cluster, a new topic of it) and a new output folder."""
        a = self.args
        topic, data_dir = a.topic, self.data_dir + "-replay"
        if self.cluster is None and self.brokers is not None:  # a running cluster: kept
            topic, data_dir = a.topic + "-replay", self.data_dir
        arguments = ["--data-dir", data_dir, "--brokers", str(a.brokers),
                     "--scenario", a.scenario, "--duration", f"{a.duration:g}s",
                     "--seed", str(a.seed), "--topic", topic,
                     "--partitions", str(a.partitions),
                     "--replication-factor", str(a.replication_factor),
                     "--min-insync-replicas", str(a.min_insync_replicas),
                     "--producers", str(a.producers), "--consumers", str(a.consumers),
                     "--kills", str(self.kills), "--record-bytes", str(a.record_bytes),
                     "--settle", f"{a.settle:g}s",
                     "--out", self.out + "-replay"]
        arguments += ["--unkeyed"] if a.unkeyed else []
        arguments += ["--enable-idempotence"] if a.enable_idempotence else []
        return arguments

    def _committed_to_end(self, topic, group, timeout):
        """Wait up to ``timeout`` seconds until ``group``'s committed offsets of ``topic``
        are its end offsets; (whether they got there, {partition: committed offset})."""
        tps = [TopicPartition(topic, p) for p in range(self.args.partitions)]
        deadline = time.monotonic() + timeout
        committed = {}
        with KafkaAdminClient(bootstrap_servers=self.data_dir) as admin, \
                KafkaConsumer(bootstrap_servers=self.data_dir) as consumer:
            while time.monotonic() < deadline:
                try:
                    ends = consumer.end_offsets(tps, timeout_ms=1000)
                    found = admin.list_consumer_group_offsets(group, partitions=tps)
                    # -1: nothing committed, all right for an empty partition
                    committed = {tp.partition: max(found[tp].offset, 0) for tp in tps}
                    if all(committed[tp.partition] == ends[tp] for tp in tps):
                        return True, committed
                except Exception:  # a coordinator or leader moving: ask again
                    pass
                time.sleep(COMMIT_POLL)
        return False, committed

    # -- helpers ------------------------------------------------------------------------------

    def _all_led(self, full_isr):
        topics = self.page.read().topics
        infos = [topics.get(topic) for topic in self.topics()]
        return None not in infos and all(
            p.online and (not full_isr or set(p.isr) == set(p.replicas))
            for info in infos for p in info.partitions)

    @staticmethod
    def _wait(predicate, timeout):
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _producers_started(self):
        """Whether every producer has recorded its first send (its client is up)."""
        return all(os.path.exists(path) and os.path.getsize(path) > 0
                   for path in (os.path.join(self.out, history.PRODUCER_FILES.replace(
                       "*", str(n))) for n in range(self.args.producers)))

    def _say_interrupted(self, exc):
        """What the run had done when Ctrl-C (or SIGTERM) stopped it."""
        what = "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"
        done = ""
        if self.start is not None:
            events = history.read_lines(os.path.join(self.out, history.FAULTS_FILE))
            done = (f" {time.time() - self.start:.1f} s into the run, {len(events)} fault "
                    f"events logged;")
        print(f"chaos: interrupted ({what}):{done} stopping what the run started; the "
              f"history so far (not checked) is in {self.out}", flush=True)

    def _say_stopping(self, _signum):
        print("chaos: still stopping what the run started (it takes seconds)", flush=True)

    def _print_event(self, event):
        fields = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("t", "fault"))
        print(f"{event['t'] - (self.start or event['t']):7.2f}s {event['fault']} {fields}",
              flush=True)

    def _thread(self, target, *args):
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread

    def _spawn(self, kind, target, number, pattern, **spec):
        a = self.args
        spec = {"topic": a.topic, "idempotent": a.enable_idempotence,
                "value_bytes": a.record_bytes, **spec}
        self._spawn_client(kind, target, number, workload.ClientSpec(
            self.data_dir, partitions=a.partitions, number=number,
            history=os.path.join(self.out, pattern.replace("*", str(number))),
            keyed=not a.unkeyed, **spec))

    def _spawn_client(self, kind, target, number, spec):
        stop = workload.StopEvent()
        process = workload.CTX.Process(target=target, args=(spec, stop),
                                       name=f"chaos-{kind}-{number}")
        workload.start_client(process)
        self.processes.append((kind, process, stop))

    def _stop_clients(self, kind=None):
        """Stop the client processes (of ``kind``): their stop event, then SIGKILL after
        CLIENT_STOP; the shared memory of a killed one is unlinked."""
        chosen = [(k, p, s) for k, p, s in self.processes if kind is None or k == kind]
        for _kind, _process, stop in chosen:
            stop.set()
        deadline = time.monotonic() + CLIENT_STOP
        killed = []
        for _kind, process, _stop in chosen:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
                killed.append(process.pid)
            elif process.exitcode != 0:
                killed.append(process.pid)
        for _kind, _process, stop in chosen:
            stop.close()
        self.processes = [entry for entry in self.processes if entry not in chosen]
        self._unlink_client_objects(killed)

    def _unlink_client_objects(self, pids):
        cluster_id = dd.read_cluster_id(self.data_dir)
        if not pids or cluster_id is None:
            return
        marks = tuple(f".c{pid}-" for pid in pids)
        for name in list_objects(cluster_id):
            if any(mark in name for mark in marks):
                for unlink in (posix_ipc.unlink_shared_memory, posix_ipc.unlink_semaphore):
                    try:
                        unlink(name)
                    except posix_ipc.ExistentialError:
                        continue
        reap_dead(cluster_id)  # their stats pages

    def _stop_everything(self):
        """Whatever happened: faults off, brokers whole, clients stopped, threads joined,
        the page closed, a cluster this run started stopped; each step whatever the one
        before raised."""
        self.stop_faults.set()
        self.stop_monitor.set()
        deadline = time.monotonic() + THREAD_STOP
        for thread in self.threads:  # first: the injector may be pausing or starting a broker
            thread.join(max(0.0, deadline - time.monotonic()))
        try:
            if self.brokers is not None:
                # a cluster of this run is stopped below: it only needs its brokers to run
                self.brokers.resume_all()
                if self.cluster is None:
                    self.brokers.heal()
        finally:
            try:
                self._stop_clients()
            finally:
                try:
                    if self.page is not None:
                        self.page.close()
                finally:
                    if self.cluster is not None:
                        self.cluster.stop()
