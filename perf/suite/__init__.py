"""The side-by-side performance suite (``python -m perf``, ``make bench``): ringlog and its
peers — Redis Streams, pyzmq PUSH/PULL, multiprocessing.Queue — on the same workloads in
one run, with ratios ringlog ÷ peer. ``runner`` is the entry point; see its doc."""
