"""The scenarios of ``ringlog chaos`` and their fault schedules, made from a seed.

A schedule is a tuple of ``FaultStep``: when a step starts (seconds after the workload
starts), which partition it aims at (an index: the broker is chosen when the step runs,
from the metadata page, e.g. that partition's leader at that moment), a ``pick`` in [0, 1)
that chooses among several candidates the same way every run, and how long the fault
lasts. ``build_schedule`` is a pure function of its arguments: the same seed gives the
same schedule, so a failing run can be repeated.

Steps are spread over the run: step ``i`` starts in slot ``i`` of ``kills`` equal slots,
at a random point of the slot's first half, so faults do not pile up at the start and the
last one ends before the run does (when the slots are long enough for the downtimes).
"""
from __future__ import annotations

import dataclasses
import random

#: scenario -> what one step does (``faults.FaultInjector`` carries it out).
SCENARIOS = {
    "leader-kill-storm": "SIGKILL the leader of a random partition, restart it after 1-3 s",
    "rolling-sigterm": "SIGTERM the brokers one after another, each restarted once it is gone",
    "sigstop-follower": "SIGSTOP a follower of a random partition for 2-5 s, then SIGCONT",
    "sigstop-leader": "SIGSTOP the leader of a random partition for 2-5 s, then SIGCONT",
    "divergence": "SIGSTOP a partition's followers, write acks=1 records to its leader, "
                  "SIGKILL the leader, SIGCONT the followers, restart the old leader",
    "page-cache-loss": "SIGKILL a partition's leader, truncate its segment files to its "
                       "recovery-point checkpoint, restart it",
    "unclean-election-on": "SIGKILL a partition's followers, then its leader, restart the "
                           "followers first (unclean.leader.election.enable=true)",
    "unclean-election-off": "the same with unclean.leader.election.enable=false: the "
                            "partition stays offline until its old leader or an eligible "
                            "leader replica (KIP-966: a follower that left the ISR while it "
                            "was below min.insync.replicas) returns",
    "segment-flip-follower": "flip one checksummed byte of a batch in a follower's segment "
                             "of a random partition while it runs, SIGKILL and restart it "
                             "after 1-3 s (its recovery meets the damage)",
    "segment-flip-leader": "the same in the partition's leader's segment, then SIGKILL "
                           "and restart every replica of the partition at once",
    "txnindex-flip": "flip one byte of a .txnindex file of a random partition on its leader "
                     "while it runs, SIGKILL and restart it after 1-3 s "
                     "(transactional-copy: the output topic's aborted ranges)",
}
#: Scenarios that damage a file of a replica: the broker named in their ``flip`` event
#: held the damage.
FLIPS = ("segment-flip-follower", "segment-flip-leader", "txnindex-flip")

#: scenario -> (shortest, longest) seconds a fault lasts (downtime, pause, offline time).
DOWNTIME = {
    "leader-kill-storm": (1.0, 3.0),
    "rolling-sigterm": (0.5, 1.0),
    "sigstop-follower": (2.0, 5.0),
    "sigstop-leader": (2.0, 5.0),
    "divergence": (1.0, 3.0),
    "page-cache-loss": (1.0, 3.0),
    "unclean-election-on": (2.0, 4.0),
    "unclean-election-off": (2.0, 4.0),
    "segment-flip-follower": (1.0, 3.0),
    "segment-flip-leader": (1.0, 3.0),
    "txnindex-flip": (1.0, 3.0),
}


@dataclasses.dataclass(frozen=True)
class FaultStep:
    """One fault of a schedule (see the module doc)."""

    number: int        # 0, 1, 2, ... in order
    at: float          # seconds after the workload starts
    scenario: str      # a key of SCENARIOS
    partition: int     # the partition it aims at
    broker: int        # rolling-sigterm: number mod brokers, an index into the broker ids;
                       # -1 for the other scenarios
    pick: float        # in [0, 1): chooses among candidates (followers, live brokers)
    downtime: float    # seconds the fault lasts

    def to_json(self):
        return dataclasses.asdict(self)


