"""KafkaAdminClient: create, delete, list and describe topics; add partitions.

::

    admin = KafkaAdminClient(bootstrap_servers=data_dir)
    admin.create_topics([NewTopic("app-logs", num_partitions=6, replication_factor=1)])
    admin.describe_topics(["app-logs"])   # leader, replicas, isr per partition
    admin.create_partitions({"app-logs": NewPartitions(total_count=12)})
    admin.delete_topics(["app-logs"])

kafka-python's method names, arguments and result shapes (dicts of the response fields).
Topic changes go to the controller — the broker the Metadata responses name as
``controller_id`` — and are retried there after a fresh Metadata request when a broker
answers NOT_CONTROLLER, when the controller is not known yet, or when it cannot be reached
(the controller moved or restarted), until ``timeout_ms``. With ``raise_errors`` (the
default) a per-topic error is raised as its ``cluster.errors`` class, its message naming
the topic and carrying the broker's message, e.g. ``TopicAlreadyExistsError: [Error 36]
TopicAlreadyExistsError: topic 'app-logs': Topic 'app-logs' already exists.``; the other
topics of the request were still handled by the broker.

Thread safety: one thread at a time (it owns a KafkaClient).
"""
from __future__ import annotations

import datetime
import time

from cluster.client.kafka_client import API_VERSIONS, KafkaClient
from cluster.config import AdminClientConfig
from cluster.errors import (
    IllegalArgumentError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoBrokersAvailable,
    NotControllerError,
    RequestTimedOutError,
    for_code,
)
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey


class NewTopic:
    """A topic to create: kafka-python's ``NewTopic``. ``num_partitions`` and
    ``replication_factor`` -1 take the brokers' defaults (``num.partitions``,
    ``default.replication.factor``); ``replica_assignments`` maps a partition id to its
    broker ids (then both counts stay -1); ``topic_configs`` maps Kafka topic config names
    to values."""

    def __init__(self, name, num_partitions=-1, replication_factor=-1,
                 replica_assignments=None, topic_configs=None):
        self.name = name
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignments = replica_assignments or {}
        self.topic_configs = topic_configs or {}

    def __repr__(self):
        return (f"NewTopic(name={self.name!r}, num_partitions={self.num_partitions}, "
                f"replication_factor={self.replication_factor}, replica_assignments="
                f"{self.replica_assignments!r}, topic_configs={self.topic_configs!r})")


class NewPartitions:
    """A new partition count for an existing topic: kafka-python's ``NewPartitions``.
    ``new_assignments``: one list of broker ids per added partition, or None."""

    def __init__(self, total_count, new_assignments=None):
        self.total_count = total_count
        self.new_assignments = new_assignments

    def __repr__(self):
        return (f"NewPartitions(total_count={self.total_count}, "
                f"new_assignments={self.new_assignments!r})")


#: Errors after which a request to the controller is sent again (to a fresh controller).
_CONTROLLER_RETRY = (NotControllerError, KafkaConnectionError, RequestTimedOutError,
                     NoBrokersAvailable)


