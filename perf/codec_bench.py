"""Records per second through the RecordBatch v2 codec, side by side with kafka-python.

Standard workload: 100-byte values, null keys, ``timestamp=None`` (each record stamped by
the clock, as a producer's ``send()`` does), batch.size 16384, no compression unless
``--codec`` says otherwise. Measured in the same run:

* one by one: ``RecordBatchBuilder.append`` until it answers None, then ``build()``,
  against kafka-python's ``DefaultRecordBatchBuilder`` doing the same;
* bulk: ``build_batches`` over a (n, 100) uint8 array of random bytes and over a list
  repeating one 100-byte value (so with a codec the two differ in compressibility);
* reading: iterating the records of the built batches, ours against kafka-python's
  ``DefaultRecordBatch``.

Each figure is the median of ``--repeats`` runs (the machine is small and noisy).

    .venv/bin/python -m perf.codec_bench [--repeats 7] [--records 200000] [--codec lz4]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from segments.record.bulk import build_batches
from segments.record.compression import codec_id
from segments.record.records import RecordBatch, RecordBatchBuilder

VALUE_SIZE = 100
BATCH_SIZE = 16384


def ours_one_by_one(value, records, codec):
    built = 0
    batches = []
    while built < records:
        builder = RecordBatchBuilder(codec, BATCH_SIZE)
        append = builder.append
        while append(None, None, value) is not None:
            pass
        batches.append(builder.build())
        built += builder.record_count
    return built, batches


def kafka_python_one_by_one(value, records, codec):
    built = 0
    batches = []
    while built < records:
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, BATCH_SIZE)
        append = builder.append
        offset = 0
        while append(offset, None, None, value, []) is not None:
            offset += 1
        batches.append(bytes(builder.build()))
        built += offset
    return built, batches


def ours_bulk_array(values, codec):
    return len(values), build_batches(values, compression_type=codec, batch_size=BATCH_SIZE)


def ours_bulk_list(values, codec):
    return len(values), build_batches(values, compression_type=codec, batch_size=BATCH_SIZE)


def ours_read(batches):
    count = 0
    for batch in batches:
        for _ in RecordBatch(batch):
            count += 1
    return count


def kafka_python_read(batches):
    count = 0
    for batch in batches:
        for _ in DefaultRecordBatch(batch):
            count += 1
    return count


def rate(repeats, function, *args):
    """Median records per second of ``function(*args)`` (which returns (records, ...))."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function(*args)
        elapsed = time.perf_counter() - start
        records = result[0] if isinstance(result, tuple) else result
        rates.append(records / elapsed)
    return statistics.median(rates), rates


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--records", type=int, default=200_000,
                        help="records per one-by-one run (bulk runs use 5x as many)")
    parser.add_argument("--codec", default="none")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    codec = codec_id(args.codec)
    value = os.urandom(VALUE_SIZE)
    bulk_records = 5 * args.records
    array = np.random.default_rng(0).integers(0, 256, (bulk_records, VALUE_SIZE), np.uint8)
    listed = [value] * bulk_records

    results = {}
    results["ours one by one"] = rate(args.repeats, ours_one_by_one, value, args.records, codec)
    results["kafka-python one by one"] = rate(
        args.repeats, kafka_python_one_by_one, value, args.records, codec)
    results["ours bulk (2-D array)"] = rate(args.repeats, ours_bulk_array, array, codec)
    results["ours bulk (list of bytes)"] = rate(args.repeats, ours_bulk_list, listed, codec)
    _, our_batches = ours_one_by_one(value, args.records, codec)
    our_batches = [bytes(b) for b in our_batches]
    results["ours read"] = rate(args.repeats, ours_read, our_batches)
    results["kafka-python read"] = rate(args.repeats, kafka_python_read, our_batches)

    peer_build = results["kafka-python one by one"][0]
    peer_read = results["kafka-python read"][0]
    print(f"RecordBatch v2 codec, {VALUE_SIZE}-byte values, batch.size {BATCH_SIZE}, "
          f"codec {args.codec}, median of {args.repeats} runs")
    print(f"{'':28} {'records/s':>14} {'vs kafka-python':>16}")
    for name, (median, _) in results.items():
        peer = peer_read if "read" in name else peer_build
        print(f"{name:28} {median:14,.0f} {median / peer:15.1f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({name: {"median_records_per_s": median, "runs": runs}
                       for name, (median, runs) in results.items()}, out, indent=2)


if __name__ == "__main__":
    main()
