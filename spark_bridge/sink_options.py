"""The ``ringlog`` sink's options: Spark's Kafka sink options, the same names and rules, so
a job moves between ``format("kafka")`` and ``format("ringlog")`` by changing the format
and the bootstrap address.

===========================  ==================  =============================================
option                       default             meaning
===========================  ==================  =============================================
bootstrap.servers            (required)          the cluster's data directory (Spark's name
                                                 kafka.bootstrap.servers works)
topic                        none                the topic of a row whose ``topic`` column is
                                                 null or absent
kafka.<producer config>      the producer's      handed to the ringlog KafkaProducer of each
                                                 task (``kafka.linger.ms``,
                                                 ``kafka.compression.type``, ...)
kafka.transaction.timeout.ms 900000 (15 min)     how long a prepared micro-batch may wait for
                                                 its commit (a driver down longer loses it)
checkpointLocation           (streaming:         where the sink keeps its commit decisions
                             required)           (``sink_commit_log``)
===========================  ==================  =============================================

Refused, as Spark's Kafka sink refuses them: ``kafka.key.serializer`` and
``kafka.value.serializer`` (keys and values are written as the bytes of the columns); and
``kafka.transactional.id`` and ``kafka.enable.idempotence`` (the sink names its
transactions itself: each task writes in a transaction). A ``kafka.*`` key the producer
does not know is an error naming it.

``parse_sink_options`` returns a ``SinkOptions``, an immutable value the writers carry to
Spark's Python workers (pickled).
"""
from __future__ import annotations

import dataclasses

from cluster.config import ProducerConfig
from cluster.errors import KafkaConfigurationError
from spark_bridge.options import InvalidOptionError, _bootstrap_servers, _lower

TOPIC = "topic"
CHECKPOINT_LOCATION = "checkpointLocation"
KAFKA_PREFIX = "kafka."
#: Kafka's largest transaction timeout (the brokers' transaction.max.timeout.ms default).
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000

#: Producer settings the sink refuses, and why (Spark's messages for the serializers).
UNSUPPORTED_PRODUCER_OPTIONS = {
    "kafka.key.serializer": "Kafka option 'key.serializer' is not supported as keys are "
                            "serialized with ByteArraySerializer.",
    "kafka.value.serializer": "Kafka option 'value.serializer' is not supported as values "
                              "are serialized with ByteArraySerializer.",
    "kafka.transactional.id": "Kafka option 'transactional.id' is not supported: the ringlog "
                              "sink writes each task in a transaction it names itself.",
    "kafka.enable.idempotence": "Kafka option 'enable.idempotence' is not supported: the "
                                "ringlog sink's transactions need idempotence.",
}
_NOT_PRODUCER = frozenset({"kafka.bootstrap.servers", "kafka.isolation.level"})


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    """Validated options of one ``ringlog`` write (module doc). ``producer``: the producer
    configuration (Kafka's dotted names, as given) every task's producer gets."""

    bootstrap_servers: str
    topic: str = None
    producer: tuple = ()
    checkpoint_location: str = None

    def producer_config(self, transactional_id):
        """KafkaProducer keyword arguments for a task writing in ``transactional_id``."""
        config = {"transaction.timeout.ms": DEFAULT_TRANSACTION_TIMEOUT_MS,
                  **dict(self.producer)}
        return {"bootstrap_servers": self.bootstrap_servers,
                "transactional_id": transactional_id, **config}


def parse_sink_options(options, streaming):
    """SinkOptions of a ``ringlog`` write; InvalidOptionError naming the option.
    ``streaming``: a streaming query's writer, which needs ``checkpointLocation``."""
    options = _lower(options)
    for name, why in UNSUPPORTED_PRODUCER_OPTIONS.items():
        if name in options:
            raise InvalidOptionError(why)
    producer = tuple(sorted((key[len(KAFKA_PREFIX):], value) for key, value in options.items()
                            if key.startswith(KAFKA_PREFIX) and key not in _NOT_PRODUCER))
    try:
        ProducerConfig(**{"bootstrap_servers": "-", "transactional_id": "check",
                          **dict(producer)})
    except KafkaConfigurationError as exc:
        raise InvalidOptionError(f"ringlog sink: a 'kafka.*' option the producer refuses: "
                                 f"{exc}") from None
    topic = options.get(TOPIC.lower())
    if topic is not None and not topic.strip():
        raise InvalidOptionError(f"option '{TOPIC}' must name a topic, found {topic!r}")
    checkpoint = options.get(CHECKPOINT_LOCATION.lower())
    if streaming and not checkpoint:
        raise InvalidOptionError(
            f"the ringlog sink needs option '{CHECKPOINT_LOCATION}' on the query "
            f"(.option('{CHECKPOINT_LOCATION}', DIR)): it keeps its commit decisions there, "
            f"which make each micro-batch exactly once")
    return SinkOptions(bootstrap_servers=_bootstrap_servers(options),
                       topic=topic.strip() if topic else None, producer=producer,
                       checkpoint_location=checkpoint)
