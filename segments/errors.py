"""Errors raised by the storage layer.

Each carries Kafka's error code (``errno``) and whether a retry can succeed
(``retriable``), like every error of ringlog; ``cluster.errors`` re-exports these classes
so a caller has one hierarchy to catch. This module imports nothing of ours.
"""


class StorageError(Exception):
    """Base class of the storage layer's errors."""

    errno = -1  # UNKNOWN_SERVER_ERROR
    message = "UNKNOWN_SERVER_ERROR"
    retriable = False
    invalid_metadata = False


class CorruptRecordError(StorageError):
    """A batch whose header or CRC does not check out (Kafka: CORRUPT_MESSAGE)."""

    errno = 2
    message = "CORRUPT_MESSAGE"
    retriable = True


class InvalidRecordError(StorageError):
    """A batch that is well-formed but not acceptable (Kafka: INVALID_RECORD)."""

    errno = 87
    message = "INVALID_RECORD"


class RecordTooLargeError(StorageError):
    """A batch larger than ``max.message.bytes`` (Kafka: MESSAGE_TOO_LARGE)."""

    errno = 10
    message = "MESSAGE_TOO_LARGE"


class OffsetOutOfRangeError(StorageError):
    """A read below the log start offset or above the log end offset."""

    errno = 1
    message = "OFFSET_OUT_OF_RANGE"


class UnsupportedCompressionTypeError(StorageError):
    """A compression codec id that is not one of Kafka's (Kafka: UNSUPPORTED_COMPRESSION_TYPE)."""

    errno = 76
    message = "UNSUPPORTED_COMPRESSION_TYPE"


class KafkaStorageError(StorageError):
    """The log directory could not be read or written (Kafka: KAFKA_STORAGE_ERROR)."""

    errno = 56
    message = "KAFKA_STORAGE_ERROR"
    retriable = True
    invalid_metadata = True  # as in Kafka: the client refreshes metadata and retries


class InvalidLogConfigError(StorageError, ValueError):
    """A log configuration key or value that is not acceptable (Kafka: INVALID_CONFIG)."""

    errno = 40
    message = "INVALID_CONFIG"
