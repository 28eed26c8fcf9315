"""Which implementation of the ring's per-frame paths runs: compiled (Cython) or pure Python.

The shared-memory layer's counterpart of ``segments.record.accel`` (shm_ring imports nothing
of ours, so it keeps its own), on the same conditions: the compiled module,
``shm_ring/_ring_accel.pyx``, has a pure-Python twin with the same behaviour and the same
bytes in the ring (``ring_core.RingCore``, ``wakeup.WakeCore``), which runs when the
compiled one is not built (``setup.py`` builds it as optional) or when ``RINGLOG_NO_ACCEL``
is set to anything but ``0`` or empty. ``load(name)`` answers the module or None; one that
cannot be imported is said once per process (one INFO log line); ``describe()`` says which
path runs.

Read at import time by ring_core and wakeup; read-only afterwards.
"""
from __future__ import annotations

import importlib
import logging
import os

log = logging.getLogger(__name__)

#: The environment variable that selects the pure-Python paths (segments.record.accel's).
SWITCH = "RINGLOG_NO_ACCEL"
#: True when the switch is set: load() answers None without trying.
DISABLED = os.environ.get(SWITCH, "") not in ("", "0")

_loaded: dict = {}   # name -> the compiled module
_missing: dict = {}  # name -> why it could not be imported


def load(name):
    """The compiled module ``name`` (``shm_ring._ring_accel``), or None when the switch is
    set or it cannot be imported (logged once per process)."""
    if DISABLED:
        return None
    if name in _loaded:
        return _loaded[name]
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        if not _missing:
            log.info("ringlog: the compiled ring paths are not available (%s: %s); running "
                     "the pure-Python ones (slower). Build them with a C compiler: pip "
                     "install -e . (or python setup.py build_ext --inplace)", name, exc)
        _missing[name] = f"{type(exc).__name__}: {exc}"
        return None
    _loaded[name] = module
    return module


def describe():
    """One line: which ring paths run in this process, and why."""
    if DISABLED:
        return f"pure Python ({SWITCH}={os.environ.get(SWITCH)})"
    if _missing:
        reasons = "; ".join(f"{name}: {why}" for name, why in sorted(_missing.items()))
        return f"pure Python (compiled modules not available: {reasons})"
    if not _loaded:
        return "none loaded yet"
    return f"compiled (Cython): {', '.join(sorted(_loaded))}"
