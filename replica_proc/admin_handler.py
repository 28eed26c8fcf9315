"""CreateTopics v2-4, DeleteTopics v1-3, CreatePartitions v0-1, AlterConfigs v0-1,
IncrementalAlterConfigs v0, ElectLeaders v0-1: the controller's work.

These change the cluster's metadata, which only the active controller writes. A broker
whose own ``Controller`` is active calls it (``create_topics`` / ``delete_topics`` /
``create_partitions`` / ``alter_configs`` / ``elect_leaders``, each returning ``{name:
(error_code, message)}``, a config resource's name being ``(resource_type, name)``, a
partition's ``(topic, partition)``) and then picks up
the image it just published, so its own new partitions are open before it answers. Any
other broker answers NOT_CONTROLLER for every topic, naming the controller; clients
retry there (Kafka's behaviour before request forwarding). ElectLeaders v1 carries that error,
or any other the whole request failed with, in its top-level ``error_code`` too: a request
for every partition (``topic_partitions`` null) has no partition to carry it.

Auto-creation (from Metadata) comes here too, and ``create_topic`` (the group coordinator's
``__consumer_offsets``): the local controller when active, else a CreateTopics forwarded to
the controller broker (``ControllerChannel``).

The request ``timeout`` is not waited on: the controller's changes are durable and
published when its call returns.

Owner: the broker's loop thread.
"""
from __future__ import annotations

import logging

from cluster.config.dynamic import AlterConfigOp
from cluster.errors import NotControllerError, TopicAlreadyExistsError
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey, ElectionType
from replica_proc.responses import NO_THROTTLE, build, code_of, error, module

log = logging.getLogger(__name__)


