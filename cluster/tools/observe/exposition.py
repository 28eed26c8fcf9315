"""The stats pages as Prometheus metric families, named after Kafka's JMX metrics.

Names follow what the Prometheus JMX exporter's Kafka rules make of Kafka's MBeans
(lower case; ``...PerSec`` meters become ``_total`` counters), so dashboards and alerts
written for Kafka find them:

- brokers (label ``broker_id``, ``pid``): ``kafka_server_brokertopicmetrics_messagesin_total``,
  ``..._bytesin_total``, ``..._bytesout_total`` (BrokerTopicMetrics MessagesInPerSec,
  BytesInPerSec, BytesOutPerSec); ``kafka_network_requestmetrics_requests_total`` and the
  histogram ``kafka_network_requestmetrics_totaltimems`` per ``request`` (RequestMetrics
  RequestsPerSec, TotalTimeMs); ``kafka_server_replicamanager_underreplicatedpartitions``,
  ``..._partitioncount``, ``..._leadercount`` (ReplicaManager);
  ``kafka_controller_kafkacontroller_offlinepartitionscount`` (KafkaController
  OfflinePartitionsCount, where Kafka has it).
- producers (label ``client_id``, ``pid``): ``kafka_producer_producer_metrics_*``
  (producer-metrics: record-send-total, outgoing-byte-total, buffer-available-bytes,
  buffer-total-bytes, waiting-threads, request-latency-avg/max).
- consumers: ``kafka_consumer_consumer_fetch_manager_metrics_*`` (records-consumed-total,
  bytes-consumed-total, records-lag-max, fetch-latency-avg/max).
- every process (labels ``role``, ``name``, ``pid``): ``ringlog_process_*`` (resident,
  unique and proportional memory in bytes, CPU seconds by mode, context switches by kind,
  threads, start time, alive and stale as 0/1), ``ringlog_gc_*`` per ``generation``
  (collections, collected and uncollectable objects, pause time as a histogram in seconds,
  longest pause), ``ringlog_request_latency_ms`` per ``request``, and every role counter
  with no Kafka name as ``ringlog_<name>`` (``-total`` ones as counters, others gauges).

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
from cluster.tools.observe.rows import REQUEST_LATENCY

PROCESS_LABELS = ("role", "name", "pid")
BROKER_LABELS = ("broker_id", "pid")
CLIENT_LABELS = ("client_id", "pid")
COUNTER, GAUGE = "counter", "gauge"

#: Role counters with a Kafka name, per kind of role: page name -> (family, type, help).
KAFKA_NAMES = {
    "broker": {
        "records-in-total": ("kafka_server_brokertopicmetrics_messagesin", COUNTER,
                             "Records appended (BrokerTopicMetrics MessagesInPerSec)"),
        "bytes-in-total": ("kafka_server_brokertopicmetrics_bytesin", COUNTER,
                           "Bytes received from clients (BrokerTopicMetrics BytesInPerSec)"),
        "bytes-out-total": ("kafka_server_brokertopicmetrics_bytesout", COUNTER,
                            "Bytes sent to clients (BrokerTopicMetrics BytesOutPerSec)"),
        "under-replicated-partitions": (
            "kafka_server_replicamanager_underreplicatedpartitions", GAUGE,
            "Led partitions whose ISR is smaller than their replicas (ReplicaManager)"),
        "partition-count": ("kafka_server_replicamanager_partitioncount", GAUGE,
                            "Partitions with a replica on the broker (ReplicaManager)"),
        "leader-count": ("kafka_server_replicamanager_leadercount", GAUGE,
                         "Partitions the broker leads (ReplicaManager)"),
        "offline-partitions-count": ("kafka_controller_kafkacontroller_offlinepartitionscount",
                                     GAUGE, "Partitions without a leader (KafkaController)"),
    },
    "producer": {
        "records-out-total": ("kafka_producer_producer_metrics_record_send", COUNTER,
                              "Records sent (producer-metrics record-send-total)"),
        "bytes-out-total": ("kafka_producer_producer_metrics_outgoing_byte", COUNTER,
                            "Bytes sent (producer-metrics outgoing-byte-total)"),
        "buffer-available-bytes": ("kafka_producer_producer_metrics_buffer_available_bytes",
                                   GAUGE, "BufferPool bytes free (producer-metrics)"),
        "buffer-total-bytes": ("kafka_producer_producer_metrics_buffer_total_bytes", GAUGE,
                               "BufferPool size, buffer.memory (producer-metrics)"),
        "waiting-threads": ("kafka_producer_producer_metrics_waiting_threads", GAUGE,
                            "Threads blocked on the BufferPool (producer-metrics)"),
    },
    "consumer": {
        "records-in-total": ("kafka_consumer_consumer_fetch_manager_metrics_records_consumed",
                             COUNTER, "Records consumed (consumer-fetch-manager-metrics)"),
        "bytes-in-total": ("kafka_consumer_consumer_fetch_manager_metrics_bytes_consumed",
                           COUNTER, "Bytes consumed (consumer-fetch-manager-metrics)"),
        "records-lag-max": ("kafka_consumer_consumer_fetch_manager_metrics_records_lag_max",
                            GAUGE, "Largest lag in records over the assigned partitions "
                                   "(consumer-fetch-manager-metrics)"),
    },
}
#: Client request latency as Kafka's client gauges: kind -> (family prefix, which requests).
CLIENT_LATENCY = {
    "producer": ("kafka_producer_producer_metrics_request_latency", None),
    "consumer": ("kafka_consumer_consumer_fetch_manager_metrics_fetch_latency", "Fetch"),
}


def kind(role):
    """Which Kafka metrics a role has: ``broker``, ``producer``, ``consumer`` or None."""
    if role == "broker":
        return "broker"
    if role.endswith("producer"):
        return "producer"
    if role.endswith("consumer") or role in ("bridge", "spark-reader"):
        return "consumer"
    return None


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
    which = kind(s.role)
    kafka_names = KAFKA_NAMES.get(which, {})
    id_labels = (BROKER_LABELS, (broker_id(s), str(s.pid))) if which == "broker" else (
        CLIENT_LABELS, (s.name, str(s.pid)))
    for name, value in sorted(s.counters.items()):
        if name in kafka_names:
            family, kind_of, help_text = kafka_names[name]
            add = out.counter if kind_of == COUNTER else out.gauge
            add(family, help_text, *id_labels, value)
        elif name.endswith("-total"):
            out.counter("ringlog_" + snake(name[:-len("-total")]), f"{name} (role counter)",
                        names, labels, value)
        else:
            out.gauge("ringlog_" + snake(name), f"{name} (role gauge)", names, labels, value)
    for name, histogram in sorted(s.histograms.items()):
        base, _, request = name.partition(":")
        if base == REQUEST_LATENCY:
            _request_latency(out, s, which, id_labels, request, histogram)
        else:
            out.histogram("ringlog_" + snake(base), name.split(":")[0], names + ("key",),
                          labels + (request,), histogram)


def _pause_histogram(g):
    return Histogram(GC_PAUSE_BOUNDS, g.pause_histogram, g.pause_total, g.pause_max)


def _request_latency(out, s, which, id_labels, request, histogram):
    labels = (s.role, s.name, str(s.pid), request)
    out.histogram("ringlog_request_latency_ms", "Request latency, milliseconds",
                  PROCESS_LABELS + ("request",), labels, histogram)
    if which == "broker":
        names, values = id_labels
        out.counter("kafka_network_requestmetrics_requests", "Requests handled "
                    "(RequestMetrics RequestsPerSec)", names + ("request",),
                    values + (request,), histogram.count)
        out.histogram("kafka_network_requestmetrics_totaltimems", "Request time in the "
                      "broker, milliseconds (RequestMetrics TotalTimeMs)",
                      names + ("request",), values + (request,), histogram)
    elif which in CLIENT_LATENCY:
        prefix, only = CLIENT_LATENCY[which]
        if only is not None and request != only:
            return
        names, values = id_labels
        if only is None:  # one gauge per request type
            names, values = names + ("request",), values + (request,)
        count = histogram.count
        out.gauge(prefix + "_avg", "Average request latency, ms", names, values,
                  histogram.total / count if count else 0.0)
        out.gauge(prefix + "_max", "Longest request latency, ms", names, values,
                  histogram.max)


class PagesCollector:
    """A prometheus_client collector reading the pages at each scrape (``read()`` returns
    the snapshots)."""

    def __init__(self, read):
        self._read = read

    def collect(self):
        return families(self._read())
