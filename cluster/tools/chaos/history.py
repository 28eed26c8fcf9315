"""A chaos run's history: the files its processes wrote, read back as one object.

The output folder of a run holds one JSON-lines file per writer (``workload``,
``faults``, ``monitor``): ``producer-<n>.jsonl``, ``consumer-<n>.jsonl``, ``drain.jsonl``
(the final consumer's reads), ``faults.jsonl`` and ``leadership.jsonl``. ``load`` reads
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
