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
request in the loop, in ms; a fetch or produce parked in a purgatory is counted until it
parks), ``partition-count``, ``leader-count``, ``under-replicated-partitions``,
``offline-partitions``, ``ring-occupancy-bytes``. ``<Api>`` is Kafka's request name
(``Produce``, ``Fetch``, ``ListOffsets`` ...).

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


class RequestStats:
    """Requests handled and their handling time per API key (the loop thread's)."""

    def __init__(self):
        self.by_api = {}  # api key -> LatencyHistogram (ms); its count is the request count

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
                        "under-replicated-partitions": 0, "offline-partitions": 0}
        self._occupancy = 0

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
        for api_key, histogram in list(handler.requests.by_api.items()):
            name = api_name(api_key)
            counters[f"request-total:{name}"] = sum(histogram.counts)
            histograms[f"request-latency-ms:{name}"] = histogram
        counters.update(self._partition_gauges())
        counters["ring-occupancy-bytes"] = self._ring_occupancy()
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
            }
        except RuntimeError:  # the loop changed the partitions while they were copied
            pass
        return self._gauges

    def _ring_occupancy(self):
        try:
            self._occupancy = sum(c.ring_occupancy for c in self._listener.connections)
        except RuntimeError:
            pass
        return self._occupancy
