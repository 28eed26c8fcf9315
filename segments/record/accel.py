"""Which implementation of the per-record paths runs: compiled (Cython) or pure Python.

Issue 24 allows a compiled accelerator for the per-record paths, as aiokafka has, on
conditions this module carries out: every compiled module has a pure-Python twin with the
same behaviour (and bytes), which runs when the compiled one is not built (no compiler at
install time: ``setup.py`` builds the extensions as optional) or when ``RINGLOG_NO_ACCEL``
is set to anything but ``0`` or empty — the switch the tests use for their second pass
over the codec and client tests (``make test``). The compiled modules today:

    segments.record._builder_core    RecordBatchBuilder's per-record state, append_value,
                                     and encode_plain (build() of a plain batch's records)
    cluster.producer._lane_accel     send()'s fast path: the whole send() call of a plain
                                     record (cimports the builder core)
    consumer_proc._records_accel     ConsumerRecords made from parsed columns (poll()),
                                     and the record walk of a small fetched run

``load(name)`` is how a module asks for its compiled twin: the module, or None. A compiled
module that cannot be imported (not built, built for another Python) is said once per
process, as one INFO log line naming the reason (a broker's log has it; a client's stderr
stays clean, since the install already said so once, in ``setup.py``, and a machine
without a compiler would otherwise print it from every process); a switch set on purpose
is not logged. ``describe()`` says which path runs (``make bench`` prints it).

Imported by the record codec and the consumer at import time; read-only afterwards, so any
thread may call ``describe``.
"""
from __future__ import annotations

import importlib
import logging
import os

log = logging.getLogger(__name__)

#: The environment variable that selects the pure-Python paths.
SWITCH = "RINGLOG_NO_ACCEL"
#: True when the switch is set: load() answers None without trying.
DISABLED = os.environ.get(SWITCH, "") not in ("", "0")

_loaded: dict = {}   # name -> the compiled module
_missing: dict = {}  # name -> why it could not be imported


def load(name):
    """The compiled module ``name`` (e.g. ``segments.record._builder_core``), or None when
    the switch is set or it cannot be imported (logged once per process)."""
    if DISABLED:
        return None
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        if not _missing:
            log.info("ringlog: the compiled record paths are not available (%s: %s); "
                        "running the pure-Python ones (slower). Build them with a C "
                        "compiler: pip install -e . (or python setup.py build_ext --inplace)",
                        name, exc)
        _missing[name] = f"{type(exc).__name__}: {exc}"
        return None
    _loaded[name] = module
    return module


def compiled():
    """True when every compiled module asked for so far was loaded."""
    return bool(_loaded) and not _missing and not DISABLED


def describe():
    """One line: which record paths run in this process, and why."""
    if DISABLED:
        return f"pure Python ({SWITCH}={os.environ.get(SWITCH)})"
    if _missing:
        reasons = "; ".join(f"{name}: {why}" for name, why in sorted(_missing.items()))
        return f"pure Python (compiled modules not available: {reasons})"
    if not _loaded:
        return "none loaded yet"
    return f"compiled (Cython): {', '.join(sorted(_loaded))}"
