"""The ring's two cores side by side (shm_ring.accel): a Ring class and a WakeSlot class on
the pure-Python base (``ring_core.RingCore``, ``wakeup.WakeCore``) and on the compiled one
(``shm_ring._ring_accel``), whatever ``RINGLOG_NO_ACCEL`` says, so one test compares both.
``CORES`` names them for ``pytest.mark.parametrize``; ``ring_class(name)`` and
``slot_class(name)`` skip, naming why, when the compiled module is not built."""
from __future__ import annotations

import types

import pytest

from shm_ring import ring_core, wakeup
from shm_ring.ring import Ring
from shm_ring.wakeup import WakeSlot

CORES = ("python", "compiled")


def compiled_module():
    try:
        from shm_ring import _ring_accel
    except ImportError as exc:
        pytest.skip(f"shm_ring._ring_accel is not built ({exc}): pip install -e . with a C "
                    f"compiler")
    return _ring_accel


def _on(cls, base):
    """cls's own methods over ``base`` (the compiled or the Python core)."""
    if cls.__bases__ == (base,):
        return cls
    body = {name: value for name, value in vars(cls).items()
            if not isinstance(value, types.MemberDescriptorType)
            and name not in ("__dict__", "__weakref__")}
    return type(f"{cls.__name__}On{base.__module__.rsplit('.', 1)[-1]}", (base,), body)


def ring_class(core: str) -> type:
    """Ring over the named core."""
    base = ring_core.RingCore if core == "python" else compiled_module().RingCore
    return _on(Ring, base)


def slot_class(core: str) -> type:
    """WakeSlot over the named core."""
    base = wakeup.WakeCore if core == "python" else compiled_module().WakeCore
    return _on(WakeSlot, base)
