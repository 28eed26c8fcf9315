"""Single-byte flips in ``.txnindex`` files against a read_committed reader (issue 20 item 3).

Run by hand (not a test): ``python -m perf.txn_index_flips --flips 200``.

It writes one partition log (``segments.log.PartitionLog``) of interleaved transactions of
several producers, committed and aborted, over several segments (each record's value
names its producer and sequence), and closes it cleanly. Then, per flip, on a fresh
copy: one byte of one non-empty ``.txnindex`` XORed with a random non-zero value, the log
opened as a broker opens it, and the whole log read as a read_committed Fetch reads it
(``read_slice`` up to the log end, ``collect_aborted_transactions`` over each slice) and
filtered as the consumer filters it (``consumer_proc.partition_records``). It counts the
aborted records served and the committed records missing, and prints one JSON line:
flips, how many the open's strict parse rebuilt, how many the first-use check rewrote,
aborted records served, committed records missing.

Run it with ``PYTHONPATH`` at another checkout to measure that code the same way.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import tempfile

from cluster.structs import TopicPartition
from consumer_proc.partition_records import PartitionRecords
from segments.log import PartitionLog
from segments.log_config import LogConfig
from segments.producer_state import ORIGIN_COORDINATOR
from segments.record.control_record import ABORT, COMMIT, build_end_txn_marker
from segments.record.records import RecordBatchBuilder

PRODUCERS = 4
TRANSACTIONS = 60
CONFIG = {"segment.bytes": 4096}


def build(path, rng):
    """The log: ``TRANSACTIONS`` transactions of ``PRODUCERS`` producers, interleaved;
    return (committed values, aborted values)."""
    log = PartitionLog(path, LogConfig.from_dict(CONFIG))
    sequence = [0] * PRODUCERS
    open_txns = {}  # producer -> [values]
    committed, aborted = set(), set()
    done = 0
    while done < TRANSACTIONS or open_txns:
        producer = rng.randrange(PRODUCERS)
        if producer in open_txns and (rng.random() < 0.3 or done >= TRANSACTIONS):
            commit = rng.random() < 0.6
            values = open_txns.pop(producer)
            (committed if commit else aborted).update(values)
            marker = build_end_txn_marker(COMMIT if commit else ABORT, 0, producer + 1, 0,
                                          0)
            log.append(marker, origin=ORIGIN_COORDINATOR)
            done += 1
            continue
        if producer not in open_txns and done >= TRANSACTIONS:
            continue
        values = open_txns.setdefault(producer, [])
        count = rng.randrange(1, 5)
        builder = RecordBatchBuilder(producer_id=producer + 1, producer_epoch=0,
                                     base_sequence=sequence[producer], is_transactional=True)
        batch_values = [b"%d-%d" % (producer, sequence[producer] + n) for n in range(count)]
        for value in batch_values:
            builder.append(0, None, value)
        sequence[producer] += count
        values.extend(batch_values)
        log.append(bytes(builder.build()))
    log.close()
    return committed, aborted


def read_committed(log):
    """Every value a read_committed consumer gets from ``log`` (the log end is stable:
    every transaction is closed)."""
    tp = TopicPartition("t", 0)
    offset, served = log.log_start_offset, []
    while offset < log.log_end_offset:
        found = log.read_slice(offset, 8192, log.log_end_offset)
        if not found.size:
            break
        aborted = log.collect_aborted_transactions(
            offset, log.fetch_upper_bound(found, log.log_end_offset))
        records = PartitionRecords(tp, offset, found.tobytes(), aborted_transactions=aborted)
        served += [bytes(r.value) for r in records.take(1 << 30)]
        offset = records.end_offset
    return served


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flips", type=int, default=200)
    parser.add_argument("--seed", type=int, default=20)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="txn-index-flips-") as tmp:
        template = os.path.join(tmp, "template", "t-0")
        committed, aborted = build(template, rng)
        indexes = sorted(n for n in os.listdir(template)
                         if n.endswith(".txnindex") and os.path.getsize(os.path.join(template, n)))
        totals = {"flips": 0, "rebuilt_at_open": 0, "rewritten_at_first_use": 0,
                  "aborted_served": 0, "committed_missing": 0, "bad_flips": 0,
                  "indexes": len(indexes), "committed": len(committed),
                  "aborted": len(aborted)}
        for _ in range(args.flips):
            copy = os.path.join(tmp, "copy", "t-0")
            shutil.rmtree(os.path.dirname(copy), ignore_errors=True)
            shutil.copytree(template, copy)
            name = rng.choice(indexes)
            path = os.path.join(copy, name)
            with open(path, "r+b") as f:
                data = bytearray(f.read())
                data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
                f.seek(0)
                f.write(data)
            log = PartitionLog(copy, LogConfig.from_dict(CONFIG))
            try:
                served = read_committed(log)
            finally:
                log.close()
            with open(path, "rb") as f:
                after = f.read()
            with open(os.path.join(template, name), "rb") as f:
                original = f.read()
            totals["flips"] += 1
            totals["rebuilt_at_open"] += bool(log.recovery.txn_indexes_rebuilt)
            totals["rewritten_at_first_use"] += (not log.recovery.txn_indexes_rebuilt
                                                 and after == original)
            bad_served = len(set(served) & aborted)
            missing = len(committed - set(served))
            totals["aborted_served"] += bad_served
            totals["committed_missing"] += missing
            totals["bad_flips"] += bool(bad_served or missing)
    print(json.dumps(totals))
    return 1 if totals["aborted_served"] or totals["committed_missing"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
