"""The ``ringlog`` sink's columns, as Spark's Kafka sink takes them: ``value`` (required,
string or binary), ``key`` (string or binary), ``topic`` (string), ``partition`` (int),
``headers`` (``array<struct<key:string,value:binary>>``); other columns are ignored.

``check_schema`` runs on the driver when the writer is made: a missing ``value``, a column
of the wrong type, or no ``topic`` column and no ``topic`` option raise ``SinkSchemaError``
with the message of Spark's ``KafkaWriter.validateQuery`` (which Spark raises as an
AnalysisException of error class ``_LEGACY_ERROR_TEMP_3080``). ``records`` runs in the
tasks: the arguments of ``KafkaProducer.send`` for each row of an Arrow record batch; a row
whose topic is null when no ``topic`` option is given raises ``NullTopicError`` naming the
row, as Spark's ``KafkaRowWriter`` fails on it.

A row's topic is its ``topic`` column, or the ``topic`` option when that is null or absent.
Pure functions; any thread may call them.
"""
from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

#: Spark's ``_LEGACY_ERROR_TEMP_3080``: the Kafka sink's schema errors.
SCHEMA_ERROR_CLASS = "_LEGACY_ERROR_TEMP_3080"

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())]))


class SinkSchemaError(ValueError):
    """The DataFrame cannot be written by the ringlog sink (Spark's message)."""

    error_class = SCHEMA_ERROR_CLASS


class NullTopicError(ValueError):
    """A row has a null topic and the write has no ``topic`` option."""


def _bytes_type(field):
    return isinstance(field.dataType, (StringType, BinaryType))


def check_schema(schema, topic_option):
    """SinkSchemaError unless ``schema`` (a StructType) can be written (module doc)."""
    fields = {f.name.lower(): f for f in schema.fields}
    topic = fields.get("topic")
    if topic is None and topic_option is None:
        raise SinkSchemaError("topic option required when no 'topic' attribute is present. "
                              "Use the topic option for setting a topic.")
    if topic is not None and not isinstance(topic.dataType, StringType):
        raise SinkSchemaError(f"topic attribute unsupported type "
                              f"{topic.dataType.simpleString()}. topic must be a string")
    value = fields.get("value")
    if value is None:
        raise SinkSchemaError("Required attribute 'value' not found")
    for name, field in (("key", fields.get("key")), ("value", value)):
        if field is not None and not _bytes_type(field):
            raise SinkSchemaError(f"{name} attribute unsupported type "
                                  f"{field.dataType.simpleString()}. {name} attribute type "
                                  f"must be a string or binary")
    headers = fields.get("headers")
    if headers is not None and headers.dataType.simpleString() != HEADERS_TYPE.simpleString():
        raise SinkSchemaError(f"headers attribute unsupported type "
                              f"{headers.dataType.simpleString()}. headers attribute type "
                              f"must be a {HEADERS_TYPE.simpleString()}")
    partition = fields.get("partition")
    if partition is not None and not isinstance(partition.dataType, IntegerType):
        raise SinkSchemaError(f"partition attribute unsupported type "
                              f"{partition.dataType.simpleString()}. partition attribute type "
                              f"must be an int")


def _column(batch, name, encode=False):
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    values = batch.column(index).to_pylist()
    if encode:
        return [v.encode() if isinstance(v, str) else v for v in values]
    return values


def records(batch, topic_option, where=""):
    """``(topic, value, key, headers, partition)`` per row of the Arrow ``batch``; headers
    as kafka-python's list of ``(str, bytes)``. ``where`` names the task in errors."""
    n = batch.num_rows
    values = _column(batch, "value", encode=True)
    keys = _column(batch, "key", encode=True) or [None] * n
    topics = _column(batch, "topic") or [None] * n
    partitions = _column(batch, "partition") or [None] * n
    headers = _column(batch, "headers")
    for i in range(n):
        topic = topics[i] or topic_option
        if topic is None:
            raise NullTopicError(f"null topic present in the data (row {i}{where}, key "
                                 f"{keys[i]!r}). Use the topic option for setting a default "
                                 f"topic.")
        row_headers = None
        if headers is not None and headers[i]:
            row_headers = [(h["key"], h["value"]) for h in headers[i]]
        yield topic, values[i], keys[i], row_headers, partitions[i]
