"""Typed configuration keys: what each value may be, and what to say when it is not.

A *parser* takes a raw value — a Python value from code, or the string a properties file
holds — and returns the typed value, or raises ``ValueError`` whose message is what was
expected (``"an integer in [1, 2147483647]"``). Strings are read as Kafka's ``ConfigDef``
reads them: trimmed, ``true``/``false`` in any case, decimal integers. The config classes
(``broker``, ``client``) turn that ``ValueError`` into their own error class
with a message naming the key, the value found and the expectation (``invalid_value``).

``FrozenConfig`` is the read-only ``dict`` they all are: built and validated once, then read
with plain ``config[name]`` (``dict.__getitem__``, nothing in between) on hot paths.

Parsers and keys are immutable: any thread may use them.
"""
from __future__ import annotations

import math
import re
import time

from segments.log_config import INT_MAX, LONG_MAX
from shm_ring.wakeup import WaitPolicy

LONG_MIN = -LONG_MAX - 1
SHORT_MAX = 2**15 - 1

_DECIMAL = re.compile(r"[+-]?[0-9]+")


class Key:
    """One configuration key: its name, its parser and its default (a raw value)."""

    __slots__ = ("name", "parse", "default")

    def __init__(self, name, parse, default):
        self.name = name
        self.parse = parse
        self.default = default


def keys(*items):
    """name -> Key for ``items``, in order."""
    return {key.name: key for key in items}


def invalid_value(error, kind, name, raw, expected):
    """The ``error`` to raise for ``raw`` at key ``name`` of a ``kind`` config."""
    return error(f"invalid value {raw!r} for {kind} config {name!r}: expected {expected}")


class Int:
    """An integer in ``[minimum, maximum]`` (Kafka's INT, LONG and SHORT with ``atLeast``).

    ``nullable``: ``None`` is accepted (Kafka's keys whose default is null: "not set").
    ``fractional``: floats are accepted too (kafka-python takes times as any number).
    ``infinite``: ``float('inf')`` is accepted (kafka-python's "no limit" for retries and
    ``consumer_timeout_ms``).
    """

    __slots__ = ("minimum", "maximum", "nullable", "fractional", "infinite")

    def __init__(self, minimum=LONG_MIN, maximum=LONG_MAX, *, nullable=False,
                 fractional=False, infinite=False):
        self.minimum = minimum
        self.maximum = maximum
        self.nullable = nullable
        self.fractional = fractional
        self.infinite = infinite

    def __call__(self, raw):
        if raw is None and self.nullable:
            return None
        value = self._number(raw)
        if value is None or not (
                self.minimum <= value <= self.maximum or (self.infinite and value == math.inf)):
            raise ValueError(self.expected())
        return value

    def _number(self, raw):
        if isinstance(raw, bool):
            return None
        if isinstance(raw, int):
            return raw
        if isinstance(raw, float):
            return raw if self.fractional or (self.infinite and raw == math.inf) else None
        if isinstance(raw, str):
            text = raw.strip()
            if _DECIMAL.fullmatch(text):
                return int(text)
            if self.fractional:
                try:
                    value = float(text)
                except ValueError:
                    return None
                return None if math.isnan(value) else value
        return None

    def expected(self):
        kind = "a number" if self.fractional else "an integer"
        if self.maximum >= LONG_MAX:
            text = f"{kind} >= {self.minimum}" if self.minimum > LONG_MIN else kind
        else:
            text = f"{kind} in [{self.minimum}, {self.maximum}]"
        if self.infinite:
            text += " or float('inf')"
        if self.nullable:
            text += " or None"
        return text


class Bool:
    """``True``/``False``, or Kafka's ``true``/``false`` in any case."""

    __slots__ = ()

    def __call__(self, raw):
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str):
            text = raw.strip().lower()
            if text in ("true", "false"):
                return text == "true"
        raise ValueError("true or false")


class Choice:
    """One of ``values`` (strings are trimmed first)."""

    __slots__ = ("values",)

    def __init__(self, *values):
        self.values = values

    def __call__(self, raw):
        value = raw.strip() if isinstance(raw, str) else raw
        if not isinstance(value, bool) and value in self.values:
            return value
        raise ValueError(f"one of {', '.join(map(repr, self.values))}")


class Str:
    """A string, or ``None`` when ``nullable``."""

    __slots__ = ("nullable",)

    def __init__(self, *, nullable=False):
        self.nullable = nullable

    def __call__(self, raw):
        if isinstance(raw, str) or (raw is None and self.nullable):
            return raw
        raise ValueError("a string or None" if self.nullable else "a string")


class Hook:
    """``None``, a callable, or an object with method ``method`` (a kafka-python
    ``Serializer``/``Deserializer``): what kafka-python accepts for (de)serializers."""

    __slots__ = ("method",)

    def __init__(self, method=None):
        self.method = method

    def __call__(self, raw):
        if raw is None or callable(raw) or (
                self.method is not None and callable(getattr(raw, self.method, None))):
            return raw
        if self.method is None:
            raise ValueError("None or a callable")
        raise ValueError(f"None, a callable or an object with a {self.method}() method")


class Anything:
    """Any value, kept as given (kafka-python keys that have no effect here)."""

    __slots__ = ()

    def __call__(self, raw):
        return raw


def wait_policy(spin_iterations, park_timeout_ms, clock=time.monotonic):
    """The ring ``WaitPolicy`` for ringlog's spin / park settings."""
    return WaitPolicy(spin=spin_iterations, poll_interval=park_timeout_ms / 1000, clock=clock)


#: Checks of a ring before a broker or client parks. Fewer than a bare ring's
#: (``WaitPolicy.spin``, 200, which suits one writer streaming to one reader): here a peer's
#: answer — a request handled in another process — takes many checks' time to come (a
#: broker's check, looking at every connection, costs more), and on a machine with fewer
#: cores than busy processes the spinning takes the CPU the peer needs. Measured with
#: ``perf.e2e_bench``: 200 spins cost the broker more CPU per record than 20, for no
#: consistently lower latency (figures: perf/README.md, "Spin iterations: 20, not 200").
DEFAULT_SPIN_ITERATIONS = 20

#: The ringlog transport keys shared by brokers and clients: (dotted name, parser, default).
#: The park timeout is the ring's own (``shm_ring.wakeup.WaitPolicy``).
SPIN_ITERATIONS = ("ringlog.spin.iterations", Int(0, INT_MAX), DEFAULT_SPIN_ITERATIONS)
PARK_TIMEOUT_MS = ("ringlog.park.timeout.ms", Int(1, INT_MAX),
                   round(WaitPolicy.poll_interval * 1000))


class FrozenConfig(dict):
    """A validated configuration: a ``dict`` that refuses changes after construction.

    Reads are plain ``dict`` reads. Changing a value means building a new config
    (``replace``), which validates again. Owner: whoever built it; immutable, so any thread
    may read it.
    """

    __slots__ = ()

    def _read_only(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} is read-only; use replace() for a changed copy")

    __setitem__ = __delitem__ = _read_only
    clear = pop = popitem = setdefault = update = __ior__ = _read_only

    def _fill(self, values):
        """Set the validated values (construction only)."""
        dict.update(self, values)
