"""The broker's figures for its stats page (``cluster.stats``), under Kafka's names.

The loop thread keeps plain counters where the work happens: ``RequestStats`` (requests
and handling time per API, ``RequestHandler.handle``), the produce handler's records and
bytes in, the fetch handler's bytes out to consumers and to followers. ``BrokerStatsSource``
is the source the publisher thread calls once per interval: it reads those counters and
works out the gauges — partition, leader, under-replicated and offline partition counts,
and the bytes waiting in the rings of the client connections — so the loop pays nothing
for them.

Names (``ProcessSnapshot.counters`` / ``histograms``): ``records-in-total``,
``bytes-in-total`` (appends of produce requests), ``bytes-out-total`` (record bytes of
consumer fetch responses), ``replication-bytes-out-total`` (of follower fetch responses),
``request-total:<Api>``, histogram ``request-latency-ms:<Api>`` (time handling the
request in the loop, in ms, of one request in ``TIMED_EVERY``; a fetch or produce parked
in a purgatory is timed until it parks), ``partition-count``, ``leader-count``,
``under-replicated-partitions``, ``offline-partitions``, ``damaged-partitions`` (replicas
here healing from a damaged log: ``replica_proc.damaged_replicas``), and the rings of the
client connections: ``ring-occupancy-bytes`` (written, not yet read, over all of them),
``ring-capacity-bytes`` (their capacities added), ``ring-count`` and
``ring-occupancy-percent-max`` (the fullest one's occupancy in % of its capacity: at 100
its writer waits).
``<Api>`` is Kafka's request name (``Produce``, ``Fetch``, ``ListOffsets`` ...).

Threads: ``RequestStats.record`` and the handlers' counters belong to the loop thread;
``BrokerStatsSource.__call__`` runs in the publisher thread and only reads (an int or a
list read under the GIL; a dict or list the loop changes while it is copied is retried
next interval: the gauges keep their last values).
"""
from __future__ import annotations

from cluster.protocol.frames import ApiKey
from cluster.stats.publisher import LATENCY_MS_BOUNDS, LatencyHistogram


def api_name(api_key):
    """Kafka's name of an API (``LIST_OFFSETS`` -> ``ListOffsets``)."""
    try:
        return "".join(word.capitalize() for word in ApiKey(api_key).name.split("_"))
    except ValueError:
        return f"Api{api_key}"


TIMED_EVERY = 16
"""One request in this many of each API is timed (the first, the 17th, ...): a count is
one list store per request, timing one costs about ten times more."""


class RequestStats:
    """Requests handled per API key, and the handling time of a sample of them (the loop
    thread's). ``counts[api key]``: requests; ``by_api``: api key -> LatencyHistogram (ms)
    of the timed ones."""

    def __init__(self):
        self.counts = [0] * (max(ApiKey) + 1)
        self.by_api = {}

    def record(self, api_key, seconds):
        histogram = self.by_api.get(api_key)
        if histogram is None:
            histogram = self.by_api[api_key] = LatencyHistogram(LATENCY_MS_BOUNDS)
        histogram.record(seconds * 1000)


class BrokerStatsSource:
    """The broker's source for its stats page (see the module doc)."""

    def __init__(self, handler, listener):
        self._handler = handler
        self._listener = listener
        self._gauges = {"partition-count": 0, "leader-count": 0,
                        "under-replicated-partitions": 0, "offline-partitions": 0,
                        "damaged-partitions": 0}
        self._rings = {"ring-occupancy-bytes": 0, "ring-capacity-bytes": 0, "ring-count": 0,
                       "ring-occupancy-percent-max": 0.0}

    def __call__(self):
        handler = self._handler
        produce, fetch = handler.produce, handler.fetch
        counters = {
            "records-in-total": produce.records_in,
            "bytes-in-total": produce.bytes_in,
            "bytes-out-total": fetch.bytes_out,
            "replication-bytes-out-total": fetch.replication_bytes_out,
        }
        histograms = {}
        requests = handler.requests
        for api_key, count in enumerate(list(requests.counts)):
            if count:
                counters[f"request-total:{api_name(api_key)}"] = count
        for api_key, histogram in list(requests.by_api.items()):
            histograms[f"request-latency-ms:{api_name(api_key)}"] = histogram
        counters.update(self._partition_gauges())
        counters.update(self._ring_gauges())
        return counters, histograms

    def _partition_gauges(self):
        replicas = self._handler.replicas
        try:
            partitions = replicas.partitions()
            leaders = [p for p in partitions if p.is_leader]
            self._gauges = {
                "partition-count": len(partitions),
                "leader-count": len(leaders),
                "under-replicated-partitions": sum(
                    1 for p in leaders if len(p.isr) < len(p.replicas)),
                "offline-partitions": replicas.offline_count,
                "damaged-partitions": replicas.damaged_count,
            }
        except RuntimeError:  # the loop changed the partitions while they were copied
            pass
        return self._gauges

    def _ring_gauges(self):
        try:
            rings = [ring for c in self._listener.connections for ring in c.ring_usage]
        except RuntimeError:  # the loop changed the connections while they were copied
            return self._rings
        self._rings = {
            "ring-occupancy-bytes": sum(occupied for occupied, _ in rings),
            "ring-capacity-bytes": sum(capacity for _, capacity in rings),
            "ring-count": len(rings),
            "ring-occupancy-percent-max": max((100.0 * occupied / capacity
                                               for occupied, capacity in rings), default=0.0),
        }
        return self._rings
