"""The stats pages as Prometheus metric families, named after Kafka's JMX metrics.

Names follow what the Prometheus JMX exporter's Kafka rules make of Kafka's MBeans
(lower case; ``...PerSec`` meters become ``_total`` counters), so dashboards and alerts
written for Kafka find them:

- brokers (labels ``broker_id``, ``pid``):
  ``kafka_server_brokertopicmetrics_messagesin_total``, ``..._bytesin_total``,
  ``..._bytesout_total``, ``..._replicationbytesout_total`` (BrokerTopicMetrics
  MessagesInPerSec, BytesInPerSec, BytesOutPerSec, ReplicationBytesOutPerSec);
  ``kafka_network_requestmetrics_requests_total`` and the histogram
  ``kafka_network_requestmetrics_totaltimems`` per ``request`` (RequestMetrics
  RequestsPerSec, TotalTimeMs); ``kafka_server_replicamanager_underreplicatedpartitions``,
  ``..._partitioncount``, ``..._leadercount`` (ReplicaManager);
  ``kafka_controller_kafkacontroller_offlinepartitionscount`` (KafkaController
  OfflinePartitionsCount, where Kafka has it).
- clients (labels ``client_id``, ``pid``): the producer's figures, which carry Kafka's
  producer-metrics names on the page, as ``kafka_producer_producer_metrics_<name>``
  (``record_send_total``, ``outgoing_byte_total``, ``buffer_available_bytes``,
  ``waiting_threads`` ..., and ``request_latency_avg`` / ``_max``); the consumer's
  (consumer-fetch-manager-metrics) as
  ``kafka_consumer_consumer_fetch_manager_metrics_<name>`` (``records_consumed_total``,
  ``bytes_consumed_total``, ``records_lag_max``, ``fetch_latency_avg`` / ``_max`` ...).
  A process with both (a bridge) has both.
- every process (labels ``role``, ``name``, ``pid``): ``ringlog_process_*`` (resident,
  unique and proportional memory in bytes, CPU seconds by mode, context switches by kind,
  threads, start time, alive and stale as 0/1), ``ringlog_gc_*`` per ``generation``
  (collections, collected and uncollectable objects, pause time as a histogram in seconds,
  longest pause), every histogram of the page as ``ringlog_<name>`` (the part after a
  colon, e.g. the API, as label ``key``), and every other figure as ``ringlog_<name>``
  (``-total`` ones as counters, others as gauges; ``key`` likewise, empty when the name
  has no colon).

``families(snapshots)`` is pure; ``PagesCollector`` reads the pages at each scrape. Any
thread (the HTTP server's scrapes run in its thread). prometheus_client is imported here,
which only the ``metrics`` command imports.
"""
from __future__ import annotations

import re

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.utils import floatToGoString

from cluster.stats.snapshot import GC_PAUSE_BOUNDS, Histogram

PROCESS_LABELS = ("role", "name", "pid")
BROKER_LABELS = ("broker_id", "pid")
CLIENT_LABELS = ("client_id", "pid")
COUNTER, GAUGE = "counter", "gauge"