class AdminHandler:
    """The three admin APIs, and auto-creation, against ``controller`` (None: this broker
    never runs one). ``on_metadata_change()`` makes the broker apply the newest image;
    ``clock`` is the loop's monotonic seconds."""

    def __init__(self, broker_id, metadata, controller, forwarder, on_metadata_change, clock):
        self._broker_id = broker_id
        self._metadata = metadata
        self._controller = controller
        self._forwarder = forwarder
        self._on_metadata_change = on_metadata_change
        self._clock = clock

    def _active(self):
        return self._controller is not None and self._controller.active

    def _call(self, what, names, call):
        """``{name: (code, message)}`` from the controller's ``call()``, or the same error
        for every name when there is no active controller here or the call failed."""
        return self._call_with_error(what, names, call)[1]

    def _call_with_error(self, what, names, call):
        """``(error, results)``: ``_call``'s results and ``(code, message)`` of the error
        given to every name (NO_ERROR when the call ran)."""
        if not self._active():
            controller_id = self._metadata.image.controller_id
            message = (f"broker {self._broker_id} is not the active controller; the "
                       f"controller is broker {controller_id}" if controller_id >= 0 else
                       f"broker {self._broker_id} is not the active controller; no broker "
                       f"is yet")
            failure = (NotControllerError.errno, message)
            return failure, {name: failure for name in names}
        try:
            results = call()
        except Exception as exc:
            failure = (code_of(exc, what), str(exc))
            return failure, {name: failure for name in names}
        self._on_metadata_change()
        return (0, None), results

    # -- the APIs ---------------------------------------------------------------------------

    def create_topics(self, channel, header, request):
        classes = module(ApiKey.CREATE_TOPICS, header.request_api_version)
        specs = [{
            "name": t.name, "num_partitions": t.num_partitions,
            "replication_factor": t.replication_factor,
            "assignments": {a.partition_index: list(a.broker_ids) for a in t.assignments},
            "configs": {c.name: c.value for c in t.configs},
        } for t in request.topics]
        names = list(dict.fromkeys(spec["name"] for spec in specs))
        results = self._call("CreateTopics", names, lambda: self._controller.create_topics(
            specs, request.validate_only))
        topics = tuple(build(classes.CreatableTopicResult, name=name,
                             error_code=error(results[name][0]),
                             error_message=results[name][1]) for name in names)
        self._send(channel, header, build(classes.CreateTopicsResponse,
                                          throttle_time=NO_THROTTLE, topics=topics))

    def delete_topics(self, channel, header, request):
        classes = module(ApiKey.DELETE_TOPICS, header.request_api_version)
        names = list(request.topic_names)
        results = self._call("DeleteTopics", names,
                             lambda: self._controller.delete_topics(names))
        unique = list(dict.fromkeys(names))
        self._send(channel, header, build(
            classes.DeleteTopicsResponse, throttle_time=NO_THROTTLE,
            responses=tuple(build(classes.DeletableTopicResult, name=name,
                                  error_code=error(results[name][0])) for name in unique)))

    def create_partitions(self, channel, header, request):
        classes = module(ApiKey.CREATE_PARTITIONS, header.request_api_version)
        asked = {t.name: (t.count, [list(a.broker_ids) for a in t.assignments]
                          if t.assignments else None) for t in request.topics}
        results = self._call("CreatePartitions", list(asked),
                             lambda: self._controller.create_partitions(
                                 asked, request.validate_only))
        self._send(channel, header, build(
            classes.CreatePartitionsResponse, throttle_time=NO_THROTTLE,
            results=tuple(build(classes.CreatePartitionsTopicResult, name=name,
                                error_code=error(results[name][0]),
                                error_message=results[name][1]) for name in asked)))

    def alter_configs(self, channel, header, request):
        """AlterConfigs: the configs given replace the resource's dynamic ones."""
        self._alter_configs(channel, header, request, ApiKey.ALTER_CONFIGS, [
            (r.resource_type, r.resource_name,
             [(c.name, AlterConfigOp.SET, c.value) for c in r.configs])
            for r in request.resources])

    def incremental_alter_configs(self, channel, header, request):
        self._alter_configs(channel, header, request, ApiKey.INCREMENTAL_ALTER_CONFIGS, [
            (r.resource_type, r.resource_name,
             [(c.name, c.config_operation, c.value) for c in r.configs])
            for r in request.resources])

    def _alter_configs(self, channel, header, request, api_key, resources):
        classes = module(api_key, header.request_api_version)
        keys = list(dict.fromkeys((int(t), name) for t, name, _ in resources))
        results = self._call(api_key.name, keys, lambda: self._controller.alter_configs(
            resources, request.validate_only, replace=api_key == ApiKey.ALTER_CONFIGS))
        self._send(channel, header, build(
            protocol.response_class(api_key, header.request_api_version),
            throttle_time=NO_THROTTLE,
            responses=tuple(build(classes.AlterConfigsResourceResponse,
                                  error_code=error(results[key][0]),
                                  error_message=results[key][1], resource_type=key[0],
                                  resource_name=key[1]) for key in keys)))

    def elect_leaders(self, channel, header, request):
        """ElectLeaders: v0 elects preferred leaders, v1 says which election."""
        version = header.request_api_version
        classes = module(ApiKey.ELECT_LEADERS, version)
        election_type = request.election_type if version >= 1 else ElectionType.PREFERRED
        asked = None
        if request.topic_partitions is not None:
            asked = {}
            for topic in request.topic_partitions:
                asked.setdefault(topic.topic, []).extend(topic.partitions)
        keys = list(dict.fromkeys((topic, partition) for topic, partitions in
                                  (asked or {}).items() for partition in partitions))
        (top, _), results = self._call_with_error(
            "ElectLeaders", keys, lambda: self._controller.elect_leaders(election_type, asked))
        by_topic = {}
        for (topic, partition), (code, message) in results.items():
            by_topic.setdefault(topic, []).append(build(
                classes.PartitionResult, partition_id=partition, error_code=error(code),
                error_message=message))
        self._send(channel, header, build(
            classes.ElectLeadersResponse, throttle_time=NO_THROTTLE, error_code=error(top),
            replica_election_results=tuple(build(
                classes.ReplicaElectionResult, topic=topic, partition_result=tuple(parts))
                for topic, parts in by_topic.items())))

    @staticmethod
    def _send(channel, header, response):
        channel.send(protocol.encode_response(response, header.correlation_id))

    # -- auto-creation ----------------------------------------------------------------------

    def auto_create(self, names):
        """Create ``names`` with the broker defaults, without waiting for a remote
        controller (Metadata answers LEADER_NOT_AVAILABLE meanwhile)."""
        if self._active():
            results = self._call("auto-creation", names, lambda: self._controller.create_topics(
                [{"name": name} for name in names], False))
            for name, (code, message) in results.items():
                if code:
                    log.warning("auto-creation of topic %r failed: %s", name, message)
            return
        self._forwarder.create_topics(self._metadata.image.controller_id, names,
                                      self._clock())

    def create_topic(self, name, num_partitions, replication_factor, configs):
        """Create the topic ``name`` as given (``__consumer_offsets``: the group
        coordinator's), without waiting for a remote controller; TOPIC_ALREADY_EXISTS (a
        race with another broker) is no failure."""
        if self._active():
            results = self._call("creation", [name], lambda: self._controller.create_topics(
                [{"name": name, "num_partitions": num_partitions,
                  "replication_factor": replication_factor, "configs": configs}], False))
            code, message = results[name]
            if code and code != TopicAlreadyExistsError.errno:
                log.warning("creation of topic %r failed: %s", name, message)
            return
        self._forwarder.create_topics(self._metadata.image.controller_id, [name],
                                      self._clock(),
                                      {name: (num_partitions, replication_factor, configs)})
