"""cluster.errors: one class per Kafka error code, kafka-python's names, storage errors unified."""
from __future__ import annotations

import traceback

import kafka.errors as kafka_python_errors
import pytest
from kio.schema.errors import ErrorCode

import segments.errors
from cluster import errors


def code_classes():
    """Every class of the module that defines an error code itself."""
    return {
        obj for obj in vars(errors).values()
        if isinstance(obj, type) and issubclass(obj, errors.BrokerResponseError)
        and "errno" in vars(obj)
    }


def test_every_code_has_exactly_one_class():
    classes = code_classes()
    codes = sorted(cls.errno for cls in classes)
    assert len(codes) == len(set(codes)), [c for c in codes if codes.count(c) > 1]
    assert codes == list(range(-1, 134))


def test_for_code_round_trips_every_class():
    for cls in code_classes():
        assert errors.for_code(cls.errno) is cls
        assert errors.for_code(ErrorCode(cls.errno)) is cls  # codes as kio decodes them


def test_names_and_retriable_flags_match_kafka_via_kio():
    # kio's ErrorCode is generated from apache/kafka's Errors.java, an independent source.
    for code in ErrorCode:
        cls = errors.for_code(code)
        assert cls.message == code.name.upper(), code
        assert cls.retriable is code.retriable, code


@pytest.mark.parametrize("code, message, retriable, invalid_metadata", [
    (-1, "UNKNOWN_SERVER_ERROR", False, False),
    (0, "NONE", False, False),
    (1, "OFFSET_OUT_OF_RANGE", False, False),
    (2, "CORRUPT_MESSAGE", True, False),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True, True),
    (5, "LEADER_NOT_AVAILABLE", True, True),
    (6, "NOT_LEADER_OR_FOLLOWER", True, True),
    (7, "REQUEST_TIMED_OUT", True, False),
    (10, "MESSAGE_TOO_LARGE", False, False),
    (15, "COORDINATOR_NOT_AVAILABLE", True, False),
    (16, "NOT_COORDINATOR", True, False),
    (19, "NOT_ENOUGH_REPLICAS", True, False),
    (22, "ILLEGAL_GENERATION", False, False),
    (25, "UNKNOWN_MEMBER_ID", False, False),
    (27, "REBALANCE_IN_PROGRESS", False, False),
    (35, "UNSUPPORTED_VERSION", False, False),
    (36, "TOPIC_ALREADY_EXISTS", False, False),
    (41, "NOT_CONTROLLER", True, False),
    (42, "INVALID_REQUEST", False, False),
    (74, "FENCED_LEADER_EPOCH", True, True),
    (75, "UNKNOWN_LEADER_EPOCH", True, False),
    (87, "INVALID_RECORD", False, False),
    (100, "UNKNOWN_TOPIC_ID", True, True),
])
def test_well_known_codes(code, message, retriable, invalid_metadata):
    cls = errors.for_code(code)
    assert (cls.errno, cls.message, cls.retriable, cls.invalid_metadata) == (
        code, message, retriable, invalid_metadata)
    assert cls.description


def test_flags_agree_with_the_class_hierarchy():
    for cls in code_classes():
        assert cls.retriable == issubclass(cls, errors.RetriableError), cls
        assert cls.invalid_metadata == issubclass(cls, errors.InvalidMetadataError), cls
        assert cls.retriable or not cls.invalid_metadata, cls


def test_kafka_python_names_port_unchanged():
    for code, kp_cls in kafka_python_errors.kafka_errors.items():
        if code is None:  # kafka-python files AuthorizationError (no code) under None
            continue
        assert getattr(errors, kp_cls.__name__) is errors.for_code(code), kp_cls.__name__
    for name in ("KafkaError", "BrokerResponseError", "RetriableError", "InvalidMetadataError",
                 "AuthorizationError", "KafkaTimeoutError", "KafkaConnectionError",
                 "IllegalStateError", "IllegalArgumentError", "KafkaConfigurationError",
                 "KafkaProtocolError", "CorrelationIdError", "CommitFailedError",
                 "NoOffsetForPartitionError", "NodeNotReadyError", "Cancelled",
                 "TooManyInFlightRequests", "StaleMetadata", "UnsupportedCodecError",
                 "IncompatibleBrokerVersion"):
        kp = getattr(kafka_python_errors, name)
        ours = getattr(errors, name)
        assert ours.retriable == kp.retriable and ours.invalid_metadata == kp.invalid_metadata, name
    assert errors.NoBrokersAvailable.retriable and errors.NoBrokersAvailable.invalid_metadata