#: A broker's figures with a Kafka name: page name (before any colon) -> (family, type,
#: help); a part after a colon (the API of ``request-total:Produce``) is label ``request``.
BROKER_NAMES = {
    "records-in-total": ("kafka_server_brokertopicmetrics_messagesin", COUNTER,
                         "Records appended (BrokerTopicMetrics MessagesInPerSec)"),
    "bytes-in-total": ("kafka_server_brokertopicmetrics_bytesin", COUNTER,
                       "Bytes appended from producers (BrokerTopicMetrics BytesInPerSec)"),
    "bytes-out-total": ("kafka_server_brokertopicmetrics_bytesout", COUNTER,
                        "Bytes fetched by consumers (BrokerTopicMetrics BytesOutPerSec)"),
    "replication-bytes-out-total": (
        "kafka_server_brokertopicmetrics_replicationbytesout", COUNTER,
        "Bytes fetched by followers (BrokerTopicMetrics ReplicationBytesOutPerSec)"),
    "request-total": ("kafka_network_requestmetrics_requests", COUNTER,
                      "Requests handled (RequestMetrics RequestsPerSec)"),
    "under-replicated-partitions": (
        "kafka_server_replicamanager_underreplicatedpartitions", GAUGE,
        "Led partitions whose ISR is smaller than their replicas (ReplicaManager)"),
    "partition-count": ("kafka_server_replicamanager_partitioncount", GAUGE,
                        "Partitions with a replica on the broker (ReplicaManager)"),
    "leader-count": ("kafka_server_replicamanager_leadercount", GAUGE,
                     "Partitions the broker leads (ReplicaManager)"),
    "offline-partitions": ("kafka_controller_kafkacontroller_offlinepartitionscount", GAUGE,
                           "Partitions without a leader (KafkaController)"),
}
PRODUCER_PREFIX = "kafka_producer_producer_metrics_"
CONSUMER_PREFIX = "kafka_consumer_consumer_fetch_manager_metrics_"
#: The producer's page names (Kafka's producer-metrics) -> Kafka's name where it differs.
PRODUCER_NAMES = {
    "record-send-total": None, "record-error-total": None, "record-retry-total": None,
    "outgoing-byte-total": None, "request-total": None, "buffer-total-bytes": None,
    "buffer-available-bytes": None, "bufferpool-waiters": "waiting-threads",
    "bufferpool-wait-time-ns-total": None, "buffer-exhausted-total": None,
}
#: The consumer's page names (Kafka's consumer-fetch-manager-metrics).
CONSUMER_NAMES = {
    "records-consumed-total": None, "bytes-consumed-total": None, "fetch-total": None,
    "fetch-error-total": None, "records-lag-max": None,
}
#: Client latency histograms -> Kafka's gauge name before ``_avg`` / ``_max``.
CLIENT_LATENCY = {
    "request-latency-ms": PRODUCER_PREFIX + "request_latency",
    "fetch-latency-ms": CONSUMER_PREFIX + "fetch_latency",
}


def snake(name):
    """A page name as a Prometheus name part: ``buffer-available-bytes`` ->
    ``buffer_available_bytes``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name).lower()


def broker_id(snapshot):
    """The broker id in a broker's name (``broker-1`` -> ``1``), else the name."""
    match = re.fullmatch(r"broker-(\d+)", snapshot.name)
    return match.group(1) if match else snapshot.name


class _Families:
    """Families by name, made on first use, in the order first used."""

    def __init__(self):
        self.found = {}

    def get(self, cls, name, help_text, labels):
        family = self.found.get(name)
        if family is None:
            family = self.found[name] = cls(name, help_text, labels=labels)
        return family

    def counter(self, name, help_text, labels, values, value):
        self.get(CounterMetricFamily, name, help_text, labels).add_metric(values, value)

    def gauge(self, name, help_text, labels, values, value):
        self.get(GaugeMetricFamily, name, help_text, labels).add_metric(values, value)

    def histogram(self, name, help_text, labels, values, histogram):
        cumulative, buckets = 0, []
        for bound, count in zip(histogram.bounds, histogram.counts):
            cumulative += count
            buckets.append((floatToGoString(bound), cumulative))
        buckets.append(("+Inf", sum(histogram.counts)))
        self.get(HistogramMetricFamily, name, help_text, labels).add_metric(
            values, buckets, histogram.total)


def families(snapshots):
    """The metric families of ``snapshots`` (module doc), each family once."""
    out = _Families()
    for snapshot in snapshots:
        _process(out, snapshot)
    return list(out.found.values())


