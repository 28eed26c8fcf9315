"""What the client tools' command lines share: the bootstrap option, client properties from
files and ``key=value`` arguments, Kafka's topic patterns, durations (``60s``), and a clean
stop on SIGTERM.

The tools take Kafka's flags. ``--bootstrap-server D`` names the cluster's data directory
(what every ringlog client takes as ``bootstrap_servers``); Kafka's ``bootstrap.servers``
in a properties file or a ``key=value`` argument works too, the flag winning.

Client properties use Kafka's dotted names (``acks``, ``linger.ms``, ``max.poll.records``),
which ringlog's client configs accept as they are (``cluster.config.client``); an unknown
name or a bad value fails the tool with the config's message, naming it.

Pure helpers and one context manager; any thread may call the helpers,
``stop_on_sigterm`` only the main thread (it installs a signal handler).
"""
from __future__ import annotations

import contextlib
import logging
import re
import signal
import sys

from cluster.config import load_properties, parse_overrides

#: Exit code of a tool that failed (Kafka's tools exit 1).
FAILED = 1


class ToolError(Exception):
    """A tool cannot go on: its message is printed (to stderr) and the tool exits 1."""


def add_bootstrap_argument(parser):
    parser.add_argument("--bootstrap-server", metavar="DATA_DIR",
                        help="the cluster's data directory (ringlog's bootstrap servers)")


def add_producer_arguments(parser):
    """``--producer-property KEY=VALUE`` (repeatable) and ``--producer.config FILE``, as
    Kafka's console producer takes them (the console producer and ``ringlog ship``)."""
    parser.add_argument("--producer-property", action="append", default=[],
                        metavar="KEY=VALUE", help="producer property (repeatable)")
    parser.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                        help="producer properties file (--producer-property wins)")


def setup_logging():
    """Client warnings to stderr, as the ``cluster`` command does."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def properties(config_file=None, pairs=(), what="properties file"):
    """The properties of ``config_file`` (a Java properties file; None: none), then the
    ``key=value`` ``pairs`` on top. ToolError naming the file when it cannot be read."""
    props = {}
    if config_file is not None:
        try:
            props.update(load_properties(config_file))
        except OSError as exc:
            raise ToolError(f"cannot read the {what} {str(config_file)!r}: "
                            f"{exc.strerror}") from None
    props.update(parse_overrides(pairs))
    return props


def client_properties(bootstrap_server, config_file=None, pairs=(), defaults=None):
    """Kafka-named client properties: ``defaults``, then the properties file, then the
    ``key=value`` ``pairs``, then ``bootstrap.servers`` from ``--bootstrap-server``.
    ToolError when no bootstrap server is given anywhere or the file cannot be read."""
    props = dict(defaults or {})
    props.update(properties(config_file, pairs))
    if "bootstrap_servers" in props:  # kafka-python's spelling: one key from here on
        props.setdefault("bootstrap.servers", props.pop("bootstrap_servers"))
    if bootstrap_server is not None:
        props["bootstrap.servers"] = bootstrap_server
    if not props.get("bootstrap.servers"):
        raise ToolError("--bootstrap-server must be specified (the cluster's data directory)")
    return props


def has_property(props, name):
    """Whether ``props`` sets Kafka's ``name`` in either spelling (dotted or kafka-python's)."""
    return name in props or name.replace(".", "_") in props


def topic_pattern(raw):
    """Kafka's topic include list (``IncludeList``): a regular expression matching whole
    names, commas standing for ``|``, spaces and surrounding quotes dropped."""
    regex = raw.strip().replace(",", "|").replace(" ", "")
    regex = re.sub(r"^[\"']+", "", re.sub(r"[\"']+$", "", regex))
    try:
        return re.compile(regex)
    except re.error as exc:
        raise ToolError(f"{raw!r} is an invalid regex: {exc}") from None


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)?")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration(text):
    """Seconds of ``60s``, ``2m``, ``500ms``, ``1.5h`` or a plain number of seconds (the
    ``--duration`` of ``chaos`` and ``profile``); ValueError naming ``text`` otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"a duration like 60s, 2m or 500ms, found {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_bool(value):
    """Kafka's reading of a boolean property: true when it is "true" in any case."""
    return value.strip().lower() == "true"


def describe(exc):
    """One line for an error a tool reports: a ToolError's message as it is; any other
    exception as ``<class>: <message>``, the class named once, as a Kafka tool's stack trace
    starts (``str()`` of a KafkaError is its message alone)."""
    if isinstance(exc, ToolError):
        return str(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def fail(exc, prefix=""):
    """Print why a tool failed (``describe``) to stderr, after ``prefix``; return the tool's
    exit code."""
    print(f"{prefix}{describe(exc)}", file=sys.stderr, flush=True)
    return FAILED


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwinds like Ctrl-C, so ``finally`` blocks close the clients."""


@contextlib.contextmanager
def _handling(signals, handler):
    """While inside, ``handler`` handles ``signals`` (the handlers before are put back on the
    way out); outside the main thread, where signals cannot be handled, a no-op."""
    try:
        previous = {sig: signal.signal(sig, handler) for sig in signals}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def stop_on_sigterm():
    """While inside, SIGTERM raises ``Terminated`` in the main thread (Kafka's tools stop
    cleanly on SIGTERM through their shutdown hooks); outside the main thread a no-op."""
    def handler(signum, frame):
        raise Terminated(f"signal {signum}")
    with _handling((signal.SIGTERM,), handler):
        yield


@contextlib.contextmanager
def signals_deferred(on_signal=None):
    """While inside (a tool's stop of what it started), SIGINT and SIGTERM do not interrupt:
    ``on_signal(signum)`` is called instead (say the stop goes on), as the JVM runs Kafka's
    shutdown hooks to their end however often Ctrl-C is pressed. One that came is raised on
    the way out (``KeyboardInterrupt``, or ``Terminated``) unless an exception is under way
    already. Outside the main thread a no-op."""
    came = []

    def handler(signum, frame):
        came.append(signum)
        if on_signal is not None:
            on_signal(signum)
    with _handling((signal.SIGINT, signal.SIGTERM), handler):
        yield
    if came:
        raise Terminated(f"signal {came[0]}") if came[0] == signal.SIGTERM \
            else KeyboardInterrupt()


def print_metrics(metrics, client_id, out=None):
    """Print a client's ``metrics()`` (``{group: {name: value}}``) as Kafka's tools do with
    ``--print-metrics``: ``group:name:{client-id=..}  : value``, sorted, under a header."""
    out = sys.stdout if out is None else out
    tags = f"{{client-id={client_id}}}"
    rows = sorted((f"{group}:{name}:{tags}", value)
                  for group, values in metrics.items() for name, value in values.items())
    if not rows:
        return
    width = max(len(name) for name, _ in rows)
    print(f"\n{'Metric Name':<{width}}   Value", file=out)
    for name, value in rows:
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"{name:<{width}} : {shown}", file=out)
