"""Build kio response bodies of any supported version from one set of field values.

Kafka's responses gain fields from version to version (ProduceResponse v5 adds
``log_start_offset``, MetadataResponse v7 ``leader_epoch`` ...). The handlers compute every
field once and ``build(cls, **fields)`` keeps those the version's class has, so one code
path answers every version. ``error(code)`` turns an int error code into kio's
``ErrorCode``; ``code_of(exc, what)`` is the code to answer for an exception caught while
serving ``what`` (a bug — anything that is not a Kafka error — answers
UNKNOWN_SERVER_ERROR and is logged with its traceback).

Pure functions (and a cache of field names): any thread.
"""
from __future__ import annotations

import dataclasses
import datetime
import logging

from kio.schema.errors import ErrorCode

from cluster.errors import UnknownError, error_code
from cluster.protocol import frames as protocol

log = logging.getLogger(__name__)

NO_THROTTLE = datetime.timedelta(0)

_FIELDS = {}  # kio class -> frozenset of its field names


def build(cls, **fields):
    """An instance of the kio class ``cls`` from the ``fields`` it has (others dropped)."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return cls(**{name: value for name, value in fields.items() if name in names})


def error(code):
    """kio's ErrorCode for the Kafka error code ``code``."""
    return ErrorCode(code)


def code_of(exc, what):
    """The error code answering ``exc``, caught while serving ``what``."""
    code = error_code(exc)
    if code == UnknownError.errno:
        log.error("%s failed", what, exc_info=exc)
    return code


def encoder(header, response):
    """A function that encodes ``response`` as the answer to the request of ``header``
    (what a delayed response sends once it is decided)."""
    return lambda: protocol.encode_response(response, header.correlation_id)


def module(api_key, version):
    """The kio module of ``api_key``'s response at ``version`` (its nested classes)."""
    return protocol.response_module(api_key, version)
