"""DescribeConfigs v1-3: a topic's or a broker's configs, from this broker's metadata image.

Any broker describes a topic (its overrides are in the image) and the cluster-wide broker
default (resource name ``""``); a broker describes only itself by id — another id is
INVALID_REQUEST, as Kafka answers (clients send a broker resource to that broker). Values,
sources, synonyms and read-only flags are ``cluster.config.dynamic``'s, over this broker's
server.properties (``static_config``) and the image's dynamic broker configs. A topic that
does not exist is UNKNOWN_TOPIC_OR_PARTITION; a resource type other than TOPIC and BROKER
is INVALID_REQUEST. ``configuration_keys`` (null: all) picks configs by name; synonyms are
sent when ``include_synonyms`` asks (v1+); v3's config type is UNKNOWN (0) and its
documentation null.

Owner: the broker's loop thread.
"""
from __future__ import annotations

from cluster.config import dynamic
from cluster.config.dynamic import ConfigResourceType
from cluster.errors import (
    BrokerResponseError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.responses import NO_THROTTLE, build, error, module


class DescribeConfigsHandler:
    """DescribeConfigs for broker ``broker_id`` (``static_config``: its BrokerConfig as
    started) over ``metadata`` (BrokerMetadata)."""

    def __init__(self, broker_id, static_config, metadata):
        self._broker_id = broker_id
        self._static = static_config
        self._metadata = metadata

    def __call__(self, channel, header, request):
        classes = module(ApiKey.DESCRIBE_CONFIGS, header.request_api_version)
        results = []
        for resource in request.resources:
            try:
                entries = self.describe(resource.resource_type, resource.resource_name)
                code, message = 0, None
            except BrokerResponseError as exc:
                entries, code, message = [], exc.errno, exc.args[0]
            wanted = resource.configuration_keys
            results.append(build(
                classes.DescribeConfigsResult, error_code=error(code), error_message=message,
                resource_type=resource.resource_type, resource_name=resource.resource_name,
                configs=tuple(self._entry(classes, entry, request.include_synonyms)
                              for entry in entries if wanted is None or entry.name in wanted)))
        channel.send(protocol.encode_response(build(
            classes.DescribeConfigsResponse, throttle_time=NO_THROTTLE,
            results=tuple(results)), header.correlation_id))

    def describe(self, resource_type, name):
        """The ConfigEntry list of one resource, or the Kafka error why not."""
        image = self._metadata.image
        if resource_type == ConfigResourceType.TOPIC:
            info = image.topics.get(name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            return dynamic.describe_topic(self._static, image.broker_configs, self._broker_id,
                                          info.configs)
        if resource_type == ConfigResourceType.BROKER:
            broker_id = dynamic.broker_resource_id(name)
            if broker_id is None:
                return dynamic.describe_broker(self._static, image.broker_configs,
                                               self._broker_id, cluster_default=True)
            if broker_id != self._broker_id:
                raise InvalidRequestError(
                    f"Unexpected broker id, expected {self._broker_id} or empty string, but "
                    f"received {name}")
            return dynamic.describe_broker(self._static, image.broker_configs,
                                           self._broker_id)
        raise InvalidRequestError(
            f"resource type {resource_type} of resource {name!r} is not supported: ringlog "
            f"describes TOPIC (2) and BROKER (4) configs")

    @staticmethod
    def _entry(classes, entry, include_synonyms):
        synonyms = tuple(build(classes.DescribeConfigsSynonym, name=s.name, value=s.value,
                               source=int(s.source))
                         for s in entry.synonyms) if include_synonyms else ()
        return build(classes.DescribeConfigsResourceResult, name=entry.name, value=entry.value,
                     read_only=entry.read_only, config_source=int(entry.source),
                     is_sensitive=entry.sensitive, synonyms=synonyms, documentation=None)
