"""Configuration of brokers and clients, with Kafka's names and defaults.

- Brokers (``cluster.config.broker``): ``BrokerConfig.load("server.properties", overrides=[...],
  data_dir=...)`` or ``BrokerConfig({"num.partitions": 3}, data_dir=...)``: Kafka's broker
  keys (``num.partitions``, ``log.segment.bytes``, ``log.retention.hours``, ...) plus
  ringlog's ``ringlog.*`` transport keys; unknown keys are logged and ignored, bad values
  raise ``InvalidConfigurationError``. ``config.log_config(topic_overrides)`` is the
  ``segments.log_config.LogConfig`` of a topic (broker defaults mapped to topic-level names,
  the topic's overrides on top).
- Clients (``cluster.config.client``): ``ProducerConfig(**kwargs)``, ``ConsumerConfig(**kwargs)``,
  ``AdminClientConfig(**kwargs)``: kafka-python's keyword arguments and defaults, Kafka's
  dotted spellings accepted too; unknown keys and bad values raise
  ``KafkaConfigurationError``.
- Properties files (``cluster.config.properties``): ``parse_properties``, ``load_properties``,
  ``parse_overrides`` read what Java's ``Properties.load`` and Kafka's ``--override`` read.

Every config is a read-only ``dict`` (``config[name]``), validated once when built.
"""
from __future__ import annotations

from cluster.config.broker import BROKER_KEYS, TOPIC_SYNONYMS, BrokerConfig
from cluster.config.client import AdminClientConfig, ClientConfig, ConsumerConfig, ProducerConfig
from cluster.config.properties import load_properties, parse_overrides, parse_properties

__all__ = [
    "BROKER_KEYS", "TOPIC_SYNONYMS", "AdminClientConfig", "BrokerConfig", "ClientConfig",
    "ConsumerConfig", "ProducerConfig", "load_properties", "parse_overrides",
    "parse_properties",
]
