"""A chaos run's history: the files its processes wrote, read back as one object.

The output folder of a run holds one JSON-lines file per writer (``workload``,
``faults``, ``monitor``): ``producer-<n>.jsonl``, ``consumer-<n>.jsonl``, ``drain.jsonl``
(the final consumer's reads), ``faults.jsonl`` and ``leadership.jsonl``; with the
transactional-copy workload also ``copier-<n>.<incarnation>.jsonl`` (``copier``),
``reader-<n>.jsonl`` (read_committed consumers of the output topic),
``output-drain.jsonl`` and ``output-uncommitted.jsonl`` (the output read to its end
read_committed and read_uncommitted), where ``drain.jsonl`` holds the input. ``load`` reads
them into a ``History``; a last line cut short (a writer killed in the middle of it) is
skipped, any other bad line raises ValueError naming the file and line. The drain's end
offsets and the replica comparison are added by the command (``History.drain``,
``History.replicas``); ``to_json`` is what ``history.json`` holds. Pure data: any thread.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os

PRODUCER_FILES = "producer-*.jsonl"
CONSUMER_FILES = "consumer-*.jsonl"
DRAIN_FILE = "drain.jsonl"
FAULTS_FILE = "faults.jsonl"
LEADERSHIP_FILE = "leadership.jsonl"
COPIER_FILES = "copier-*.jsonl"
READER_FILES = "reader-*.jsonl"
OUTPUT_DRAIN_FILE = "output-drain.jsonl"
OUTPUT_UNCOMMITTED_FILE = "output-uncommitted.jsonl"


@dataclasses.dataclass
class History:
    """Everything a run recorded (see the module doc and ``workload`` for the fields)."""

    ops: list = dataclasses.field(default_factory=list)          # producer operations
    reads: list = dataclasses.field(default_factory=list)        # consumers' reads
    drain_reads: list = dataclasses.field(default_factory=list)  # the final consumer's
    faults: list = dataclasses.field(default_factory=list)
    leadership: list = dataclasses.field(default_factory=list)
    #: {"high_watermarks": {partition: offset}, "undrained": [partitions]} (command)
    drain: dict = dataclasses.field(default_factory=dict)
    #: replica differences below the HW (``replicas.compare_replicas``)
    replicas: list = dataclasses.field(default_factory=list)
    #: the run's parameters: scenario, seed, topic, partitions, start and end (epoch s)
    run: dict = dataclasses.field(default_factory=dict)
    # the transactional-copy workload's (empty otherwise):
    copier_ops: list = dataclasses.field(default_factory=list)   # every incarnation's
    output_reads: list = dataclasses.field(default_factory=list)  # read_committed readers'
    output_drain: list = dataclasses.field(default_factory=list)  # read_committed, to the end
    output_uncommitted: list = dataclasses.field(default_factory=list)  # read_uncommitted
    #: {"caught_up": bool, "stable": bool, "undrained": [output partitions]} (command)
    copy: dict = dataclasses.field(default_factory=dict)

    def to_json(self):
        return dataclasses.asdict(self)


def load(folder, run=None):
    """The History of the JSON-lines files in ``folder`` (module doc)."""
    history = History(run=dict(run or {}))
    for path in sorted(glob.glob(os.path.join(folder, PRODUCER_FILES))):
        history.ops.extend(read_lines(path))
    for path in sorted(glob.glob(os.path.join(folder, CONSUMER_FILES))):
        history.reads.extend(line for line in read_lines(path) if line.get("op") == "read")
    history.drain_reads = [line for line in read_lines(os.path.join(folder, DRAIN_FILE))
                           if line.get("op") == "read"]
    history.faults = read_lines(os.path.join(folder, FAULTS_FILE))
    history.leadership = read_lines(os.path.join(folder, LEADERSHIP_FILE))
    for path in sorted(glob.glob(os.path.join(folder, COPIER_FILES))):
        history.copier_ops.extend(read_lines(path))
    for path in sorted(glob.glob(os.path.join(folder, READER_FILES))):
        history.output_reads.extend(line for line in read_lines(path)
                                    if line.get("op") == "read")
    for name, field in ((OUTPUT_DRAIN_FILE, "output_drain"),
                        (OUTPUT_UNCOMMITTED_FILE, "output_uncommitted")):
        setattr(history, field, [line for line in read_lines(os.path.join(folder, name))
                                 if line.get("op") == "read"])
    return history


def read_lines(path):
    """The JSON objects of a JSON-lines file ([] if it does not exist)."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().split("\n")
    except FileNotFoundError:
        return []
    if lines and lines[-1] == "":
        lines.pop()
    objects = []
    for number, line in enumerate(lines, start=1):
        try:
            objects.append(json.loads(line))
        except ValueError:
            if number == len(lines):
                break  # cut short by a kill
            raise ValueError(f"{path} line {number}: not a JSON object: {line[:80]!r}") from None
    return objects
