"""The roots of ringlog's error tree, and the storage layer's errors.

Every ringlog error carries, as class attributes, Kafka's error code (``errno``, ``None`` for
client-side errors), Kafka's name for it (``message``), a one-line ``description``, and
whether a retry can succeed (``retriable``) or needs a metadata refresh first
(``invalid_metadata``). ``segments`` is the lowest room that speaks Kafka's error codes and
imports nothing of ours, so the roots live here: the storage errors are Kafka errors by
their own bases, ``except KafkaError`` catches what the log raises, and ``cluster.errors``
(the public module, one class per Kafka error code) re-exports these classes and builds
the rest of the tree on the same roots.

Exceptions are plain values: any thread may create, raise and read them.
"""
from __future__ import annotations

import errno as _errno


class KafkaError(Exception):
    """Root of every ringlog error."""

    errno = None
    message = None
    description = None
    retriable = False
    invalid_metadata = False

    def __str__(self):
        """The message; without one, Kafka's ``description`` (as Java's ``Errors.exception()``
        words it), else empty. The class name is not repeated here: a traceback, ``repr`` and
        the tools' one-line errors name it already (kafka-python's prefix made it twice)."""
        if not self.args:
            return self.description or ""
        return super().__str__()


class RetriableError(KafkaError):
    """An error after which the same request may succeed (Kafka: RetriableException)."""

    retriable = True


class InvalidMetadataError(RetriableError):
    """A retriable error that needs a metadata refresh first (Kafka: InvalidMetadataException)."""

    invalid_metadata = True


class BrokerResponseError(KafkaError):
    """An error a broker reports with an error code; ``errno`` is that code."""

    def __str__(self):
        """``[Error <errno>] <message>``: the code as kafka-python shows it."""
        return f"[Error {self.errno}] {super().__str__()}"


class StorageError(BrokerResponseError):
    """Base class of the storage layer's errors (UNKNOWN_SERVER_ERROR unless a subclass says)."""

    errno = -1
    message = "UNKNOWN_SERVER_ERROR"


class CorruptRecordError(StorageError, RetriableError):
    """A batch whose header or CRC does not check out (Kafka: CORRUPT_MESSAGE)."""

    errno = 2
    message = "CORRUPT_MESSAGE"
    description = ("This message has failed its CRC checksum, exceeds the valid size, has a "
                   "null key for a compacted topic, or is otherwise corrupt.")


class InvalidRecordError(StorageError):
    """A batch that is well-formed but not acceptable (Kafka: INVALID_RECORD)."""

    errno = 87
    message = "INVALID_RECORD"
    description = "This record has failed the validation on broker and hence will be rejected."


class RecordTooLargeError(StorageError):
    """A batch larger than ``max.message.bytes`` (Kafka: MESSAGE_TOO_LARGE)."""

    errno = 10
    message = "MESSAGE_TOO_LARGE"
    description = ("The request included a message larger than the max message size the "
                   "server will accept.")


class OffsetOutOfRangeError(StorageError):
    """A read below the log start offset or above the log end offset."""

    errno = 1
    message = "OFFSET_OUT_OF_RANGE"
    description = ("The requested offset is not within the range of offsets maintained by "
                   "the server.")


class UnsupportedCompressionTypeError(StorageError):
    """A compression codec id that is not one of Kafka's (Kafka: UNSUPPORTED_COMPRESSION_TYPE)."""

    errno = 76
    message = "UNSUPPORTED_COMPRESSION_TYPE"
    description = ("The requesting client does not support the compression type of given "
                   "partition.")


class KafkaStorageError(StorageError, InvalidMetadataError):
    """The log directory could not be read or written (Kafka: KAFKA_STORAGE_ERROR).

    As in Kafka, the client refreshes metadata and retries.
    """

    errno = 56
    message = "KAFKA_STORAGE_ERROR"
    description = "Disk error when trying to access log file on the disk."


class LogDirFailureError(KafkaStorageError):
    """A failed disk operation whose effect on the files could not be undone or known (a
    failed fsync; a failed write whose partial bytes could not be truncated away).

    Raised by the segment files; the ``PartitionLog`` that sees it takes itself offline
    (Kafka's log-directory failure, per partition here) rather than serve what memory and
    the files no longer agree on.
    """


class CorruptSegmentError(KafkaStorageError):
    """A batch of a segment file that fails its checks although it was written whole and
    flushed (a byte changed on disk): the message names the file, the position and what
    was expected (for a CRC, the stored and the computed value).

    The ``PartitionLog`` that sees it takes itself offline and deletes nothing: cutting
    the log at the damage would drop acknowledged records.
    """


def describe_os_error(error):
    """``ENOSPC ([Errno 28] No space left on device: '<file>')``: an OSError's errno name
    first, so callers and tests can tell a full disk from a failing one."""
    name = _errno.errorcode.get(error.errno, str(error.errno))
    return f"{name} ({error})"


class InvalidLogConfigError(StorageError, ValueError):
    """A log configuration key or value that is not acceptable (Kafka: INVALID_CONFIG)."""

    errno = 40
    message = "INVALID_CONFIG"


# -- the idempotent and transactional producer's errors (segments.producer_state) -----------

class OutOfOrderSequenceNumberError(BrokerResponseError):
    """A batch whose sequence does not follow the producer's last one (a gap, or a
    duplicate older than the last 5 batches). Kafka: OUT_OF_ORDER_SEQUENCE_NUMBER."""

    errno = 45
    message = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    description = "The broker received an out of order sequence number."


class InvalidProducerEpochError(BrokerResponseError):
    """A batch or transaction marker with an epoch older than the producer's (a zombie).
    Kafka: INVALID_PRODUCER_EPOCH."""

    errno = 47
    message = "INVALID_PRODUCER_EPOCH"
    description = "Producer attempted to produce with an old epoch."


class InvalidTxnStateError(BrokerResponseError):
    """A non-transactional batch from a producer with a transaction open in the partition.
    Kafka: INVALID_TXN_STATE."""

    errno = 48
    message = "INVALID_TXN_STATE"
    description = "The producer attempted a transactional operation in an invalid state."


class TransactionCoordinatorFencedError(BrokerResponseError):
    """A transaction marker from a coordinator epoch older than the last one seen for the
    producer. Kafka: TRANSACTION_COORDINATOR_FENCED."""

    errno = 52
    message = "TRANSACTION_COORDINATOR_FENCED"
    description = (
        "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the "
        "current coordinator for a given producer."
    )