def test_kafkas_current_names_are_the_same_classes():
    assert errors.NotLeaderOrFollowerError is errors.NotLeaderForPartitionError
    assert errors.MessageSizeTooLargeError is errors.RecordTooLargeError


def test_error_carries_errno_and_names_the_bad_value():
    exc = errors.UnknownTopicOrPartitionError("topic 'orders' partition 7: not hosted on broker 2")
    assert exc.errno == 3
    assert str(exc) == "[Error 3] topic 'orders' partition 7: not hosted on broker 2"
    assert str(errors.KafkaTimeoutError("batch expired after 120000 ms")) == (
        "batch expired after 120000 ms")
    assert repr(errors.KafkaTimeoutError("x")) == "KafkaTimeoutError('x')"


def test_without_a_message_an_error_says_kafkas_description():
    assert str(errors.UnknownTopicOrPartitionError()) == (
        "[Error 3] " + errors.UnknownTopicOrPartitionError.description)
    assert str(errors.IllegalStateError()) == ""  # no description: the class name says it


@pytest.mark.parametrize("exc", [
    errors.KafkaConfigurationError("acks must be 0, 1 or all, found 2"),
    errors.UnknownTopicOrPartitionError("topic 'orders' partition 7"),
    segments.errors.CorruptRecordError("stored CRC 1, computed 2"),
    errors.IllegalStateError(),
])
def test_a_traceback_names_the_class_once(exc):
    line = "".join(traceback.format_exception_only(exc))
    assert line.count(type(exc).__name__) == 1, line


@pytest.mark.parametrize("storage_cls, code", [
    (segments.errors.OffsetOutOfRangeError, 1),
    (segments.errors.CorruptRecordError, 2),
    (segments.errors.RecordTooLargeError, 10),
    (segments.errors.KafkaStorageError, 56),
    (segments.errors.UnsupportedCompressionTypeError, 76),
    (segments.errors.InvalidRecordError, 87),
])
def test_storage_errors_are_the_classes_for_their_codes(storage_cls, code):
    assert errors.for_code(code) is storage_cls
    assert getattr(errors, storage_cls.__name__) is storage_cls
    try:
        raise storage_cls(f"bad value for code {code}")
    except errors.BrokerResponseError as caught:  # not caught here: the test fails
        exc = caught
    assert isinstance(exc, errors.KafkaError)
    assert isinstance(exc, errors.RetriableError) == storage_cls.retriable
    assert errors.error_code(exc) == code
    assert str(exc) == f"[Error {code}] bad value for code {code}"
    assert storage_cls.description


def test_except_cluster_class_catches_what_segments_raises():
    from segments.record.batch_header import BatchHeader
    with pytest.raises(errors.CorruptRecordError, match="needs 61 bytes, found 10"):
        BatchHeader(bytes(10))
    try:
        BatchHeader(bytes(10))
    except errors.KafkaError as exc:
        assert errors.error_code(exc) == errors.CorruptRecordError.errno == 2


def test_every_storage_error_is_a_broker_error_with_its_own_code():
    class InvalidSegmentConfigError(segments.errors.StorageError, ValueError):
        errno = 40

    exc = InvalidSegmentConfigError("segment.bytes -1: expected at least 14")
    assert isinstance(exc, errors.BrokerResponseError) and isinstance(exc, ValueError)
    assert errors.error_code(exc) == 40
    assert errors.error_code(segments.errors.StorageError("disk full")) == -1


def test_unknown_code_keeps_its_errno():
    cls = errors.for_code(999)
    assert issubclass(cls, errors.UnknownError)
    assert cls.errno == 999 and errors.for_code(999) is cls
    assert errors.error_code(cls("from a newer broker")) == 999


def test_error_code_of_foreign_exceptions_is_unknown_server_error():
    assert errors.error_code(FileNotFoundError(2, "No such file")) == -1  # POSIX errno 2
    assert errors.error_code(ValueError("bug")) == -1
    assert errors.error_code(errors.KafkaTimeoutError("client side")) == -1
    assert errors.error_code(errors.NotControllerError("broker 1")) == 41
