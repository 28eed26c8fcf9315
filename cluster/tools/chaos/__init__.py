"""``ringlog chaos``: a Jepsen-style test of a running or started cluster, built in.

It is a client of the cluster (the public API, the supervisor, the metadata page and the
data directory's files), never of broker internals. One idea per module:

- ``schedule``: the scenarios and their seeded fault schedule (pure);
- ``brokers``: signalling, stopping and starting the brokers the tool knows by pid;
- ``faults``: the fault injector that plays a schedule against the brokers;
- ``workload``: the producer and consumer processes and their history files;
- ``copier``, ``copiers``: the transactional copier process and its incarnations, with
  the copier faults;
- ``monitor``: leadership changes sampled from the metadata page;
- ``history``: the history files read back into one history;
- ``checker``: the verdict on a history (pure); ``copy_checker``: on a transactional
  copy's (pure);
- ``replicas``: replica logs compared byte for byte below the high watermark;
- ``report``: the JSON history, the PNG timeline and the summary;
- ``run``: one run with the produce-consume workload; ``transactional_copy``: one with
  the transactional-copy workload;
- ``command``: the ``chaos`` subcommand that runs it all.
"""
from __future__ import annotations
