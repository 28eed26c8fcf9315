"""The bridge's ``--transform module:function``: a user's DataFrame -> DataFrame function.

The function gets the streaming DataFrame of the ``ringlog`` source (Spark's Kafka source
columns: key, value, topic, partition, offset, timestamp, timestampType) and returns the
streaming DataFrame to write to the sink::

    # myjob.py
    from pyspark.sql import functions as F

    def errors_only(df):
        return (df.where(F.col("value").contains(b"ERROR"))
                  .select("partition", "offset", F.col("value").cast("string")))

    ringlog spark-bridge ... --transform myjob:errors_only

``module`` is imported as ``python -m`` would find it, the current directory included;
``function`` may be a dotted path inside the module (``jobs:Pipeline.build``). The module's
directory is also put on the Python path of Spark's workers, so UDFs defined in it import
there. Exactly once needs a deterministic function: the same input rows must give the same
output rows when Spark runs a batch again after a crash.

Called once, by the bridge's main thread, before Spark starts (``load_transform``) and when
the query is built (``apply_transform``).
"""
from __future__ import annotations

import importlib
import os
import sys


class TransformError(ValueError):
    """A ``--transform`` that cannot be used; the message names it."""


def load_transform(spec):
    """``"module:function"`` -> the callable; TransformError naming ``spec`` when it is not
    of that form, the module cannot be imported, the attribute is missing or not callable.
    Puts the module's root directory on ``PYTHONPATH`` for Spark's workers."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise TransformError(f"--transform {spec!r} must be module:function "
                             f"(e.g. myjob:errors_only)")
    if os.getcwd() not in sys.path:  # as `python -m` and `python -c` do
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raised while importing
        raise TransformError(f"--transform {spec!r}: cannot import module {module_name!r}: "
                             f"{type(exc).__name__}: {exc}") from exc
    function = module
    for name in attribute.split("."):
        try:
            function = getattr(function, name)
        except AttributeError:
            raise TransformError(f"--transform {spec!r}: {module_name!r} has no attribute "
                                 f"{attribute!r}") from None
    if not callable(function):
        raise TransformError(f"--transform {spec!r} is not callable: found "
                             f"{type(function).__name__} {function!r}")
    _share_with_workers(module, module_name)
    return function


def apply_transform(function, spec, df):
    """``function(df)``, checked to be a streaming DataFrame; TransformError naming ``spec``
    otherwise (Spark's own errors from inside the function propagate unchanged)."""
    from pyspark.sql import DataFrame

    result = function(df)
    if not isinstance(result, DataFrame):
        raise TransformError(f"--transform {spec!r} returned {type(result).__name__}, "
                             f"expected a DataFrame")
    if not result.isStreaming:
        raise TransformError(f"--transform {spec!r} returned a batch DataFrame; it must "
                             f"transform the streaming DataFrame it is given")
    return result


def _share_with_workers(module, module_name):
    """Put the directory ``module_name`` is imported from on PYTHONPATH, which Spark's Python
    workers inherit when Spark starts."""
    path = getattr(module, "__file__", None)
    if path is None:  # a namespace package or a built-in: nothing to share
        return
    root = os.path.dirname(os.path.abspath(path))
    for _ in range(module_name.count(".") + (os.path.basename(path) == "__init__.py")):
        root = os.path.dirname(root)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(paths + [root])