class KafkaAdminClient:
    """Topic administration for one cluster (module doc). ``configs``: kafka-python's
    keyword arguments (``cluster.config.AdminClientConfig``); ``clock`` is for tests."""

    def __init__(self, *, clock=time.monotonic, **configs):
        self.config = AdminClientConfig(**configs)
        self._clock = clock
        self._timeout = self.config["request_timeout_ms"] / 1000
        self._backoff = self.config["retry_backoff_ms"] / 1000
        self._client = KafkaClient(self.config, clock=clock, allow_auto_topic_creation=False)
        self._closed = False
        try:
            self._client.wait_for_metadata(self._timeout)
        except BaseException:
            self._client.close()
            raise

    def close(self):
        """Close the connections; safe to call twice."""
        if not self._closed:
            self._closed = True
            self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    # -- topics ----------------------------------------------------------------------------------

    def create_topics(self, new_topics, timeout_ms=None, validate_only=False, raise_errors=True):
        """Create topics: a list of NewTopic (or of names, broker defaults), or a dict
        ``{name: {num_partitions, replication_factor, assignments, configs}}``.

        Returns ``{"topics": [{"name", "error_code", "error_message"}, ...]}``.
        """
        version = API_VERSIONS[ApiKey.CREATE_TOPICS]
        m = protocol.request_module(ApiKey.CREATE_TOPICS, version)
        topics = []
        for topic in _new_topics(new_topics):
            topics.append(m.CreatableTopic(
                name=topic.name, num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
                assignments=tuple(
                    m.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(ids))
                    for p, ids in sorted(topic.replica_assignments.items())),
                configs=tuple(m.CreatableTopicConfig(name=k, value=None if v is None else str(v))
                              for k, v in topic.topic_configs.items())))
        timeout = self._timeout_of(timeout_ms)
        request = m.CreateTopicsRequest(topics=tuple(topics), timeout=_delta(timeout),
                                        validate_only=validate_only)
        response = self._to_controller(request, lambda r: r.topics, timeout)
        results = [{"name": t.name, "error_code": int(t.error_code),
                    "error_message": t.error_message} for t in response.topics]
        if raise_errors:
            _raise_first(results)
        if not validate_only:
            self._client.cluster.request_update()
        return {"topics": results}

    def delete_topics(self, topics, timeout_ms=None, raise_errors=True):
        """Delete the named topics. Returns ``{"topics": [{"name", "error_code"}, ...]}``."""
        m = protocol.request_module(ApiKey.DELETE_TOPICS, API_VERSIONS[ApiKey.DELETE_TOPICS])
        timeout = self._timeout_of(timeout_ms)
        request = m.DeleteTopicsRequest(topic_names=tuple(topics), timeout=_delta(timeout))
        response = self._to_controller(request, lambda r: r.responses, timeout)
        results = [{"name": t.name, "error_code": int(t.error_code)}
                   for t in response.responses]
        if raise_errors:
            _raise_first(results)
        self._client.cluster.forget_topics([r["name"] for r in results if not r["error_code"]])
        return {"topics": results}

    def create_partitions(self, topic_partitions, timeout_ms=None, validate_only=False,
                          raise_errors=True):
        """Raise partition counts: ``{name: NewPartitions(total_count, new_assignments)}``
        (or ``{name: count}``). Returns ``{"results": [{"name", "error_code",
        "error_message"}, ...]}``."""
        version = API_VERSIONS[ApiKey.CREATE_PARTITIONS]
        m = protocol.request_module(ApiKey.CREATE_PARTITIONS, version)
        topics = []
        for name, spec in topic_partitions.items():
            if isinstance(spec, int):
                spec = NewPartitions(spec)
            assignments = None if spec.new_assignments is None else tuple(
                m.CreatePartitionsAssignment(broker_ids=tuple(ids))
                for ids in spec.new_assignments)
            topics.append(m.CreatePartitionsTopic(name=name, count=spec.total_count,
                                                  assignments=assignments))
        timeout = self._timeout_of(timeout_ms)
        request = m.CreatePartitionsRequest(topics=tuple(topics), timeout=_delta(timeout),
                                            validate_only=validate_only)
        response = self._to_controller(request, lambda r: r.results, timeout)
        results = [{"name": t.name, "error_code": int(t.error_code),
                    "error_message": t.error_message} for t in response.results]
        if raise_errors:
            _raise_first(results)
        self._client.cluster.request_update()
        return {"results": results}

    def list_topics(self):
        """Names of every topic in the cluster."""
        return [t.name for t in self._metadata(None).topics]

    def describe_topics(self, topics=None):
        """Describe topics (all when None) as kafka-python does: a list of dicts
        ``{"error_code", "name", "is_internal", "partitions": [{"error_code",
        "partition_index", "leader_id", "leader_epoch", "replica_nodes", "isr_nodes",
        "offline_replicas"}]}``. A topic that does not exist raises
        UnknownTopicOrPartitionError naming it."""
        response = self._metadata(None if topics is None else list(topics))
        described = []
        for t in response.topics:
            error = for_code(int(t.error_code))
            if t.error_code:
                raise error(f"topic {t.name!r}: {error.description}")
            described.append({
                "error_code": 0, "name": t.name, "is_internal": t.is_internal,
                "partitions": [{
                    "error_code": int(p.error_code), "partition_index": p.partition_index,
                    "leader_id": p.leader_id, "leader_epoch": p.leader_epoch,
                    "replica_nodes": list(p.replica_nodes), "isr_nodes": list(p.isr_nodes),
                    "offline_replicas": list(p.offline_replicas)}
                    for p in sorted(t.partitions, key=lambda p: p.partition_index)]})
        return described

    def describe_cluster(self):
        """``{"cluster_id", "controller_id", "brokers": [{"node_id", "host", "port",
        "rack"}]}`` from a fresh Metadata response."""
        response = self._metadata(())
        return {"cluster_id": response.cluster_id, "controller_id": response.controller_id,
                "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port,
                             "rack": b.rack} for b in response.brokers]}

    # -- requests --------------------------------------------------------------------------------

    def _timeout_of(self, timeout_ms):
        if timeout_ms is None:
            return self._timeout
        if timeout_ms < 0:
            raise IllegalArgumentError(f"timeout_ms must be >= 0, found {timeout_ms}")
        return timeout_ms / 1000

    def _metadata(self, topics):
        """A Metadata response for ``topics`` (names; None: all; (): none) from any broker,
        retried on connection trouble until the request timeout."""
        m = protocol.request_module(ApiKey.METADATA, API_VERSIONS[ApiKey.METADATA])
        request = m.MetadataRequest(
            topics=None if topics is None else tuple(m.MetadataRequestTopic(name=n)
                                                     for n in topics),
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False)
        deadline = self._clock() + self._timeout
        while True:
            node = self._client.least_loaded_node()
            try:
                if node is None:
                    raise NoBrokersAvailable(
                        f"no broker of cluster {self._client.cluster_id} can be reached")
                return self._client.request(node, request,
                                            max(0.0, deadline - self._clock()))
            except _CONTROLLER_RETRY as exc:
                self._pause_or_raise(deadline, exc)

    def _to_controller(self, request, results_of, timeout):
        """Send ``request`` to the controller; resend (to a fresh controller) while any topic
        says NOT_CONTROLLER or the controller cannot be reached, until ``timeout``."""
        client = self._client
        deadline = self._clock() + max(timeout, self._timeout)
        while True:
            try:
                controller = self._metadata(()).controller_id
                if controller < 0:
                    raise NotControllerError(
                        f"cluster {client.cluster_id} has no active controller yet")
                response = client.request(controller, request,
                                          max(0.0, deadline - self._clock()))
                if any(r.error_code == NotControllerError.errno for r in results_of(response)):
                    raise NotControllerError(
                        f"broker {controller} answered {type(request).__name__} with "
                        f"NOT_CONTROLLER")
                return response
            except _CONTROLLER_RETRY as exc:
                self._pause_or_raise(deadline, exc)

    def _pause_or_raise(self, deadline, exc):
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise KafkaTimeoutError(f"gave up after the request timeout: {exc}") from exc
        time.sleep(min(self._backoff, remaining))


def _new_topics(new_topics):
    if isinstance(new_topics, dict):
        return [NewTopic(name, spec.get("num_partitions", -1),
                         spec.get("replication_factor", -1), spec.get("assignments"),
                         spec.get("configs")) for name, spec in new_topics.items()]
    return [NewTopic(t) if isinstance(t, str) else t for t in new_topics]


def _delta(seconds):
    return datetime.timedelta(seconds=seconds)


def _raise_first(results):
    """Raise the error of the first failed topic, naming it (and the other failures)."""
    failed = [r for r in results if r["error_code"]]
    if not failed:
        return
    first = failed[0]
    error = for_code(first["error_code"])
    message = f"topic {first['name']!r}: {first.get('error_message') or error.description}"
    if len(failed) > 1:
        message += "; also failed: " + ", ".join(
            f"{r['name']!r} ({for_code(r['error_code']).message})" for r in failed[1:])
    raise error(message)
