"""The Kafka protocol on the rings, shared by clients and brokers.

- frames: the supported APIs and versions, request/response headers, encode and decode of
  whole frames (kio codecs, with hand encoders where the records ride);
- frame_descriptor: the binary layouts of the frame headers and record-carrying bodies;
- batch_bodies: ProduceRequest, FetchRequest and FetchResponse bodies written in place;
- produce_response / produce_response_descriptor: the broker's Produce answer, packed field
  by field;
- fetch_response: the broker's Fetch answer written in place, log bytes copied from the files.

Pure codecs: bytes in, bytes or values out; no I/O, no state shared between threads.
"""
from __future__ import annotations

import sys


def _import_kio_without_hypothesis():
    """Import kio's type base so that it does not load Hypothesis.

    kio (the protocol's dataclasses) imports ``hypothesis.strategies`` at import time when
    Hypothesis is installed — here a test extra — to register strategies for its types,
    which costs every broker and client process a large share of its RSS (perf/README.md,
    "Client RSS and GC"). With ``hypothesis`` hidden (``sys.modules["hypothesis"] = None``
    makes its import raise ImportError) for the one import of ``kio.static._phantom`` that
    looks for it, kio runs as where Hypothesis is not installed; the entry is removed right
    after, so the application can still import Hypothesis. A process that imported
    Hypothesis first (the test suite) keeps kio's strategies."""
    if "hypothesis" in sys.modules or "kio.static._phantom" in sys.modules:
        return
    sys.modules["hypothesis"] = None
    try:
        import kio.static._phantom  # noqa: F401
    finally:
        del sys.modules["hypothesis"]


_import_kio_without_hypothesis()
