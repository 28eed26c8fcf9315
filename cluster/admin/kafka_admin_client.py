"""KafkaAdminClient: create, delete, list and describe topics; add partitions; configs;
consumer groups; transactions.

::

    admin = KafkaAdminClient(bootstrap_servers=data_dir)
    admin.create_topics([NewTopic("app-logs", num_partitions=6, replication_factor=1)])
    admin.describe_topics(["app-logs"])   # leader, replicas, isr per partition
    admin.create_partitions({"app-logs": NewPartitions(total_count=12)})
    admin.incremental_alter_configs([ConfigResource(ConfigResourceType.TOPIC, "app-logs",
                                                    {"retention.ms": "3600000"})])
    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "app-logs")])
    admin.perform_leader_election(ElectionType.PREFERRED, {"app-logs": [0, 1]})
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

Configs (kafka-python's ``ConfigResource``): ``describe_configs`` asks any broker for
topics and the cluster-wide broker default (name ``""``), and broker ``b`` for resource
``"b"``; ``alter_configs`` (AlterConfigs: the configs given replace the resource's dynamic
ones) and ``incremental_alter_configs`` (IncrementalAlterConfigs: only the keys given
change) go to the controller like the topic changes.

Leader elections (``perform_leader_election``, ElectLeaders, KIP-460) go to the controller
too: PREFERRED moves leadership back to each partition's first replica, UNCLEAN elects a
leader for partitions that have none, from outside the ISR if need be.

Consumer groups go to each group's coordinator, found with FindCoordinator (or given as
``group_coordinator_id``): ``list_consumer_groups`` (ListGroups at every broker),
``describe_consumer_groups`` (DescribeGroups; members' subscriptions and assignments decoded),
``list_consumer_group_offsets`` (OffsetFetch), ``delete_consumer_groups`` (DeleteGroups),
``alter_consumer_group_offsets`` (OffsetCommit with generation -1 and no member id, which a
coordinator takes only from an Empty group) and ``delete_consumer_group_offsets``
(OffsetDelete). COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS and
an unreachable coordinator make the client look the coordinator up again and resend, after
``retry_backoff_ms``; no attempt starts after the request timeout has passed since the first
(then KafkaTimeoutError naming the last error), each waiting up to the request timeout.

Transactions (KIP-664, what ``kafka-transactions.sh`` shows), named after Java's Admin:
``list_transactions`` (ListTransactions at every broker, each the coordinator of its
``__transaction_state`` partitions), ``describe_transactions`` (DescribeTransactions at
each id's coordinator, found with FindCoordinator key type 1, and retried as the group
requests are), ``describe_producers`` (DescribeProducers at each partition's leader, or
at a broker given: the producer state of its replica), ``abort_transaction`` (an ABORT
marker written by the partition's leader through WriteTxnMarkers, for a hanging
transaction). Results are ``cluster.structs``' TransactionListing, TransactionDescription
and ProducerState.

Thread safety: one thread at a time (it owns a KafkaClient).
"""
from __future__ import annotations

import datetime
import logging
import time

from cluster.client.kafka_client import API_VERSIONS, KafkaClient
from cluster.config import AdminClientConfig
from cluster.config.dynamic import AlterConfigOp, ConfigResourceType, config_string
from cluster.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    IllegalArgumentError,
    KafkaConnectionError,
    KafkaError,
    KafkaProtocolError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    NoBrokersAvailable,
    NotControllerError,
    NotCoordinatorError,
    NotLeaderForPartitionError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    for_code,
)
from cluster.protocol import consumer_protocol, frames as protocol
from cluster.protocol.consumer_protocol import NO_GENERATION
from cluster.protocol.frames import ApiKey, ElectionType
from cluster.structs import (
    ConsumerAssignment,
    ConsumerSubscription,
    GroupInformation,
    MemberInformation,
    OffsetAndMetadata,
    ProducerState,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)

log = logging.getLogger(__name__)

#: Seconds between two looks of ``wait_for_topics`` (kafka-python's).
_TOPIC_POLL = 0.1


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


class ConfigResource:
    """kafka-python's ``ConfigResource``: a topic or broker (``resource_type``: a
    ConfigResourceType, its int or its name) and ``configs``. For ``describe_configs``,
    ``configs`` is None (all) or the names wanted; for ``alter_configs`` ``{name: value}``;
    for ``incremental_alter_configs`` ``{name: value}`` (set), ``{name: None}`` (delete) or
    ``{name: (AlterConfigOp, value)}``. A broker's name is its id; ``""`` is the
    cluster-wide default."""

    def __init__(self, resource_type, name, configs=None):
        if isinstance(resource_type, str):
            resource_type = ConfigResourceType[resource_type.upper()]
        self.resource_type = ConfigResourceType(resource_type)
        self.name = str(name)
        self.configs = configs

    def __repr__(self):
        return (f"ConfigResource(resource_type={self.resource_type.name}, name={self.name!r}, "
                f"configs={self.configs!r})")


