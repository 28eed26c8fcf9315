"""``make bench`` / ``python -m perf``: ringlog side by side with its peers (``perf.suite``).

::

    python -m perf [--quick | --quickest] [...]     the suite (see perf/suite/runner.py)
    python -m perf micro [name ...]                 the micro benchmarks, one after another

The micro benchmarks of the foundation layers still run one by one as
``python -m perf.<name>`` (see its --help); ``micro`` runs those named (default: all).
"""
from __future__ import annotations

import importlib
import sys

MICRO = ["ring_bench", "codec_bench", "log_bench", "protocol_bench", "buffer_pool", "broker_bench",
         "producer_bench", "consumer_bench"]


def micro(names):
    unknown = sorted(set(names) - set(MICRO))
    if unknown:
        print(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(MICRO)}",
              file=sys.stderr)
        return 2
    for name in names or MICRO:
        print(f"\n=== perf.{name} ===", flush=True)
        importlib.import_module(f"perf.{name}").main([])
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["micro"]:
        return micro(argv[1:])
    from perf.suite.runner import main as suite
    return suite(argv)


if __name__ == "__main__":
    sys.exit(main())
