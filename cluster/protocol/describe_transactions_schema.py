"""DescribeTransactionsResponse v0 with ``transaction_start_time`` as the plain int64 of
milliseconds that Kafka's schema has (``TransactionStartTimeMs``).

kio declares that field a timezone-aware datetime, and its reader refuses a negative
timestamp; but Kafka answers -1 for a transactional id with no transaction (Empty, after
InitProducerId), so a response kio cannot read is an ordinary one. The classes here are
kio's, rebuilt field for field with that one field an int64 (-1: no transaction);
``frames`` encodes and decodes DescribeTransactionsResponse v0 with them (kio's codec
reads and writes them: it goes by each field's ``kafka_type``). The bytes are Kafka's
either way. ``TopicData`` is kio's own.

Plain values: any thread.
"""
from __future__ import annotations

import dataclasses

from kio.schema.describe_transactions.v0 import response as kio_response
from kio.schema.describe_transactions.v0.response import TopicData
from kio.static.primitive import i64

__all__ = ("DescribeTransactionsResponse", "TopicData", "TransactionState")


def _rebuild(cls, types):
    """``cls`` (a kio entity class) as a new frozen dataclass of this module, each field
    as in ``cls`` unless ``types`` maps its name to (type, metadata)."""
    fields = []
    for f in dataclasses.fields(cls):
        kind, metadata = types.get(f.name, (f.type, f.metadata))
        spec = {"metadata": metadata}
        if f.default is not dataclasses.MISSING:
            spec["default"] = f.default
        fields.append((f.name, kind, dataclasses.field(**spec)))
    namespace = {name: getattr(cls, name) for name in (
        "__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")}
    namespace["__module__"] = __name__
    namespace["__doc__"] = f"kio's {cls.__name__} with {sorted(types)} redefined."
    return dataclasses.make_dataclass(cls.__name__, fields, namespace=namespace, frozen=True,
                                      slots=True, kw_only=True)


TransactionState = _rebuild(kio_response.TransactionState,
                            {"transaction_start_time": (i64, {"kafka_type": "int64"})})
DescribeTransactionsResponse = _rebuild(
    kio_response.DescribeTransactionsResponse,
    {"transaction_states": (tuple[TransactionState, ...], {})})
