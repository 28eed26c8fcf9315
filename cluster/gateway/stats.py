"""The gateway's figures for its stats page (``ringlog top`` / ``ringlog metrics``).

Counters, Kafka's network-layer names where Kafka has one: ``connection-count``,
``connection-creation-total``, ``connection-close-total``, ``incoming-byte-total``,
``outgoing-byte-total``; per API ``request-total:<Api>``, ``request-bytes-total:<Api>``
(requests read from clients) and ``response-bytes-total:<Api>`` (answers written);
``invalid-request-total`` (frames that closed their connection); the queue depth of the
connections, ``queued-requests`` (all) and ``queued-requests-max`` (the deepest one).

Threads: every bridge thread counts (under one lock: a request costs microseconds, the
lock tens of nanoseconds); the publisher thread calls ``figures()``.
"""
from __future__ import annotations

import collections
import threading

from cluster.gateway import wire
from cluster.protocol.frames import ApiKey

_NAMES = {}  # api key -> name as keys are seen (an int16: bounded; any thread: dict stores)
_LOCAL_NAMES = {wire.DESCRIBE_ACLS: "DescribeAcls", wire.CREATE_ACLS: "CreateAcls",
                wire.DELETE_ACLS: "DeleteAcls", wire.DESCRIBE_CLUSTER: "DescribeCluster"}


def api_name(api_key):
    """Kafka's name of an API ("Produce", "FindCoordinator"), or the key for others."""
    name = _NAMES.get(api_key)
    if name is None:
        if api_key in _LOCAL_NAMES:
            name = _LOCAL_NAMES[api_key]
        else:
            try:
                name = ApiKey(api_key).name.title().replace("_", "")
            except ValueError:
                name = str(api_key)
        _NAMES[api_key] = name  # a few dozen keys at most: the int16s clients send
    return name


class GatewayStats:
    """Counters of one gateway (module doc). ``connections()`` returns the live bridges,
    for the gauges."""

    def __init__(self, connections):
        self._connections = connections
        self._lock = threading.Lock()
        self._counters = collections.Counter()

    def count(self, name, amount=1):
        with self._lock:
            self._counters[name] += amount

    def request(self, api_key, size):
        name = api_name(api_key)
        with self._lock:
            counters = self._counters
            counters["request-total:" + name] += 1
            counters["request-bytes-total:" + name] += size
            counters["incoming-byte-total"] += size

    def response(self, api_key, size):
        name = api_name(api_key)
        with self._lock:
            counters = self._counters
            counters["response-bytes-total:" + name] += size
            counters["outgoing-byte-total"] += size

    def value(self, name):
        with self._lock:
            return self._counters[name]

    def figures(self):
        """``(counters, histograms)``: a stats source (``cluster.stats.publisher``)."""
        bridges = self._connections()
        depths = [bridge.outstanding for bridge in bridges]
        with self._lock:
            counters = dict(self._counters)
        counters["connection-count"] = len(bridges)
        counters["queued-requests"] = sum(depths)
        counters["queued-requests-max"] = max(depths, default=0)
        return counters, {}
