"""What a broker tells the controller about its damaged replicas.

A replica is *damaged* when its log lost records in recovery (bytes dropped at an invalid
batch, or a log end below the high watermark this broker had checkpointed: lost page
cache) or is offline for damaged bytes (``segments.log``: a batch that fails its checks
at the first read, or below the recovery point at the open). Until it has fetched back
from an intact leader everything that leader had acknowledged, it must not lead while an
intact replica of the ISR or ELR is alive: its followers would truncate to it and lose
the records everywhere (KIP-966's "last replica standing", and worse: any replica).

The broker (``replica_manager``) keeps the list in ``D/broker-<id>/damaged-replicas.json``
and rewrites it whenever it changes: at start-up, after opening the logs and before it
says ``serving`` (so the controller reads it when it first counts the broker alive, as a
KRaft controller learns of an unclean shutdown from the BrokerRegistration), when a log
goes offline, when an offline log starts healing and when a replica has caught up. The
controller (``controller.controller``) reads it at every liveness poll (one stat per
broker; the file is parsed again only when it changed) and publishes the damaged replicas
of each partition in its ``PartitionState.damaged``: a file, as the heartbeat is, for
the same reasons (``replica_proc.heartbeat``).

Layout (JSON, written atomically)::

    {"version": 1, "replicas": [{"topic": "t", "partition": 0, "topic_id": "...",
      "log_end_before": 400, "log_end_after": 366, "offline": false,
      "reason": "recovery dropped 1830 bytes"}, ...]}

``log_end_before``: the log end offset before recovery as far as the broker can tell (its
checkpointed high watermark or recovery point, when higher than what is left);
``log_end_after``: after recovery, -1 while the log is offline. The parse is strict
(``read_reports``: ValueError naming the file and what was wrong); the controller treats
a file it cannot parse as an empty report, with a WARNING, and the follower's own rule
(``Partition.may_truncate_to``) still keeps intact replicas from truncating below their
high watermark.

Owner: the broker's loop thread writes; the controller (another broker's loop thread, or
this one's) reads.
"""
from __future__ import annotations

import dataclasses
import json
import os

from cluster.metadata import data_dir as dd

FILE_NAME = "damaged-replicas.json"
VERSION = 1


@dataclasses.dataclass(frozen=True)
class DamagedReplica:
    """One damaged replica of this broker (see the module doc)."""

    topic: str
    partition: int
    topic_id: str
    log_end_before: int
    log_end_after: int
    offline: bool
    reason: str

    @property
    def key(self):
        return self.topic, self.partition


_FIELDS = {"topic": str, "partition": int, "topic_id": str, "log_end_before": int,
           "log_end_after": int, "offline": bool, "reason": str}


def report_path(broker_dir):
    return os.path.join(broker_dir, FILE_NAME)


def write_reports(broker_dir, replicas):
    """Replace the report of the broker whose directory is ``broker_dir``."""
    dd.write_json(report_path(broker_dir),
                  {"version": VERSION,
                   "replicas": [dataclasses.asdict(r) for r in
                                sorted(replicas, key=lambda r: r.key)]})


def read_reports(broker_dir):
    """The DamagedReplicas reported in ``broker_dir`` ([] without a file); ValueError
    naming the file if it is not exactly the layout of the module doc."""
    path = report_path(broker_dir)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    try:
        raw = json.loads(data)
        if not isinstance(raw, dict) or set(raw) != {"version", "replicas"}:
            raise ValueError("expected the keys 'version' and 'replicas'")
        if raw["version"] != VERSION:
            raise ValueError(f"version {raw['version']!r}, expected {VERSION}")
        out = []
        for entry in raw["replicas"]:
            if not isinstance(entry, dict) or set(entry) != set(_FIELDS) or any(
                    type(entry[k]) is not t for k, t in _FIELDS.items()):
                raise ValueError(f"malformed entry {entry!r}")
            out.append(DamagedReplica(**entry))
        return out
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
