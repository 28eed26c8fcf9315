"""A chaos run's history: the files its processes wrote, read back as one object.

The output folder of a run holds one JSON-lines file per writer (``workload``,
``faults``, ``monitor``): ``producer-<n>.jsonl``, ``consumer-<n>.jsonl``, ``drain.jsonl``
(the final consumer's reads), ``faults.jsonl`` and ``leadership.jsonl``; with the
transactional-copy workload also ``copier-<n>.<incarnation>.jsonl`` (``copier``),
``reader-<n>.jsonl`` (read_committed consumers of the output topic),
``output-drain.jsonl`` and ``output-uncommitted.jsonl`` (the output read to its end
read_committed and read_uncommitted), where ``drain.jsonl`` holds the input; with the
consumer-group workload ``member-<n>.<incarnation>.jsonl`` (``workload.member``). ``load`` reads
them into a ``History``; a last line cut short (a writer killed in the middle of it) is
skipped, any other bad line raises ValueError naming the file and line. The producers',
consumers' and drain's lines are read as columns (``columns``: millions of records in
bounded memory). The drain's end offsets and the replica comparison are added by the
command (``History.drain``, ``History.replicas``); ``to_json`` is what ``history.json``
holds, ``save_columns`` what ``history.npz`` holds. Pure data: any thread.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os

import numpy as np

from cluster.tools.chaos import columns

PRODUCER_FILES = "producer-*.jsonl"
CONSUMER_FILES = "consumer-*.jsonl"
DRAIN_FILE = "drain.jsonl"
FAULTS_FILE = "faults.jsonl"
LEADERSHIP_FILE = "leadership.jsonl"
COPIER_FILES = "copier-*.jsonl"
MEMBER_FILES = "member-*.jsonl"
READER_FILES = "reader-*.jsonl"
OUTPUT_DRAIN_FILE = "output-drain.jsonl"
OUTPUT_UNCOMMITTED_FILE = "output-uncommitted.jsonl"
#: The History fields kept as columns (``columns``), saved apart from the JSON.
COLUMNS = ("ops", "reads", "drain_reads", "members_read")


@dataclasses.dataclass
class History:
    """Everything a run recorded (see the module doc and ``workload`` for the fields)."""

    # the per-record parts: ``columns.Outcomes`` / ``columns.Reads`` as ``load`` makes
    # them, or lists of the files' dicts (hand-made histories)
    ops: object = dataclasses.field(default_factory=list)          # producer operations
    reads: object = dataclasses.field(default_factory=list)        # consumers' reads
    drain_reads: object = dataclasses.field(default_factory=list)  # the final consumer's
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
    # the consumer-group workload's (empty otherwise): which rows of the drain a group
    # member read (a bool per row, a column), the members' commits, and
    # {"caught_up": bool, "committed": {partition: offset}} (command)
    members_read: object = None
    member_commits: list = dataclasses.field(default_factory=list)
    group: dict = dataclasses.field(default_factory=dict)

    def to_json(self):
        """The history but its per-record columns (``COLUMNS``: ``save_columns``)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.name not in COLUMNS}

    def save_columns(self, path):
        """The per-record columns in one numpy ``.npz`` file (``load_columns``)."""
        arrays = {}
        for name in COLUMNS:
            table = getattr(self, name)
            if table is None or isinstance(table, np.ndarray):
                arrays[name] = np.zeros(0, bool) if table is None else table
                continue
            if isinstance(table, list):  # a hand-made history
                table = (columns.Outcomes if name == "ops" else columns.Reads).of_dicts(table)
            for field in dataclasses.fields(table):
                value = getattr(table, field.name)
                if isinstance(value, np.ndarray):
                    arrays[f"{name}.{field.name}"] = value
            if isinstance(table, columns.Reads):
                arrays[f"{name}.other"] = np.array(
                    [f"{row}\t{text}" for row, text in sorted(table.other.items())], str)
        np.savez(path, **arrays)


def load(folder, run=None):
    """The History of the JSON-lines files in ``folder`` (module doc); the producers',
    consumers' and drain's as columns (``columns``: a consumer's reads that the drain
    made too are counted, not kept)."""
    history = History(run=dict(run or {}))
    columns.return_freed_memory()
    # the drain first: sorting it costs three columns, fewer with nothing else loaded
    drain = columns.reads_of_file(os.path.join(folder, DRAIN_FILE),
                                  columns.DRAIN).sorted_by_place()
    drain.reader = np.broadcast_to(np.int16(columns.DRAIN), len(drain))  # no memory
    history.drain_reads = drain
    history.ops = columns.outcomes_of_files(
        sorted(glob.glob(os.path.join(folder, PRODUCER_FILES))))
    seen = np.zeros(len(drain), bool)
    history.reads = columns.Reads.concat(
        [columns.reads_of_file(path, _number(path), drain)
         for path in sorted(glob.glob(os.path.join(folder, CONSUMER_FILES)))]
        + [columns.reads_of_file(path, _number(path), drain, seen)
           for path in sorted(glob.glob(os.path.join(folder, MEMBER_FILES)))])
    history.members_read = seen
    for path in sorted(glob.glob(os.path.join(folder, MEMBER_FILES))):
        history.member_commits.extend(line for line in read_lines(path)
                                      if line.get("op") == "commit")
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


def _number(path):
    """The client number in a file name ``<kind>-<n>.jsonl``."""
    return int(os.path.basename(path).split("-")[-1].split(".")[0])


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