def build_schedule(scenario, seed, duration, kills, partitions, brokers):
    """The schedule of ``kills`` steps of ``scenario`` over ``duration`` seconds, from
    ``seed``; ValueError naming a bad argument."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    if not duration > 0:
        raise ValueError(f"duration must be > 0 seconds, found {duration!r}")
    if kills < 0 or partitions < 1 or brokers < 1:
        raise ValueError(f"kills must be >= 0, partitions and brokers >= 1, found kills="
                         f"{kills}, partitions={partitions}, brokers={brokers}")
    rng = random.Random(f"{scenario}/{seed}")  # str seeds are hashed the same in every run
    low, high = DOWNTIME[scenario]
    slot = duration / max(kills, 1)
    steps = []
    for number in range(kills):
        steps.append(FaultStep(
            number=number,
            at=round(number * slot + rng.uniform(0.0, slot / 2), 3),
            scenario=scenario,
            partition=rng.randrange(partitions),
            broker=number % brokers if scenario == "rolling-sigterm" else -1,
            pick=rng.random(),
            downtime=round(rng.uniform(low, high), 3)))
    return tuple(steps)


def choose(candidates, pick):
    """The candidate ``pick`` (in [0, 1)) chooses from the sorted ``candidates``; None if
    there is none."""
    ordered = sorted(candidates)
    return ordered[min(int(pick * len(ordered)), len(ordered) - 1)] if ordered else None


#: Copier faults of the transactional-copy workload (``copiers.CopierFaults`` plays them).
COPIER_FAULTS = {
    "copier-kill": "SIGKILL a copier (at a random moment, inside a transaction or between "
                   "asking to commit and the answer), start a new incarnation with its "
                   "transactional id after 1-3 s (its InitProducerId ends what the dead one "
                   "left open)",
    "zombie": "start a new incarnation of a live copier beside it: the old one is a zombie "
              "that the new one's InitProducerId fences",
}
#: (shortest, longest) seconds a killed copier stays down.
COPIER_DOWNTIME = (1.0, 3.0)
#: What a copier kill aims at: the copier's last history line when it is killed (None:
#: any moment; "begin": a transaction under way; "commit-invoke": a commit asked for and
#: not answered yet).
COPIER_KILL_AIMS = (None, "begin", "commit-invoke")


@dataclasses.dataclass(frozen=True)
class CopierStep:
    """One copier fault of a schedule: when (seconds after the workload starts), which
    fault (a key of COPIER_FAULTS), which copier (its slot: the input partition it
    copies), how long a killed one stays down, what a kill aims at (COPIER_KILL_AIMS)."""

    number: int
    at: float
    fault: str
    copier: int
    downtime: float
    aim: str | None = None

    def to_json(self):
        return dataclasses.asdict(self)


def build_copier_schedule(seed, duration, kills, zombies, copiers, kill="copier-kill",
                          aims=COPIER_KILL_AIMS):
    """The schedule of ``kills`` copier kills and ``zombies`` zombies over ``duration``
    seconds among ``copiers`` copiers, from ``seed``, spread as the broker faults are
    (module doc; the zombies in slots chosen at random); ValueError naming a bad
    argument. (The consumer-group workload's member kills: ``kill`` "member-kill",
    ``aims`` (None,).)"""
    if not duration > 0:
        raise ValueError(f"duration must be > 0 seconds, found {duration!r}")
    if kills < 0 or zombies < 0 or copiers < 1:
        raise ValueError(f"kills and zombies must be >= 0, copiers >= 1, found kills="
                         f"{kills}, zombies={zombies}, copiers={copiers}")
    rng = random.Random(f"copiers/{seed}")
    total = kills + zombies
    faults = [kill] * kills + ["zombie"] * zombies
    rng.shuffle(faults)
    slot = duration / max(total, 1)
    low, high = COPIER_DOWNTIME
    return tuple(CopierStep(number=number,
                            at=round(number * slot + rng.uniform(0.0, slot / 2), 3),
                            fault=fault, copier=rng.randrange(copiers),
                            downtime=round(rng.uniform(low, high), 3),
                            aim=rng.choice(aims) if fault == kill else None)
                 for number, fault in enumerate(faults))
