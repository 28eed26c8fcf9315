"""Peak resident memory of ``ringlog chaos``'s checker on a synthetic history, by hand.

::

    .venv/bin/python -m perf.chaos_checker_rss [--records 10000000] [--consumers 2]
                                               [--producers 2] [--partitions 3]
                                               [--dir DIR] [--keep] [--reuse]

Writes the history files a produce-consume run of ``--records`` acknowledged records
would leave (``--producers`` producer files of ``invoke`` and ``ok`` lines, ``--consumers``
consumer files that read every record, the final drain's), then, in a fresh interpreter,
loads them (``history.load``) and checks them (``checker.check``) and prints its peak RSS
(``ru_maxrss``, MB), the seconds it took and the verdict's counts, and the files' size.
Issue 20 item 10's goal: a 10M-record run checks in <= 1 GB.

Owner: the main thread; it writes only in ``--dir`` (default: a temporary directory,
removed unless ``--keep``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

#: Lines written per chunk.
CHUNK = 200_000

CHILD = """
import json, resource, sys, time
from cluster.tools.chaos import checker, history
started = time.monotonic()
found = history.load(sys.argv[1], {"end": 1e10})
found.drain = {"undrained": []}
verdict = checker.check(found)
print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "seconds": round(time.monotonic() - started, 1),
                  "counts": verdict.counts, "anomalies": verdict.by_kind()}))
"""


def write_history(folder, records, producers, consumers, partitions):
    """The files of a clean run: record n is producer n % producers' seq n // producers,
    at partition n % partitions, offset n // partitions; the files' total bytes."""
    def lines(kind, numbers):
        out = []
        for n in numbers:
            p, seq = n % producers, n // producers
            partition, offset = n % partitions, n // partitions
            t = 1.7e9 + n * 1e-4
            if kind == "producer":
                out.append(f'{{"op":"invoke","p":{p},"seq":{seq},"t":{t}}}\n'
                           f'{{"op":"ok","p":{p},"seq":{seq},"t":{t + 0.01},'
                           f'"partition":{partition},"offset":{offset}}}\n')
            else:
                out.append(f'{{"op":"read","c":{kind},"partition":{partition},'
                           f'"offset":{offset},"value":"p{p}:{seq:06d}","t":{t + 0.02}}}\n')
        return "".join(out)

    files = {f"producer-{p}.jsonl": ("producer", range(p, records, producers))
             for p in range(producers)}
    files.update({f"consumer-{c}.jsonl": (c, range(records)) for c in range(consumers)})
    files["drain.jsonl"] = ('"drain"', range(records))
    for name, (kind, numbers) in files.items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as file:
            for start in range(0, len(numbers), CHUNK):
                file.write(lines(kind, numbers[start:start + CHUNK]))
    return sum(os.path.getsize(os.path.join(folder, n)) for n in files)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse", action="store_true",
                        help="check the files already in --dir (written by an earlier run "
                             "with --keep) instead of writing them")
    args = parser.parse_args(argv)
    folder = args.dir or tempfile.mkdtemp(prefix="chaos-rss-")
    try:
        if args.reuse:
            size = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
        else:
            size = write_history(folder, args.records, args.producers, args.consumers,
                                 args.partitions)
        child = subprocess.run([sys.executable, "-c", CHILD, folder], capture_output=True,
                               text=True, check=True)
        result = json.loads(child.stdout)
        print(f"{args.records} records, history files {size / 2**20:.0f} MB: checker peak "
              f"RSS {result['peak_rss_mb']:.0f} MB in {result['seconds']} s; counts "
              f"{result['counts']}; anomalies {result['anomalies'] or 'none'}")
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
