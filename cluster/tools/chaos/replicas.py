"""Replica logs compared byte for byte below the high watermark (Kafka's
ReplicaVerificationTool, on the files).

Every replica of a partition lives in ``D/broker-<id>/<topic>-<partition>/``. Followers
append the leader's batches as they are, so below the high watermark (HW) every replica
must hold the same batches with the same bytes. ``replica_batches`` reads a replica's
segment files (read-only, as ``ringlog dump-log`` does) and returns its batches whose base
offset is below the HW; ``compare_replicas`` reports, per partition, each replica whose
batches differ from the first replica's: the first offset where they part, or how far
short of the HW it stops. Run it once the cluster has settled (the files of a live broker
are read as they are on disk). Pure reads of files: any thread.
"""
from __future__ import annotations

import os

from cluster.metadata import data_dir as dd
from segments.record.batch_descriptor import HEADER_SIZE
from segments.record.batch_header import BatchHeader
from segments.segment import LOG_SUFFIX, base_offset_from_name, iter_file_batches


def replica_batches(partition_dir, high_watermark):
    """[(base offset, last offset, bytes)] of the batches of ``partition_dir`` starting
    below ``high_watermark``, in offset order ([] if the directory does not exist); stops at
    a torn batch."""
    try:
        names = [n for n in os.listdir(partition_dir) if n.endswith(LOG_SUFFIX)]
    except FileNotFoundError:
        return []
    batches = []
    for name in sorted(names, key=base_offset_from_name):
        path = os.path.join(partition_dir, name)
        fd = os.open(path, os.O_RDONLY)
        try:
            for _position, view in iter_file_batches(fd, 0, os.fstat(fd).st_size):
                if len(view) < HEADER_SIZE:
                    return batches
                header = BatchHeader(view)
                if len(view) < header.size_in_bytes:
                    return batches
                if header.base_offset >= high_watermark:
                    return batches
                batches.append((header.base_offset, header.last_offset, bytes(view)))
        finally:
            os.close(fd)
    return batches


def compare_replicas(data_dir, topic, replicas, high_watermarks):
    """Differences below the HW: ``replicas`` {partition: [broker ids]},
    ``high_watermarks`` {partition: HW}. Returns a list of ``{"partition", "broker",
    "reference", "offset", "what"}`` (``reference``: the replica compared against)."""
    found = []
    for partition, brokers in sorted(replicas.items()):
        hw = high_watermarks.get(partition)
        if hw is None or len(brokers) < 2:
            continue
        logs = {b: replica_batches(os.path.join(dd.broker_dir(data_dir, b),
                                                f"{topic}-{partition}"), hw)
                for b in brokers}
        reference = brokers[0]
        for broker in brokers[1:]:
            difference = first_difference(logs[reference], logs[broker], hw)
            if difference is not None:
                offset, what = difference
                found.append({"partition": partition, "broker": broker,
                              "reference": reference, "offset": offset, "what": what})
    return found


def first_difference(ours, theirs, high_watermark):
    """(offset, what) of the first difference between two replicas' batch lists below the
    HW, or None if they are equal there."""
    for (base, last, data), (other_base, _other_last, other_data) in zip(ours, theirs):
        if base != other_base:
            return min(base, other_base), f"batches start at {base} and {other_base}"
        if data != other_data:
            return base, f"batch {base}-{last} differs"
    for name, batches in (("reference", ours), ("replica", theirs)):
        end = batches[-1][1] + 1 if batches else 0
        if end < high_watermark:
            return end, f"the {name} ends at {end}, below the high watermark {high_watermark}"
    return None
