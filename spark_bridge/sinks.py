"""Where the bridge writes: the ``--sink KIND:PATH`` argument.

=========================  ====================================================================
``--sink``                 Spark sink
=========================  ====================================================================
``parquet:DIR``            file sink, Parquet files in DIR
``json:DIR``               file sink, JSON lines in DIR (binary columns as base64)
``csv:DIR``                file sink, CSV in DIR (Spark's CSV has no binary type: use a
                           ``--transform`` that casts ``key`` and ``value`` to strings)
``console:``               Spark's console sink: each micro-batch printed as a table
=========================  ====================================================================

The file sinks are exactly once: each micro-batch's files become visible in one step, when
Spark adds the batch to the sink's metadata log (``DIR/_spark_metadata``), and a batch that
was interrupted is written again from the same offsets after a restart. Files of an
interrupted attempt stay in DIR but are in no log entry: read the sink with Spark
(``spark.read.parquet(DIR)`` follows the log), or list its files with
``spark_bridge.sink_log.committed_files``. The console sink is for looking, at least once.

``parse_sink`` is a pure function; any thread may call it.
"""
from __future__ import annotations

import dataclasses
import os

#: KIND -> (Spark's sink format, whether it writes files to a directory)
SINK_KINDS = {
    "parquet": ("parquet", True),
    "json": ("json", True),
    "csv": ("csv", True),
    "console": ("console", False),
}


class SinkSpecError(ValueError):
    """A ``--sink`` value the bridge cannot use; the message names it."""


@dataclasses.dataclass(frozen=True)
class Sink:
    """A parsed ``--sink``: Spark's sink ``format`` and, for a file sink, its ``path``
    (absolute; None for the console)."""

    kind: str
    format: str
    path: str = None

    def __str__(self):
        return f"{self.kind}:{self.path or ''}"


def parse_sink(spec):
    """``"parquet:/data/out"`` -> Sink; SinkSpecError naming ``spec`` when the kind is
    unknown, a file sink has no directory, or the console is given one."""
    kind, colon, path = spec.partition(":")
    if not colon:
        raise SinkSpecError(f"--sink {spec!r} must be KIND:PATH (e.g. parquet:/data/out), "
                            f"KIND one of {', '.join(SINK_KINDS)}")
    known = SINK_KINDS.get(kind.lower())
    if known is None:
        raise SinkSpecError(f"--sink {spec!r}: unknown sink kind {kind!r}, expected one of "
                            f"{', '.join(SINK_KINDS)}")
    spark_format, writes_files = known
    if writes_files and not path:
        raise SinkSpecError(f"--sink {spec!r}: the {kind} sink needs a directory "
                            f"({kind}:DIR)")
    if not writes_files and path:
        raise SinkSpecError(f"--sink {spec!r}: the {kind} sink takes no path (found {path!r}), "
                            f"write {kind}:")
    return Sink(kind.lower(), spark_format, os.path.abspath(path) if writes_files else None)