def _process(out, s):
    labels = (s.role, s.name, str(s.pid))
    names = PROCESS_LABELS
    out.gauge("ringlog_process_resident_memory_bytes", "Resident set size", names, labels, s.rss)
    out.gauge("ringlog_process_unique_memory_bytes", "Unique set size (0: unknown)", names,
              labels, s.uss)
    out.gauge("ringlog_process_proportional_memory_bytes", "Proportional set size (0: "
              "unknown)", names, labels, s.pss)
    for mode, seconds in (("user", s.cpu_user), ("system", s.cpu_system)):
        out.counter("ringlog_process_cpu_seconds", "CPU time by mode", names + ("mode",),
                    labels + (mode,), seconds)
    for how, count in (("voluntary", s.ctx_voluntary), ("involuntary", s.ctx_involuntary)):
        out.counter("ringlog_process_context_switches", "Context switches by kind",
                    names + ("kind",), labels + (how,), count)
    out.gauge("ringlog_process_threads", "Threads", names, labels, s.threads)
    out.gauge("ringlog_process_start_time_seconds", "Start time, epoch seconds", names, labels,
              s.start_time)
    out.gauge("ringlog_process_alive", "1 while the process runs", names, labels, int(s.alive))
    out.gauge("ringlog_process_stale", "1 when alive but its page was not updated for three "
              "publishing intervals (hung, stopped)", names, labels, int(s.alive and s.stale))
    for generation, g in enumerate(s.gc):
        values = labels + (str(generation),)
        per_gen = names + ("generation",)
        out.counter("ringlog_gc_collections", "GC collections", per_gen, values, g.collections)
        out.counter("ringlog_gc_collected_objects", "Objects the GC collected", per_gen, values,
                    g.collected)
        out.counter("ringlog_gc_uncollectable_objects", "Uncollectable objects the GC found",
                    per_gen, values, g.uncollectable)
        out.histogram("ringlog_gc_pause_seconds", "GC pause of each collection", per_gen, values,
                      _pause_histogram(g))
        out.gauge("ringlog_gc_pause_max_seconds", "Longest GC pause", per_gen, values, g.pause_max)
    broker = s.role == "broker"
    ids = (BROKER_LABELS, (broker_id(s), str(s.pid))) if broker else (
        CLIENT_LABELS, (s.name, str(s.pid)))
    for name, value in sorted(s.counters.items()):
        base, _, key = name.partition(":")
        if broker and base in BROKER_NAMES:
            family, type_, help_text = BROKER_NAMES[base]
            _add(out, type_, family, help_text, ids, key, "request", value)
        elif not broker and not key and (base in PRODUCER_NAMES or base in CONSUMER_NAMES):
            prefix, known = ((PRODUCER_PREFIX, PRODUCER_NAMES) if base in PRODUCER_NAMES
                             else (CONSUMER_PREFIX, CONSUMER_NAMES))
            kafka = known[base] or base
            _add(out, *_typed(prefix, kafka), f"{kafka} (Kafka client metric)", ids, "", "",
                 value)
        else:  # always with label ``key`` (empty without one): one label set per family
            type_, family = _typed("ringlog_", base)
            (out.counter if type_ == COUNTER else out.gauge)(
                family, f"{base} (ringlog role figure)", names + ("key",), labels + (key,),
                value)
    for name, histogram in sorted(s.histograms.items()):
        base, _, key = name.partition(":")
        out.histogram("ringlog_" + snake(base), f"{base} (ringlog role histogram)",
                      names + ("key",), labels + (key,), histogram)
        if broker and base == "request-latency-ms":
            out.histogram("kafka_network_requestmetrics_totaltimems", "Request time in the "
                          "broker, milliseconds (RequestMetrics TotalTimeMs)",
                          ids[0] + ("request",), ids[1] + (key,), histogram)
        elif not broker and base in CLIENT_LATENCY:
            count = histogram.count
            for suffix, value in (("_avg", histogram.total / count if count else 0.0),
                                  ("_max", histogram.max)):
                out.gauge(CLIENT_LATENCY[base] + suffix, f"{base} {suffix[1:]} (Kafka "
                          f"client metric)", *ids, value)


def _typed(prefix, name):
    """(type, family) of a figure: ``-total`` names are counters (the suffix goes: the
    exposition adds ``_total``), others gauges."""
    if name.endswith("-total"):
        return COUNTER, prefix + snake(name[:-len("-total")])
    return GAUGE, prefix + snake(name)


def _add(out, type_, family, help_text, ids, key, key_label, value):
    """One sample of a role figure; ``key`` (the part after a colon) as label
    ``key_label`` when there is one."""
    names, values = ids
    if key:
        names, values = names + (key_label,), values + (key,)
    (out.counter if type_ == COUNTER else out.gauge)(family, help_text, names, values, value)


def _pause_histogram(g):
    return Histogram(GC_PAUSE_BOUNDS, g.pause_histogram, g.pause_total, g.pause_max)


class PagesCollector:
    """A prometheus_client collector reading the pages at each scrape (``read()`` returns
    the snapshots)."""

    def __init__(self, read):
        self._read = read

    def collect(self):
        return families(self._read())
