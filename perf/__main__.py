"""`make bench` / `python -m perf`: every benchmark of the foundation layers, one after another.

Each prints its figures and the ratios against the peers it measures in the same run. Run a
single one with `python -m perf.<name>` (see its --help). The side-by-side suite against
Redis Streams, pyzmq and multiprocessing comes with the performance-suite issue.
"""

import importlib
import sys

BENCHMARKS = ["ring_bench", "codec_bench", "log_bench", "protocol_bench", "buffer_pool"]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    chosen = argv or BENCHMARKS
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        print(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}",
              file=sys.stderr)
        return 2
    for name in chosen:
        print(f"\n=== perf.{name} ===", flush=True)
        importlib.import_module(f"perf.{name}").main([])
    return 0


if __name__ == "__main__":
    sys.exit(main())