#: Errors after which a request to the controller is sent again (to a fresh controller).
_CONTROLLER_RETRY = (NotControllerError, KafkaConnectionError, RequestTimedOutError,
                     NoBrokersAvailable)

#: Errors after which a group request is sent again, to a coordinator looked up afresh.
_COORDINATOR_RETRY = (CoordinatorNotAvailableError, NotCoordinatorError,
                      CoordinatorLoadInProgressError, KafkaConnectionError,
                      RequestTimedOutError, NoBrokersAvailable)
_COORDINATOR_CODES = frozenset({CoordinatorNotAvailableError.errno, NotCoordinatorError.errno,
                                CoordinatorLoadInProgressError.errno})

#: FindCoordinator's key types: a group id, a transactional id.
GROUP_KEY, TRANSACTION_KEY = 0, 1
#: Kafka's transaction state names, as ListTransactions filters take them.
TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                      "CompleteAbort", "Dead", "PrepareEpochFence")

#: The protocol type of consumer groups, whose member metadata the consumer protocol reads.
CONSUMER_PROTOCOL_TYPE = "consumer"


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

    def create_topics(self, new_topics, timeout_ms=None, validate_only=False, raise_errors=True,
                      wait_for_metadata=False):
        """Create topics: a list of NewTopic (or of names, broker defaults), or a dict
        ``{name: {num_partitions, replication_factor, assignments, configs}}``.

        With ``wait_for_metadata`` (kafka-python 3's), return only once every topic created
        is in the metadata with a leader for each partition (``wait_for_topics``, its 10 s
        bound); not with ``validate_only`` (ValueError, as kafka-python).

        Returns ``{"topics": [{"name", "error_code", "error_message"}, ...]}``.
        """
        if validate_only and wait_for_metadata:
            raise ValueError("validate_only and wait_for_metadata are mutually exclusive")
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
        if wait_for_metadata:  # the ones created (raise_errors=False may leave failures)
            self.wait_for_topics([r["name"] for r in results if not r["error_code"]])
        return {"topics": results}

    def wait_for_topics(self, topic_names, timeout_ms=10000):
        """Block until each topic of ``topic_names`` is ready to use, as kafka-python 3's:
        described without error, with a leader for every partition (CreateTopics answers
        once the controller has the topic; the leaders may come a moment later). Polls
        ``describe_topics`` every 0.1 s; KafkaTimeoutError after ``timeout_ms`` naming what
        each topic still lacks (``{'t': 'p1=no leader'}``)."""
        names = list(topic_names)
        if not names:
            return
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            try:
                described = {t["name"]: t for t in self.describe_topics(names)}
            except KafkaError as exc:  # not there yet
                log.debug("describe_topics while waiting for %s: %s", names, exc)
                described = {}
            pending = {name: reason for name in names
                       if (reason := _not_ready(described.get(name))) is not None}
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"Topics not ready after {timeout_ms}ms: {pending}")
            time.sleep(_TOPIC_POLL)

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

    # -- configs ---------------------------------------------------------------------------------

    def describe_configs(self, config_resources, include_synonyms=False, raise_errors=True):
        """The configs of each ConfigResource: a list of ``{"error_code", "error_message",
        "resource_type", "resource_name", "configs": [{"name", "value", "read_only",
        "config_source", "is_sensitive", "synonyms": [{"name", "value", "source"}]}]}``,
        in request order (sources: ``cluster.config.dynamic.ConfigSource`` ids)."""
        m = protocol.request_module(ApiKey.DESCRIBE_CONFIGS,
                                    API_VERSIONS[ApiKey.DESCRIBE_CONFIGS])
        results = []
        for resource in config_resources:
            node = None  # any broker; a broker resource goes to that broker
            if resource.resource_type == ConfigResourceType.BROKER and resource.name.isdigit():
                node = int(resource.name)
            wanted = None if resource.configs is None else tuple(resource.configs)
            request = m.DescribeConfigsRequest(
                resources=(m.DescribeConfigsResource(
                    resource_type=int(resource.resource_type), resource_name=resource.name,
                    configuration_keys=wanted),),
                include_synonyms=include_synonyms)
            for r in self._request(request, node).results:
                results.append({
                    "error_code": int(r.error_code), "error_message": r.error_message,
                    "resource_type": r.resource_type, "resource_name": r.resource_name,
                    "configs": [{
                        "name": c.name, "value": c.value, "read_only": c.read_only,
                        "config_source": c.config_source, "is_sensitive": c.is_sensitive,
                        "synonyms": [{"name": y.name, "value": y.value, "source": y.source}
                                     for y in c.synonyms]} for c in r.configs]})
        if raise_errors:
            _raise_first(results, _resource_label)
        return results

    def alter_configs(self, config_resources, validate_only=False, raise_errors=True):
        """AlterConfigs: each ConfigResource's ``configs`` ``{name: value}`` become its
        dynamic configs (the others are removed). Returns ``[{"error_code",
        "error_message", "resource_type", "resource_name"}]``."""
        m = protocol.request_module(ApiKey.ALTER_CONFIGS, API_VERSIONS[ApiKey.ALTER_CONFIGS])
        resources = tuple(m.AlterConfigsResource(
            resource_type=int(r.resource_type), resource_name=r.name,
            configs=tuple(m.AlterableConfig(name=k, value=_config_value(v))
                          for k, v in (r.configs or {}).items()))
            for r in config_resources)
        return self._alter(m.AlterConfigsRequest(resources=resources,
                                                 validate_only=validate_only), raise_errors)

    def incremental_alter_configs(self, config_resources, validate_only=False,
                                  raise_errors=True):
        """IncrementalAlterConfigs: set, delete, append to or subtract from the keys in
        each ConfigResource's ``configs`` (class doc); the others stay. Returns as
        ``alter_configs``."""
        m = protocol.request_module(ApiKey.INCREMENTAL_ALTER_CONFIGS,
                                    API_VERSIONS[ApiKey.INCREMENTAL_ALTER_CONFIGS])
        resources = []
        for r in config_resources:
            configs = []
            for name, spec in (r.configs or {}).items():
                op, value = (spec if isinstance(spec, tuple) else
                             (AlterConfigOp.DELETE, None) if spec is None else
                             (AlterConfigOp.SET, spec))
                configs.append(m.AlterableConfig(name=name, config_operation=int(op),
                                                 value=_config_value(value)))
            resources.append(m.AlterConfigsResource(
                resource_type=int(r.resource_type), resource_name=r.name,
                configs=tuple(configs)))
        return self._alter(m.IncrementalAlterConfigsRequest(
            resources=tuple(resources), validate_only=validate_only), raise_errors)

    def _alter(self, request, raise_errors):
        response = self._to_controller(request, lambda r: r.responses, self._timeout)
        results = [{"error_code": int(r.error_code), "error_message": r.error_message,
                    "resource_type": r.resource_type, "resource_name": r.resource_name}
                   for r in response.responses]
        if raise_errors:
            _raise_first(results, _resource_label)
        return results

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

    # -- leader elections -----------------------------------------------------------------------

    def perform_leader_election(self, election_type, topic_partitions=None, timeout_ms=None,
                                raise_errors=True):
        """ElectLeaders: ``election_type`` an ElectionType (or 0 PREFERRED, 1 UNCLEAN) for
        ``topic_partitions``: ``{topic: [partition ids]}``, a list of topic names (all their
        partitions), or None (every partition of the cluster; the controller then leaves out
        those that need no election). Returns ``{"error_code", "replica_election_results":
        [{"topic", "partition_result": [{"partition_id", "error_code", "error_message"}]}]}``
        (kafka-python's ElectLeadersResponse fields). With ``raise_errors`` the first
        failed partition raises its error (ELECTION_NOT_NEEDED included, as kafka-python
        does); pass False to read each partition's outcome."""
        election_type = ElectionType(election_type)
        m = protocol.request_module(ApiKey.ELECT_LEADERS, API_VERSIONS[ApiKey.ELECT_LEADERS])
        if topic_partitions is not None and not isinstance(topic_partitions, dict):
            topic_partitions = {t["name"]: [p["partition_index"] for p in t["partitions"]]
                                for t in self.describe_topics(list(topic_partitions))}
        timeout = self._timeout_of(timeout_ms)
        request = m.ElectLeadersRequest(
            election_type=int(election_type), timeout=_delta(timeout),
            topic_partitions=None if topic_partitions is None else tuple(
                m.TopicPartitions(topic=topic, partitions=tuple(partitions))
                for topic, partitions in topic_partitions.items()))
        response = self._to_controller(
            request, lambda r: (r, *(p for t in r.replica_election_results
                                     for p in t.partition_result)), timeout)
        result = {"error_code": int(response.error_code), "replica_election_results": [
            {"topic": t.topic, "partition_result": [
                {"partition_id": p.partition_id, "error_code": int(p.error_code),
                 "error_message": p.error_message} for p in t.partition_result]}
            for t in response.replica_election_results]}
        if raise_errors:
            if result["error_code"]:
                error = for_code(result["error_code"])
                raise error(f"ElectLeaders ({election_type.name}): {error.description}")
            _raise_first([{"name": f"{t['topic']}-{p['partition_id']}", **p}
                          for t in result["replica_election_results"]
                          for p in t["partition_result"]], _partition_label)
        if result["replica_election_results"]:
            self._client.cluster.request_update()
        return result

    # -- consumer groups -------------------------------------------------------------------------

    def find_coordinator(self, group_id):
        """FindCoordinator for ``group_id``: ``{"node_id", "host", "port"}`` of the broker
        leading the group's ``__consumer_offsets`` partition. COORDINATOR_NOT_AVAILABLE,
        NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS and connection trouble are retried
        after ``retry_backoff_ms`` until the request timeout (then KafkaTimeoutError); other
        errors raise their class."""
        return self._find_coordinator(group_id, GROUP_KEY)

    def _find_coordinator(self, key, key_type):
        """``find_coordinator`` of a group (``GROUP_KEY``) or a transactional id
        (``TRANSACTION_KEY``)."""
        m = protocol.request_module(ApiKey.FIND_COORDINATOR,
                                    API_VERSIONS[ApiKey.FIND_COORDINATOR])
        request = m.FindCoordinatorRequest(key=key, key_type=key_type)
        deadline = self._clock() + self._timeout
        while True:
            try:
                response = self._client.request(self._any_broker(), request, self._timeout)
                _raise_group_error(_key_label(key, key_type), int(response.error_code),
                                   response.error_message)
                return {"node_id": response.node_id, "host": response.host,
                        "port": response.port}
            except _COORDINATOR_RETRY as exc:
                self._pause_or_raise(deadline, exc)

    def list_consumer_groups(self, broker_ids=None):
        """ListGroups sent to each broker of ``broker_ids`` (None: every live broker); a
        list of ``(group_id, protocol_type)`` tuples, each group once, sorted (kafka-python's
        result). A broker's error raises its class (COORDINATOR_LOAD_IN_PROGRESS is retried
        until the request timeout)."""
        m = protocol.request_module(ApiKey.LIST_GROUPS, API_VERSIONS[ApiKey.LIST_GROUPS])
        if broker_ids is None:
            broker_ids = [b["node_id"] for b in self.describe_cluster()["brokers"]]
        groups = set()
        for broker_id in broker_ids:
            deadline = self._clock() + self._timeout
            while True:
                try:
                    response = self._request(m.ListGroupsRequest(), broker_id)
                    _raise_group_error(f"ListGroups at broker {broker_id}",
                                       int(response.error_code), None)
                    break
                except _COORDINATOR_RETRY as exc:
                    self._pause_or_raise(deadline, exc)
            groups.update((g.group_id, g.protocol_type) for g in response.groups)
        return sorted(groups)

    def describe_consumer_groups(self, group_ids, group_coordinator_id=None,
                                 include_authorized_operations=False):
        """DescribeGroups, each group at its coordinator (or at ``group_coordinator_id``):
        a list of ``cluster.structs.GroupInformation`` in the order of ``group_ids``. A group
        the coordinator does not know is described as state ``Dead`` with no members, as
        Kafka answers. A group's error code raises its class."""
        m = protocol.request_module(ApiKey.DESCRIBE_GROUPS, API_VERSIONS[ApiKey.DESCRIBE_GROUPS])
        described = []
        for group_id in group_ids:
            _, response = self._to_coordinator(
                group_id, group_coordinator_id,
                m.DescribeGroupsRequest(
                    groups=(group_id,),
                    include_authorized_operations=include_authorized_operations),
                lambda r: [g.error_code for g in r.groups])
            for g in response.groups:
                _raise_group_error(f"group {g.group_id!r}", int(g.error_code), None)
                consumer = g.protocol_type == CONSUMER_PROTOCOL_TYPE
                described.append(GroupInformation(
                    error_code=int(g.error_code), group=g.group_id, state=g.group_state,
                    protocol_type=g.protocol_type, protocol=g.protocol_data,
                    members=[MemberInformation(
                        member_id=member.member_id, client_id=member.client_id,
                        client_host=member.client_host,
                        member_metadata=(_subscription(member.member_metadata) if consumer
                                         else member.member_metadata),
                        member_assignment=(_assignment(member.member_assignment) if consumer
                                           else member.member_assignment),
                        group_instance_id=member.group_instance_id)
                        for member in g.members],
                    authorized_operations=g.authorized_operations))
        return described

    def list_consumer_group_offsets(self, group_id, group_coordinator_id=None,
                                    partitions=None):
        """OffsetFetch: the group's committed offsets, ``{TopicPartition:
        OffsetAndMetadata(offset, metadata, leader_epoch)}``. ``partitions`` (TopicPartitions)
        None asks for every partition with a committed offset; asked-for partitions without
        one come back with offset -1 (kafka-python's result, unfiltered). An error (the
        group's or a partition's) raises its class."""
        m = protocol.request_module(ApiKey.OFFSET_FETCH, API_VERSIONS[ApiKey.OFFSET_FETCH])
        topics = None
        if partitions is not None:
            by_topic = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = tuple(m.OffsetFetchRequestTopic(name=t, partition_indexes=tuple(ps))
                           for t, ps in by_topic.items())
        _, response = self._to_coordinator(
            group_id, group_coordinator_id, m.OffsetFetchRequest(group_id=group_id,
                                                                 topics=topics),
            lambda r: [r.error_code])
        _raise_group_error(f"group {group_id!r}", int(response.error_code), None)
        offsets = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    error = for_code(int(p.error_code))
                    raise error(f"group {group_id!r}, partition {tp.topic}-{tp.partition}: "
                                f"{error.description}")
                offsets[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "",
                                                p.committed_leader_epoch)
        return offsets

    def delete_consumer_groups(self, group_ids, group_coordinator_id=None):
        """DeleteGroups, each group at its coordinator (or all at
        ``group_coordinator_id``): a list of ``(group_id, error class)`` (``NoError`` for a
        deleted group; NON_EMPTY_GROUP for one with members, GROUP_ID_NOT_FOUND for an
        unknown one), as kafka-python returns."""
        m = protocol.request_module(ApiKey.DELETE_GROUPS, API_VERSIONS[ApiKey.DELETE_GROUPS])
        results = []
        for group_id in group_ids:  # one request each: each follows its own coordinator
            _, response = self._to_coordinator(
                group_id, group_coordinator_id, m.DeleteGroupsRequest(groups_names=(group_id,)),
                lambda r: [g.error_code for g in r.results])
            results.extend((g.group_id, for_code(int(g.error_code))) for g in response.results)
        return results

    def alter_consumer_group_offsets(self, group_id, offsets, group_coordinator_id=None):
        """OffsetCommit as an admin does (generation -1, member id ""): ``offsets``
        ``{TopicPartition: OffsetAndMetadata or int}`` become the group's committed offsets.
        The coordinator accepts that only while the group is Empty (or unknown: it is
        created Empty); for a group with members each partition fails
        (UNKNOWN_MEMBER_ID). Returns ``{TopicPartition: error class}`` (``NoError`` when
        committed), like kafka-python's ``alter_group_offsets``."""
        if not offsets:
            return {}
        m = protocol.request_module(ApiKey.OFFSET_COMMIT, API_VERSIONS[ApiKey.OFFSET_COMMIT])
        by_topic = {}
        for tp, value in offsets.items():
            if isinstance(value, int):
                value = OffsetAndMetadata(value)
            by_topic.setdefault(tp.topic, []).append(m.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=value.offset,
                committed_leader_epoch=-1 if value.leader_epoch is None else value.leader_epoch,
                committed_metadata=value.metadata or ""))
        request = m.OffsetCommitRequest(
            group_id=group_id, generation_id_or_member_epoch=NO_GENERATION, member_id="",
            group_instance_id=None,
            topics=tuple(m.OffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                         for t, ps in by_topic.items()))
        _, response = self._to_coordinator(
            group_id, group_coordinator_id, request,
            lambda r: [p.error_code for t in r.topics for p in t.partitions])
        return {TopicPartition(t.name, p.partition_index): for_code(int(p.error_code))
                for t in response.topics for p in t.partitions}

    def delete_consumer_group_offsets(self, group_id, partitions, group_coordinator_id=None):
        """OffsetDelete: remove the group's committed offsets of ``partitions``
        (TopicPartitions). Returns ``{TopicPartition: error class}`` (GROUP_SUBSCRIBED_TO_TOPIC
        for a topic the group's members consume); a group-level error (GROUP_ID_NOT_FOUND,
        NON_EMPTY_GROUP...) raises its class, as kafka-python's ``delete_group_offsets``."""
        partitions = list(partitions)
        if not partitions:
            return {}
        m = protocol.request_module(ApiKey.OFFSET_DELETE, API_VERSIONS[ApiKey.OFFSET_DELETE])
        by_topic = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(
                m.OffsetDeleteRequestPartition(partition_index=tp.partition))
        request = m.OffsetDeleteRequest(
            group_id=group_id, topics=tuple(m.OffsetDeleteRequestTopic(name=t,
                                                                       partitions=tuple(ps))
                                            for t, ps in by_topic.items()))
        _, response = self._to_coordinator(group_id, group_coordinator_id, request,
                                           lambda r: [r.error_code])
        _raise_group_error(f"group {group_id!r}", int(response.error_code), None)
        return {TopicPartition(t.name, p.partition_index): for_code(int(p.error_code))
                for t in response.topics for p in t.partitions}

    # -- transactions ----------------------------------------------------------------------------

    def list_transactions(self, state_filter=None, producer_id_filter=None,
                          duration_filter_ms=None, broker_ids=None):
        """ListTransactions at each broker of ``broker_ids`` (None: every live broker, as
        Java's ``listTransactions``): a list of TransactionListing sorted by transactional
        id, each with the broker that coordinates it. Filters (Java's
        ``ListTransactionsOptions``): ``state_filter`` Kafka's state names (``Ongoing``
        ...; one the broker does not know raises IllegalArgumentError naming it),
        ``producer_id_filter`` producer ids, ``duration_filter_ms`` only transactions
        running longer than that. COORDINATOR_LOAD_IN_PROGRESS is retried until the
        request timeout; another error raises its class."""
        m = protocol.request_module(ApiKey.LIST_TRANSACTIONS,
                                    API_VERSIONS[ApiKey.LIST_TRANSACTIONS])
        request = m.ListTransactionsRequest(
            state_filters=tuple(state_filter or ()),
            producer_id_filters=tuple(producer_id_filter or ()),
            duration_filter=-1 if duration_filter_ms is None else duration_filter_ms)
        if broker_ids is None:
            broker_ids = [b["node_id"] for b in self.describe_cluster()["brokers"]]
        listed = []
        for broker_id in broker_ids:
            deadline = self._clock() + self._timeout
            while True:
                try:
                    response = self._request(request, broker_id)
                    _raise_group_error(f"ListTransactions at broker {broker_id}",
                                       int(response.error_code), None)
                    break
                except (CoordinatorLoadInProgressError, *_CONTROLLER_RETRY) as exc:
                    self._pause_or_raise(deadline, exc)
            if response.unknown_state_filters:
                raise IllegalArgumentError(
                    f"unknown transaction state(s) {list(response.unknown_state_filters)}; "
                    f"Kafka's are {TRANSACTION_STATES}")
            listed.extend(TransactionListing(s.transactional_id, s.producer_id,
                                             s.transaction_state, broker_id)
                          for s in response.transaction_states)
        return sorted(listed)

    def describe_transactions(self, transactional_ids):
        """DescribeTransactions, each id at its coordinator (FindCoordinator with key type
        1): ``{transactional_id: TransactionDescription}`` in the order given. An id's error
        raises its class naming the id (TransactionalIdNotFoundError for an id no
        coordinator holds); NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS are retried
        until the request timeout."""
        m = protocol.request_module(ApiKey.DESCRIBE_TRANSACTIONS,
                                    API_VERSIONS[ApiKey.DESCRIBE_TRANSACTIONS])
        described = {}
        for transactional_id in transactional_ids:
            node, response = self._to_coordinator(
                transactional_id, None,
                m.DescribeTransactionsRequest(transactional_ids=(transactional_id,)),
                lambda r: [s.error_code for s in r.transaction_states], TRANSACTION_KEY)
            for s in response.transaction_states:
                _raise_group_error(f"transactional id {s.transactional_id!r}",
                                   int(s.error_code), None)
                described[s.transactional_id] = TransactionDescription(
                    coordinator_id=node, state=s.transaction_state, producer_id=s.producer_id,
                    producer_epoch=s.producer_epoch,
                    transaction_timeout_ms=round(s.transaction_timeout.total_seconds() * 1000),
                    transaction_start_time_ms=(None if s.transaction_start_time < 0
                                               else s.transaction_start_time),
                    topic_partitions=frozenset(TopicPartition(t.topic, p) for t in s.topics
                                               for p in t.partitions))
        return described

    def end_transaction(self, transactional_id, producer_id, producer_epoch, committed):
        """ringlog's: EndTxn for a transaction another process opened and prepared
        (``KafkaProducer.prepare_transaction``): commit (``committed``) or abort it at its
        coordinator, as the producer itself would (Flink's ``resumeTransaction`` then
        ``commitTransaction``). Ending a transaction that already ended the same way is a
        success (the coordinator answers NONE), so a commit may be repeated after a crash.
        CONCURRENT_TRANSACTIONS (the previous end still writing its markers) and a moved
        coordinator are retried until the request timeout; PRODUCER_FENCED (a newer
        producer took the id), INVALID_TXN_STATE (it ended the other way, e.g. aborted by
        its timeout) and INVALID_PRODUCER_ID_MAPPING raise their class naming the id."""
        m = protocol.request_module(ApiKey.END_TXN, API_VERSIONS[ApiKey.END_TXN])
        request = m.EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id,
                                  producer_epoch=producer_epoch, committed=committed)
        what = (f"EndTxn({'commit' if committed else 'abort'}) of transactional id "
                f"{transactional_id!r} (producer id {producer_id}, epoch {producer_epoch})")
        deadline = self._clock() + self._timeout
        while True:
            _, response = self._to_coordinator(transactional_id, None, request,
                                               lambda r: [r.error_code], TRANSACTION_KEY)
            code = int(response.error_code)
            if not code:
                return
            error = for_code(code)(f"{what}: {for_code(code).description}")
            if not isinstance(error, ConcurrentTransactionsError):
                raise error
            self._pause_or_raise(deadline, error)

    def describe_producers(self, partitions, broker_id=None):
        """DescribeProducers for ``partitions`` (TopicPartitions), at each partition's
        leader or at ``broker_id`` (any replica; Java's ``DescribeProducersOptions``):
        ``{TopicPartition: [ProducerState]}`` sorted by producer id. A partition's error
        raises its class naming it (UnknownTopicOrPartitionError for a topic or partition
        that does not exist, NotLeaderForPartitionError for a broker without a replica);
        a moved leader is followed (``_at_leaders``)."""
        m = protocol.request_module(ApiKey.DESCRIBE_PRODUCERS,
                                    API_VERSIONS[ApiKey.DESCRIBE_PRODUCERS])

        def ask(node, tps):
            by_topic = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            response = self._request(m.DescribeProducersRequest(topics=tuple(
                m.TopicRequest(name=t, partition_indexes=tuple(ps))
                for t, ps in by_topic.items())), node)
            found = {}
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    _raise_partition_error(tp, node, int(p.error_code), p.error_message,
                                           broker_id is None)
                    found[tp] = sorted(_producer_state(s) for s in p.active_producers)
            return found

        return self._at_leaders(partitions, broker_id, ask)

    def abort_transaction(self, topic_partition, producer_id, producer_epoch,
                          coordinator_epoch):
        """Abort the open transaction of ``producer_id`` (at ``producer_epoch``) on
        ``topic_partition`` (Java's ``abortTransaction(AbortTransactionSpec)``): an ABORT
        marker written by the partition's leader (WriteTxnMarkers, as a coordinator sends
        it, with ``coordinator_epoch``), for a hanging transaction its coordinator does
        not know. INVALID_PRODUCER_EPOCH (the producer has a newer epoch) and
        TRANSACTION_COORDINATOR_FENCED (a newer coordinator wrote it a marker) raise their
        class naming the partition; a moved leader is followed (``_at_leaders``)."""
        m = protocol.request_module(ApiKey.WRITE_TXN_MARKERS,
                                    API_VERSIONS[ApiKey.WRITE_TXN_MARKERS])
        tp = TopicPartition(*topic_partition)
        request = m.WriteTxnMarkersRequest(markers=(m.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            topics=(m.WritableTxnMarkerTopic(name=tp.topic,
                                             partition_indexes=(tp.partition,)),),
            coordinator_epoch=coordinator_epoch),))

        def ask(node, tps):
            response = self._request(request, node)
            codes = {TopicPartition(t.name, p.partition_index): int(p.error_code)
                     for marker in response.markers for t in marker.topics
                     for p in t.partitions}
            if tp not in codes:
                raise KafkaProtocolError(f"broker {node} answered WriteTxnMarkers without "
                                         f"partition {tp.topic}-{tp.partition}")
            _raise_partition_error(tp, node, codes[tp], None, True)
            return {tp: None}

        self._at_leaders([tp], None, ask)

    def _at_leaders(self, partitions, broker_id, ask):
        """``{TopicPartition: result}`` of ``ask(node, [TopicPartition])`` (a dict of
        results for those partitions, raising a partition's error), asked at each
        partition's leader — or at ``broker_id`` — for ``partitions``. When a leader
        moved (NOT_LEADER_OR_FOLLOWER, no leader yet, unreachable), the leaders are looked
        up again and the rest asked again, until the request timeout; a broker given
        that has no replica raises NotLeaderForPartitionError at once."""
        pending = list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        done = {}
        deadline = self._clock() + self._timeout
        while pending:
            try:
                by_node = (self._leaders(pending) if broker_id is None
                           else {broker_id: pending})
                for node, tps in by_node.items():
                    done.update(ask(node, tps))
                    pending = [tp for tp in pending if tp not in done]
            except (NotLeaderForPartitionError, LeaderNotAvailableError,
                    *_CONTROLLER_RETRY) as exc:
                if broker_id is not None and isinstance(exc, NotLeaderForPartitionError):
                    raise
                self._client.cluster.request_update()
                self._pause_or_raise(deadline, exc)
        return {TopicPartition(*tp): done[TopicPartition(*tp)] for tp in partitions}

    def _leaders(self, partitions):
        """``{leader node id: [TopicPartition]}`` from a fresh Metadata response; a topic or
        partition that does not exist raises UnknownTopicOrPartitionError naming it, a
        partition without a leader LeaderNotAvailableError."""
        topics = {t.name: t for t in self._metadata(sorted({tp.topic for tp in partitions}))
                  .topics}
        by_node = {}
        for tp in partitions:
            t = topics.get(tp.topic)
            if t is None or t.error_code:
                error = for_code(UnknownTopicOrPartitionError.errno if t is None
                                 else int(t.error_code))
                raise error(f"topic {tp.topic!r}: {error.description}")
            leaders = {p.partition_index: p.leader_id for p in t.partitions}
            if tp.partition not in leaders:
                raise UnknownTopicOrPartitionError(
                    f"partition {tp.topic}-{tp.partition}: topic {tp.topic!r} has partitions "
                    f"0..{len(leaders) - 1}")
            if leaders[tp.partition] < 0:
                raise LeaderNotAvailableError(
                    f"partition {tp.topic}-{tp.partition} has no leader")
            by_node.setdefault(leaders[tp.partition], []).append(tp)
        return by_node

    def _any_broker(self):
        node = self._client.least_loaded_node()
        if node is None:
            raise NoBrokersAvailable(f"no broker of cluster {self._client.cluster_id} can be "
                                     f"reached")
        return node

    def _to_coordinator(self, group_id, coordinator_id, request, codes_of,
                        key_type=GROUP_KEY):
        """``(node, response)``: the response to ``request`` from the coordinator of
        ``group_id`` (a transactional id for ``key_type`` TRANSACTION_KEY) —
        ``coordinator_id``, or found by FindCoordinator. When it is not (or not yet) the
        coordinator — any of ``codes_of(response)`` is NOT_COORDINATOR,
        COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS — or cannot be reached, the
        coordinator is looked up again (unless given) and the request resent, until the
        request timeout."""
        deadline = self._clock() + self._timeout
        while True:
            try:
                node = (self._find_coordinator(group_id, key_type)["node_id"]
                        if coordinator_id is None else coordinator_id)
                response = self._client.request(node, request, self._timeout)
                for code in codes_of(response):
                    if int(code) in _COORDINATOR_CODES:
                        _raise_group_error(f"{_key_label(group_id, key_type)} at broker "
                                           f"{node}", int(code), None)
                return node, response
            except _COORDINATOR_RETRY as exc:
                self._pause_or_raise(deadline, exc)

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
        return self._request(request)

    def _request(self, request, node=None):
        """The response to ``request`` from broker ``node`` (None: any), retried on
        connection trouble until the request timeout."""
        deadline = self._clock() + self._timeout
        while True:
            target = self._client.least_loaded_node() if node is None else node
            try:
                if target is None:
                    raise NoBrokersAvailable(
                        f"no broker of cluster {self._client.cluster_id} can be reached")
                return self._client.request(target, request,
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


def _partition_label(result):
    return f"partition {result['name']}"


def _resource_label(result):
    if result["resource_type"] == ConfigResourceType.BROKER:
        name = result["resource_name"]
        return f"broker {name}" if name else "the cluster-wide broker default"
    return f"{_type_name(result['resource_type'])} {result['resource_name']!r}"


def _type_name(resource_type):
    try:
        return ConfigResourceType(resource_type).name.lower()
    except ValueError:
        return f"resource type {resource_type}"


def _config_value(value):
    if value is None or isinstance(value, str):
        return value
    return config_string(value)


def _not_ready(topic):
    """Why a described topic (a ``describe_topics`` dict, None if missing) is not ready to
    use, in kafka-python's words; None when it is."""
    if topic is None:
        return "missing from metadata response"
    if topic["error_code"]:
        return for_code(topic["error_code"]).__name__
    if not topic["partitions"]:
        return "no partitions reported"
    bad = [f"p{p['partition_index']}=" + (for_code(p["error_code"]).__name__
                                          if p["error_code"] else "no leader")
           for p in topic["partitions"] if p["error_code"] or p["leader_id"] < 0]
    return ",".join(bad) or None


def _raise_first(results, label=None):
    """Raise the error of the first failed topic, or resource (``label(result)`` names
    one), naming it (once: the broker's message may name it already) and the other
    failures."""
    failed = [r for r in results if r["error_code"]]
    if not failed:
        return
    first = failed[0]
    error = for_code(first["error_code"])
    name = f"topic {first['name']!r}" if label is None else label(first)
    detail = first.get("error_message") or error.description
    message = detail if name.lower() in detail.lower() else f"{name}: {detail}"  # named once
    if len(failed) > 1:
        message += "; also failed: " + ", ".join(
            f"{repr(r['name']) if label is None else label(r)} "
            f"({for_code(r['error_code']).message})" for r in failed[1:])
    raise error(message)


def _raise_group_error(what, code, message):
    """Raise the error class of ``code`` (unless 0), naming ``what`` (a group id...)."""
    if code:
        error = for_code(code)
        raise error(f"{what}: {message or error.description}")


def _key_label(key, key_type):
    """How an error names a FindCoordinator key."""
    return f"{'transactional id' if key_type == TRANSACTION_KEY else 'group'} {key!r}"


def _raise_partition_error(tp, node, code, message, at_leader):
    """Raise the error class of a partition's ``code`` (unless 0), naming the partition
    and the broker that answered."""
    if code:
        error = for_code(code)
        where = "its leader" if at_leader else "that broker"
        raise error(f"partition {tp.topic}-{tp.partition} at broker {node} ({where}): "
                    f"{message or error.description}")


def _producer_state(s):
    """A DescribeProducers ProducerState as ``cluster.structs.ProducerState`` (-1: None)."""
    return ProducerState(
        producer_id=s.producer_id, producer_epoch=s.producer_epoch,
        last_sequence=s.last_sequence, last_timestamp=s.last_timestamp,
        coordinator_epoch=None if s.coordinator_epoch < 0 else s.coordinator_epoch,
        current_transaction_start_offset=(None if s.current_txn_start_offset < 0
                                          else s.current_txn_start_offset))


def _subscription(data):
    """A member's JoinGroup metadata as a ConsumerSubscription; bytes that do not parse
    stay bytes (kafka-python keeps what it cannot decode)."""
    try:
        return ConsumerSubscription(*consumer_protocol.decode_subscription(data))
    except ValueError:
        return data


def _assignment(data):
    """A member's SyncGroup assignment as a ConsumerAssignment (raw bytes if unparsable)."""
    try:
        partitions, user_data = consumer_protocol.decode_assignment(data)
    except ValueError:
        return data
    return ConsumerAssignment(sorted(partitions.items()), user_data)
