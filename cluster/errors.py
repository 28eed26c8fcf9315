"""Every error of ringlog: Kafka's error codes as exception classes, kafka-python's names.

User code written against kafka-python ports by changing the import: ``from kafka.errors
import X`` becomes ``from cluster.errors import X`` with the same class names (a few also
under Kafka's current name, e.g. ``NotLeaderOrFollowerError``). Each class carries, as
class attributes:

- ``errno``: Kafka's error code (the int16 in responses), ``None`` for client-side errors;
- ``message``: Kafka's name for the code (``Errors.java``), e.g. ``"NOT_LEADER_OR_FOLLOWER"``;
- ``description``: Kafka's one-line explanation;
- ``retriable``: whether the same request can succeed later (Kafka: ``RetriableException``);
- ``invalid_metadata``: whether the client should refresh metadata before retrying (Kafka:
  ``InvalidMetadataException``, always retriable too).

Flags and names follow apache/kafka's ``Errors.java`` and the class hierarchy of
``org.apache.kafka.common.errors``, where kafka-python differs (e.g. CORRUPT_MESSAGE is
retriable, UNKNOWN_LEADER_EPOCH is retriable without a metadata refresh).

Construct errors with a message that names the bad value, expected versus found::

    raise UnknownTopicOrPartitionError(f"topic {name!r} partition {p}: not hosted on broker 3")

``for_code(errno)`` returns the class for a code read from a response; ``error_code(exc)``
the code a broker puts in a response for a caught exception.

The roots (``KafkaError``, ``RetriableError``, ``InvalidMetadataError``,
``BrokerResponseError``) and the storage layer's errors (CorruptRecordError 2,
RecordTooLargeError 10, OffsetOutOfRangeError 1, InvalidRecordError 87,
UnsupportedCompressionTypeError 76, KafkaStorageError 56, InvalidLogConfigError 40) and the
producer-state errors the log raises (OutOfOrderSequenceNumberError 45,
InvalidProducerEpochError 47, InvalidTxnStateError 48, TransactionCoordinatorFencedError 52) live in
``segments.errors``, which imports nothing of ours; this module re-exports them, so one
tree holds every error and ``for_code`` returns the storage classes for their codes.

Exceptions are plain values: any thread may create, raise and read them.
"""
from __future__ import annotations

# Re-exported: the roots and the storage errors are part of this module's tree.
from segments.errors import (
    BrokerResponseError as BrokerResponseError,
    CorruptRecordError as CorruptRecordError,
    InvalidMetadataError as InvalidMetadataError,
    InvalidProducerEpochError as InvalidProducerEpochError,
    InvalidRecordError as InvalidRecordError,
    InvalidTxnStateError as InvalidTxnStateError,
    KafkaError as KafkaError,
    KafkaStorageError as KafkaStorageError,
    OffsetOutOfRangeError as OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError as OutOfOrderSequenceNumberError,
    RecordTooLargeError as RecordTooLargeError,
    RetriableError as RetriableError,
    TransactionCoordinatorFencedError as TransactionCoordinatorFencedError,
    UnsupportedCompressionTypeError as UnsupportedCompressionTypeError,
)

# -- client-side errors (no error code on the wire), kafka-python's names -------------------

class Cancelled(RetriableError):
    """The request was cancelled before a response arrived (e.g. the connection closed)."""


class CommitFailedError(KafkaError):
    """An offset commit failed because the group rebalanced and the partitions moved."""

    def __init__(self, *args):
        super().__init__(*(args or (
            "Commit cannot be completed since the group has already rebalanced and assigned "
            "the partitions to another member.",)))


class IllegalArgumentError(KafkaError):
    """A caller passed an argument outside what the API accepts."""


class IllegalStateError(KafkaError):
    """A call made in a state that does not allow it (e.g. ``send()`` after ``close()``)."""


class KafkaConfigurationError(KafkaError):
    """A configuration value is missing, unknown or out of range."""


class KafkaConnectionError(InvalidMetadataError):
    """A connection to a broker (a pair of rings) failed or was closed."""


class NoBrokersAvailable(InvalidMetadataError):
    """No broker of the bootstrap list could be reached."""


class KafkaProtocolError(KafkaError):
    """A frame that does not follow the Kafka protocol arrived from the other side."""


class CorrelationIdError(RetriableError, KafkaProtocolError):
    """A response's correlation id does not match the oldest request in flight."""


class InvalidReceiveError(KafkaProtocolError):
    """A received frame's size prefix is negative or larger than allowed."""


class KafkaTimeoutError(RetriableError):
    """An operation did not complete within its deadline (e.g. ``max_block_ms``)."""


class MetadataEmptyBrokerList(RetriableError):
    """A metadata response listed no brokers."""


class NoOffsetForPartitionError(KafkaError):
    """No committed offset and ``auto_offset_reset`` is ``none``."""


class NodeNotReadyError(RetriableError):
    """The connection to that broker is not ready for requests yet."""


class UnknownBrokerIdError(KafkaError):
    """A broker id that the cluster metadata does not know."""


class QuotaViolationError(KafkaError):
    """A client exceeded a quota."""


class StaleMetadata(InvalidMetadataError):
    """The client's metadata is older than what the request needs."""


class TooManyInFlightRequests(RetriableError):
    """``max_in_flight_requests_per_connection`` requests already await a response."""


class UnrecognizedBrokerVersion(KafkaError):
    """The broker's ApiVersions answer matches no known broker version."""


class UnsupportedCodecError(KafkaError):
    """A compression codec whose library is not installed, or an unknown codec name."""


class TransactionAbortedError(KafkaError):
    """A batch failed because the user aborted its transaction."""


# -- broker errors: one class per Kafka error code ------------------------------------------


class AuthorizationError(BrokerResponseError):
    """Base of the ``*_AUTHORIZATION_FAILED`` codes."""


class UnknownError(BrokerResponseError):
    errno = -1
    message = "UNKNOWN_SERVER_ERROR"
    description = "The server experienced an unexpected error when processing the request."


class NoError(BrokerResponseError):
    errno = 0
    message = "NONE"
    description = "No error."


class UnknownTopicOrPartitionError(InvalidMetadataError, BrokerResponseError):
    errno = 3
    message = "UNKNOWN_TOPIC_OR_PARTITION"
    description = "This server does not host this topic-partition."


class InvalidFetchRequestError(BrokerResponseError):
    errno = 4
    message = "INVALID_FETCH_SIZE"
    description = "The requested fetch size is invalid."


class LeaderNotAvailableError(InvalidMetadataError, BrokerResponseError):
    errno = 5
    message = "LEADER_NOT_AVAILABLE"
    description = (
        "There is no leader for this topic-partition as we are in the middle of a leadership "
        "election."
    )


class NotLeaderForPartitionError(InvalidMetadataError, BrokerResponseError):
    errno = 6
    message = "NOT_LEADER_OR_FOLLOWER"
    description = (
        "For requests intended only for the leader, this error indicates that the broker is "
        "not the current leader. For requests intended for any replica, this error indicates "
        "that the broker is not a replica of the topic partition."
    )


class RequestTimedOutError(RetriableError, BrokerResponseError):
    errno = 7
    message = "REQUEST_TIMED_OUT"
    description = "The request timed out."


class BrokerNotAvailableError(BrokerResponseError):
    errno = 8
    message = "BROKER_NOT_AVAILABLE"
    description = "The broker is not available."


class ReplicaNotAvailableError(InvalidMetadataError, BrokerResponseError):
    errno = 9
    message = "REPLICA_NOT_AVAILABLE"
    description = (
        "The replica is not available for the requested topic-partition. Produce/Fetch "
        "requests and other requests intended only for the leader or follower return "
        "NOT_LEADER_OR_FOLLOWER if the broker is not a replica of the topic-partition."
    )


class StaleControllerEpochError(BrokerResponseError):
    errno = 11
    message = "STALE_CONTROLLER_EPOCH"
    description = "The controller moved to another broker."


class OffsetMetadataTooLargeError(BrokerResponseError):
    errno = 12
    message = "OFFSET_METADATA_TOO_LARGE"
    description = "The metadata field of the offset request was too large."


class NetworkExceptionError(InvalidMetadataError, BrokerResponseError):
    errno = 13
    message = "NETWORK_EXCEPTION"
    description = "The server disconnected before a response was received."


class CoordinatorLoadInProgressError(RetriableError, BrokerResponseError):
    errno = 14
    message = "COORDINATOR_LOAD_IN_PROGRESS"
    description = "The coordinator is loading and hence can't process requests."


class CoordinatorNotAvailableError(RetriableError, BrokerResponseError):
    errno = 15
    message = "COORDINATOR_NOT_AVAILABLE"
    description = "The coordinator is not available."


class NotCoordinatorError(RetriableError, BrokerResponseError):
    errno = 16
    message = "NOT_COORDINATOR"
    description = "This is not the correct coordinator."


class InvalidTopicError(BrokerResponseError):
    errno = 17
    message = "INVALID_TOPIC_EXCEPTION"
    description = "The request attempted to perform an operation on an invalid topic."


class RecordListTooLargeError(BrokerResponseError):
    errno = 18
    message = "RECORD_LIST_TOO_LARGE"
    description = (
        "The request included message batch larger than the configured segment size on the "
        "server."
    )


class NotEnoughReplicasError(RetriableError, BrokerResponseError):
    errno = 19
    message = "NOT_ENOUGH_REPLICAS"
    description = "Messages are rejected since there are fewer in-sync replicas than required."


class NotEnoughReplicasAfterAppendError(RetriableError, BrokerResponseError):
    errno = 20
    message = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    description = "Messages are written to the log, but to fewer in-sync replicas than required."


class InvalidRequiredAcksError(BrokerResponseError):
    errno = 21
    message = "INVALID_REQUIRED_ACKS"
    description = "Produce request specified an invalid value for required acks."


class IllegalGenerationError(BrokerResponseError):
    errno = 22
    message = "ILLEGAL_GENERATION"
    description = "Specified group generation id is not valid."


class InconsistentGroupProtocolError(BrokerResponseError):
    errno = 23
    message = "INCONSISTENT_GROUP_PROTOCOL"
    description = (
        "The group member's supported protocols are incompatible with those of existing "
        "members or first group member tried to join with empty protocol type or empty "
        "protocol list."
    )


class InvalidGroupIdError(BrokerResponseError):
    errno = 24
    message = "INVALID_GROUP_ID"
    description = "The configured groupId is invalid."


class UnknownMemberIdError(BrokerResponseError):
    errno = 25
    message = "UNKNOWN_MEMBER_ID"
    description = "The coordinator is not aware of this member."


class InvalidSessionTimeoutError(BrokerResponseError):
    errno = 26
    message = "INVALID_SESSION_TIMEOUT"
    description = (
        "The session timeout is not within the range allowed by the broker (as configured by "
        "group.min.session.timeout.ms and group.max.session.timeout.ms)."
    )


class RebalanceInProgressError(BrokerResponseError):
    errno = 27
    message = "REBALANCE_IN_PROGRESS"
    description = "The group is rebalancing, so a rejoin is needed."


class InvalidCommitOffsetSizeError(BrokerResponseError):
    errno = 28
    message = "INVALID_COMMIT_OFFSET_SIZE"
    description = "The committing offset data size is not valid."


class TopicAuthorizationFailedError(AuthorizationError):
    errno = 29
    message = "TOPIC_AUTHORIZATION_FAILED"
    description = "Topic authorization failed."


class GroupAuthorizationFailedError(AuthorizationError):
    errno = 30
    message = "GROUP_AUTHORIZATION_FAILED"
    description = "Group authorization failed."


class ClusterAuthorizationFailedError(AuthorizationError):
    errno = 31
    message = "CLUSTER_AUTHORIZATION_FAILED"
    description = "Cluster authorization failed."


class InvalidTimestampError(BrokerResponseError):
    errno = 32
    message = "INVALID_TIMESTAMP"
    description = "The timestamp of the message is out of acceptable range."


class UnsupportedSaslMechanismError(BrokerResponseError):
    errno = 33
    message = "UNSUPPORTED_SASL_MECHANISM"
    description = "The broker does not support the requested SASL mechanism."


class IllegalSaslStateError(BrokerResponseError):
    errno = 34
    message = "ILLEGAL_SASL_STATE"
    description = "Request is not valid given the current SASL state."


class UnsupportedVersionError(BrokerResponseError):
    errno = 35
    message = "UNSUPPORTED_VERSION"
    description = "The version of API is not supported."
    #: ``cluster.protocol.frames.decode_request`` sets the rejected frame's RequestHeader here.
    header = None


class TopicAlreadyExistsError(BrokerResponseError):
    errno = 36
    message = "TOPIC_ALREADY_EXISTS"
    description = "Topic with this name already exists."


class InvalidPartitionsError(BrokerResponseError):
    errno = 37
    message = "INVALID_PARTITIONS"
    description = "Number of partitions is below 1."


class InvalidReplicationFactorError(BrokerResponseError):
    errno = 38
    message = "INVALID_REPLICATION_FACTOR"
    description = "Replication factor is below 1 or larger than the number of available brokers."


class InvalidReplicationAssignmentError(BrokerResponseError):
    errno = 39
    message = "INVALID_REPLICA_ASSIGNMENT"
    description = "Replica assignment is invalid."


class InvalidConfigurationError(BrokerResponseError):
    errno = 40
    message = "INVALID_CONFIG"
    description = "Configuration is invalid."


class NotControllerError(RetriableError, BrokerResponseError):
    errno = 41
    message = "NOT_CONTROLLER"
    description = "This is not the correct controller for this cluster."


class InvalidRequestError(BrokerResponseError):
    errno = 42
    message = "INVALID_REQUEST"
    description = (
        "This most likely occurs because of a request being malformed by the client library "
        "or the message was sent to an incompatible broker. See the broker logs for more "
        "details."
    )
    #: ``cluster.protocol.frames.decode_request`` sets the rejected frame's RequestHeader here
    #: when the header parsed; None when the frame was garbage from its first bytes.
    header = None


class UnsupportedForMessageFormatError(BrokerResponseError):
    errno = 43
    message = "UNSUPPORTED_FOR_MESSAGE_FORMAT"
    description = "The message format version on the broker does not support the request."


class PolicyViolationError(BrokerResponseError):
    errno = 44
    message = "POLICY_VIOLATION"
    description = "Request parameters do not satisfy the configured policy."


class DuplicateSequenceNumberError(BrokerResponseError):
    errno = 46
    message = "DUPLICATE_SEQUENCE_NUMBER"
    description = "The broker received a duplicate sequence number."


class InvalidProducerIdMappingError(BrokerResponseError):
    errno = 49
    message = "INVALID_PRODUCER_ID_MAPPING"
    description = (
        "The producer attempted to use a producer id which is not currently assigned to its "
        "transactional id."
    )


class InvalidTransactionTimeoutError(BrokerResponseError):
    errno = 50
    message = "INVALID_TRANSACTION_TIMEOUT"
    description = (
        "The transaction timeout is larger than the maximum value allowed by the broker (as "
        "configured by transaction.max.timeout.ms)."
    )


class ConcurrentTransactionsError(RetriableError, BrokerResponseError):
    errno = 51
    message = "CONCURRENT_TRANSACTIONS"
    description = (
        "The producer attempted to update a transaction while another concurrent operation on "
        "the same transaction was ongoing."
    )


class TransactionalIdAuthorizationFailedError(AuthorizationError):
    errno = 53
    message = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    description = "Transactional Id authorization failed."


class SecurityDisabledError(BrokerResponseError):
    errno = 54
    message = "SECURITY_DISABLED"
    description = "Security features are disabled."


class OperationNotAttemptedError(BrokerResponseError):
    errno = 55
    message = "OPERATION_NOT_ATTEMPTED"
    description = (
        "The broker did not attempt to execute this operation. This may happen for batched "
        "RPCs where some operations in the batch failed, causing the broker to respond "
        "without trying the rest."
    )


class LogDirNotFoundError(BrokerResponseError):
    errno = 57
    message = "LOG_DIR_NOT_FOUND"
    description = "The user-specified log directory is not found in the broker config."


class SaslAuthenticationFailedError(BrokerResponseError):
    errno = 58
    message = "SASL_AUTHENTICATION_FAILED"
    description = "SASL Authentication failed."


class UnknownProducerIdError(BrokerResponseError):
    errno = 59
    message = "UNKNOWN_PRODUCER_ID"
    description = (
        "This exception is raised by the broker if it could not locate the producer metadata "
        "associated with the producerId in question. This could happen if, for instance, the "
        "producer's records were deleted because their retention time had elapsed. Once the "
        "last records of the producerId are removed, the producer's metadata is removed from "
        "the broker, and future appends by the producer will return this exception."
    )


class ReassignmentInProgressError(BrokerResponseError):
    errno = 60
    message = "REASSIGNMENT_IN_PROGRESS"
    description = "A partition reassignment is in progress."


class DelegationTokenAuthDisabledError(BrokerResponseError):
    errno = 61
    message = "DELEGATION_TOKEN_AUTH_DISABLED"
    description = "Delegation Token feature is not enabled."


class DelegationTokenNotFoundError(BrokerResponseError):
    errno = 62
    message = "DELEGATION_TOKEN_NOT_FOUND"
    description = "Delegation Token is not found on server."


class DelegationTokenOwnerMismatchError(BrokerResponseError):
    errno = 63
    message = "DELEGATION_TOKEN_OWNER_MISMATCH"
    description = "Specified Principal is not valid Owner/Renewer."


class DelegationTokenRequestNotAllowedError(BrokerResponseError):
    errno = 64
    message = "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED"
    description = (
        "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on "
        "delegation token authenticated channels."
    )


class DelegationTokenAuthorizationFailedError(AuthorizationError):
    errno = 65
    message = "DELEGATION_TOKEN_AUTHORIZATION_FAILED"
    description = "Delegation Token authorization failed."


class DelegationTokenExpiredError(BrokerResponseError):
    errno = 66
    message = "DELEGATION_TOKEN_EXPIRED"
    description = "Delegation Token is expired."


class InvalidPrincipalTypeError(BrokerResponseError):
    errno = 67
    message = "INVALID_PRINCIPAL_TYPE"
    description = "Supplied principalType is not supported."


class NonEmptyGroupError(BrokerResponseError):
    errno = 68
    message = "NON_EMPTY_GROUP"
    description = "The group is not empty."


class GroupIdNotFoundError(BrokerResponseError):
    errno = 69
    message = "GROUP_ID_NOT_FOUND"
    description = "The group id does not exist."


class FetchSessionIdNotFoundError(RetriableError, BrokerResponseError):
    errno = 70
    message = "FETCH_SESSION_ID_NOT_FOUND"
    description = "The fetch session ID was not found."


class InvalidFetchSessionEpochError(RetriableError, BrokerResponseError):
    errno = 71
    message = "INVALID_FETCH_SESSION_EPOCH"
    description = "The fetch session epoch is invalid."


class ListenerNotFoundError(InvalidMetadataError, BrokerResponseError):
    errno = 72
    message = "LISTENER_NOT_FOUND"
    description = (
        "There is no listener on the leader broker that matches the listener on which "
        "metadata request was processed."
    )


class TopicDeletionDisabledError(BrokerResponseError):
    errno = 73
    message = "TOPIC_DELETION_DISABLED"
    description = "Topic deletion is disabled."


class FencedLeaderEpochError(InvalidMetadataError, BrokerResponseError):
    errno = 74
    message = "FENCED_LEADER_EPOCH"
    description = "The leader epoch in the request is older than the epoch on the broker."


class UnknownLeaderEpochError(RetriableError, BrokerResponseError):
    errno = 75
    message = "UNKNOWN_LEADER_EPOCH"
    description = "The leader epoch in the request is newer than the epoch on the broker."


class StaleBrokerEpochError(BrokerResponseError):
    errno = 77
    message = "STALE_BROKER_EPOCH"
    description = "Broker epoch has changed."


class OffsetNotAvailableError(RetriableError, BrokerResponseError):
    errno = 78
    message = "OFFSET_NOT_AVAILABLE"
    description = (
        "The leader high watermark has not caught up from a recent leader election so the "
        "offsets cannot be guaranteed to be monotonically increasing."
    )


class MemberIdRequiredError(BrokerResponseError):
    errno = 79
    message = "MEMBER_ID_REQUIRED"
    description = (
        "The group member needs to have a valid member id before actually entering a consumer "
        "group."
    )


class PreferredLeaderNotAvailableError(InvalidMetadataError, BrokerResponseError):
    errno = 80
    message = "PREFERRED_LEADER_NOT_AVAILABLE"
    description = "The preferred leader was not available."


class GroupMaxSizeReachedError(BrokerResponseError):
    errno = 81
    message = "GROUP_MAX_SIZE_REACHED"
    description = "The consumer group has reached its max size."


class FencedInstanceIdError(BrokerResponseError):
    errno = 82
    message = "FENCED_INSTANCE_ID"
    description = (
        "The broker rejected this static consumer since another consumer with the same "
        "group.instance.id has registered with a different member.id."
    )


class EligibleLeadersNotAvailableError(InvalidMetadataError, BrokerResponseError):
    errno = 83
    message = "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    description = "Eligible topic partition leaders are not available."


class ElectionNotNeededError(InvalidMetadataError, BrokerResponseError):
    errno = 84
    message = "ELECTION_NOT_NEEDED"
    description = "Leader election not needed for topic partition."


class NoReassignmentInProgressError(BrokerResponseError):
    errno = 85
    message = "NO_REASSIGNMENT_IN_PROGRESS"
    description = "No partition reassignment is in progress."


class GroupSubscribedToTopicError(BrokerResponseError):
    errno = 86
    message = "GROUP_SUBSCRIBED_TO_TOPIC"
    description = (
        "Deleting offsets of a topic is forbidden while the consumer group is actively "
        "subscribed to it."
    )


class UnstableOffsetCommitError(RetriableError, BrokerResponseError):
    errno = 88
    message = "UNSTABLE_OFFSET_COMMIT"
    description = "There are unstable offsets that need to be cleared."


class ThrottlingQuotaExceededError(RetriableError, BrokerResponseError):
    errno = 89
    message = "THROTTLING_QUOTA_EXCEEDED"
    description = "The throttling quota has been exceeded."


class ProducerFencedError(BrokerResponseError):
    errno = 90
    message = "PRODUCER_FENCED"
    description = (
        "There is a newer producer with the same transactionalId which fences the current "
        "one."
    )


class ResourceNotFoundError(BrokerResponseError):
    errno = 91
    message = "RESOURCE_NOT_FOUND"
    description = "A request illegally referred to a resource that does not exist."


class DuplicateResourceError(BrokerResponseError):
    errno = 92
    message = "DUPLICATE_RESOURCE"
    description = "A request illegally referred to the same resource twice."


class UnacceptableCredentialError(BrokerResponseError):
    errno = 93
    message = "UNACCEPTABLE_CREDENTIAL"
    description = "Requested credential would not meet criteria for acceptability."


class InconsistentVoterSetError(BrokerResponseError):
    errno = 94
    message = "INCONSISTENT_VOTER_SET"
    description = (
        "Indicates that the either the sender or recipient of a voter-only request is not one "
        "of the expected voters."
    )


class InvalidUpdateVersionError(BrokerResponseError):
    errno = 95
    message = "INVALID_UPDATE_VERSION"
    description = "The given update version was invalid."


class FeatureUpdateFailedError(BrokerResponseError):
    errno = 96
    message = "FEATURE_UPDATE_FAILED"
    description = "Unable to update finalized features due to an unexpected server error."


class PrincipalDeserializationFailureError(BrokerResponseError):
    errno = 97
    message = "PRINCIPAL_DESERIALIZATION_FAILURE"
    description = (
        "Request principal deserialization failed during forwarding. This indicates an "
        "internal error on the broker cluster security setup."
    )


class SnapshotNotFoundError(BrokerResponseError):
    errno = 98
    message = "SNAPSHOT_NOT_FOUND"
    description = "Requested snapshot was not found."


class PositionOutOfRangeError(BrokerResponseError):
    errno = 99
    message = "POSITION_OUT_OF_RANGE"
    description = (
        "Requested position is not greater than or equal to zero, and less than the size of "
        "the snapshot."
    )


class UnknownTopicIdError(InvalidMetadataError, BrokerResponseError):
    errno = 100
    message = "UNKNOWN_TOPIC_ID"
    description = "This server does not host this topic ID."


class DuplicateBrokerRegistrationError(BrokerResponseError):
    errno = 101
    message = "DUPLICATE_BROKER_REGISTRATION"
    description = "This broker ID is already in use."


class BrokerIdNotRegisteredError(BrokerResponseError):
    errno = 102
    message = "BROKER_ID_NOT_REGISTERED"
    description = "The given broker ID was not registered."


class InconsistentTopicIdError(InvalidMetadataError, BrokerResponseError):
    errno = 103
    message = "INCONSISTENT_TOPIC_ID"
    description = "The log's topic ID did not match the topic ID in the request."


class InconsistentClusterIdError(BrokerResponseError):
    errno = 104
    message = "INCONSISTENT_CLUSTER_ID"
    description = "The clusterId in the request does not match that found on the server."


class TransactionalIdNotFoundError(BrokerResponseError):
    errno = 105
    message = "TRANSACTIONAL_ID_NOT_FOUND"
    description = "The transactionalId could not be found."


class FetchSessionTopicIdError(RetriableError, BrokerResponseError):
    errno = 106
    message = "FETCH_SESSION_TOPIC_ID_ERROR"
    description = "The fetch session encountered inconsistent topic ID usage."


class IneligibleReplicaError(BrokerResponseError):
    errno = 107
    message = "INELIGIBLE_REPLICA"
    description = "The new ISR contains at least one ineligible replica."


class NewLeaderElectedError(BrokerResponseError):
    errno = 108
    message = "NEW_LEADER_ELECTED"
    description = (
        "The AlterPartition request successfully updated the partition state but the leader "
        "has changed."
    )


class OffsetMovedToTieredStorageError(BrokerResponseError):
    errno = 109
    message = "OFFSET_MOVED_TO_TIERED_STORAGE"
    description = "The requested offset is moved to tiered storage."


class FencedMemberEpochError(BrokerResponseError):
    errno = 110
    message = "FENCED_MEMBER_EPOCH"
    description = (
        "The member epoch is fenced by the group coordinator. The member must abandon all its "
        "partitions and rejoin."
    )


class UnreleasedInstanceIdError(BrokerResponseError):
    errno = 111
    message = "UNRELEASED_INSTANCE_ID"
    description = (
        "The instance ID is still used by another member in the consumer group. That member "
        "must leave first."
    )


class UnsupportedAssignorError(BrokerResponseError):
    errno = 112
    message = "UNSUPPORTED_ASSIGNOR"
    description = "The assignor or its version range is not supported by the consumer group."


class StaleMemberEpochError(BrokerResponseError):
    errno = 113
    message = "STALE_MEMBER_EPOCH"
    description = (
        "The member epoch is stale. The member must retry after receiving its updated member "
        "epoch via the ConsumerGroupHeartbeat API."
    )


class MismatchedEndpointTypeError(BrokerResponseError):
    errno = 114
    message = "MISMATCHED_ENDPOINT_TYPE"
    description = "The request was sent to an endpoint of the wrong type."


class UnsupportedEndpointTypeError(BrokerResponseError):
    errno = 115
    message = "UNSUPPORTED_ENDPOINT_TYPE"
    description = "This endpoint type is not supported yet."


class UnknownControllerIdError(BrokerResponseError):
    errno = 116
    message = "UNKNOWN_CONTROLLER_ID"
    description = "This controller ID is not known."


class UnknownSubscriptionIdError(BrokerResponseError):
    errno = 117
    message = "UNKNOWN_SUBSCRIPTION_ID"
    description = (
        "Client sent a push telemetry request with an invalid or outdated subscription ID."
    )


class TelemetryTooLargeError(BrokerResponseError):
    errno = 118
    message = "TELEMETRY_TOO_LARGE"
    description = (
        "Client sent a push telemetry request larger than the maximum size the broker will "
        "accept."
    )


class InvalidRegistrationError(BrokerResponseError):
    errno = 119
    message = "INVALID_REGISTRATION"
    description = "The controller has considered the broker registration to be invalid."


class TransactionAbortableError(BrokerResponseError):
    errno = 120
    message = "TRANSACTION_ABORTABLE"
    description = (
        "The server encountered an error with the transaction. The client can abort the "
        "transaction to continue using this transactional ID."
    )


class InvalidRecordStateError(BrokerResponseError):
    errno = 121
    message = "INVALID_RECORD_STATE"
    description = (
        "The record state is invalid. The acknowledgement of delivery could not be completed."
    )


class ShareSessionNotFoundError(RetriableError, BrokerResponseError):
    errno = 122
    message = "SHARE_SESSION_NOT_FOUND"
    description = "The share session was not found."


class InvalidShareSessionEpochError(RetriableError, BrokerResponseError):
    errno = 123
    message = "INVALID_SHARE_SESSION_EPOCH"
    description = "The share session epoch is invalid."


class FencedStateEpochError(BrokerResponseError):
    errno = 124
    message = "FENCED_STATE_EPOCH"
    description = (
        "The share coordinator rejected the request because the share-group state epoch did "
        "not match."
    )


class InvalidVoterKeyError(BrokerResponseError):
    errno = 125
    message = "INVALID_VOTER_KEY"
    description = "The voter key doesn't match the receiving replica's key."


class DuplicateVoterError(BrokerResponseError):
    errno = 126
    message = "DUPLICATE_VOTER"
    description = "The voter is already part of the set of voters."


class VoterNotFoundError(BrokerResponseError):
    errno = 127
    message = "VOTER_NOT_FOUND"
    description = "The voter is not part of the set of voters."


class InvalidRegularExpressionError(BrokerResponseError):
    errno = 128
    message = "INVALID_REGULAR_EXPRESSION"
    description = "The regular expression is not valid."


class RebootstrapRequiredError(BrokerResponseError):
    errno = 129
    message = "REBOOTSTRAP_REQUIRED"
    description = "Client metadata is stale. The client should rebootstrap to obtain new metadata."


class StreamsInvalidTopologyError(BrokerResponseError):
    errno = 130
    message = "STREAMS_INVALID_TOPOLOGY"
    description = "The supplied topology is invalid."


class StreamsInvalidTopologyEpochError(BrokerResponseError):
    errno = 131
    message = "STREAMS_INVALID_TOPOLOGY_EPOCH"
    description = "The supplied topology epoch is invalid."


class StreamsTopologyFencedError(BrokerResponseError):
    errno = 132
    message = "STREAMS_TOPOLOGY_FENCED"
    description = "The supplied topology epoch is outdated."


class ShareSessionLimitReachedError(RetriableError, BrokerResponseError):
    errno = 133
    message = "SHARE_SESSION_LIMIT_REACHED"
    description = "The limit of share sessions has been reached."


class IncompatibleBrokerVersion(UnsupportedVersionError):
    """The broker does not support an API version this client needs (raised by the client)."""


# -- other names for the same classes --------------------------------------------------------

#: Kafka's current name for code 6 (kafka-python keeps the old one).
NotLeaderOrFollowerError = NotLeaderForPartitionError
#: kafka-python's name for code 10.
MessageSizeTooLargeError = RecordTooLargeError
#: kafka-python's old name for code 2.
CorruptRecordException = CorruptRecordError

# -- lookup ------------------------------------------------------------------------------------

_BY_CODE = {
    cls.errno: cls
    for cls in globals().values()
    if isinstance(cls, type) and issubclass(cls, BrokerResponseError) and "errno" in vars(cls)
}
_UNRECOGNIZED = {}


def for_code(errno):
    """The error class for Kafka error code ``errno`` (``NoError`` for 0).

    A code this module does not know (a newer broker) gets a subclass of ``UnknownError``
    carrying that ``errno``, created once per code, so the code is not lost.
    """
    try:
        return _BY_CODE[errno]
    except KeyError:
        pass
    errno = int(errno)
    try:
        return _UNRECOGNIZED[errno]
    except KeyError:
        cls = type("UnrecognizedBrokerError", (UnknownError,), {
            "errno": errno, "description": f"Error code {errno} is not known to this client."})
        return _UNRECOGNIZED.setdefault(errno, cls)


def error_code(exc):
    """The Kafka error code a broker reports for the caught exception ``exc``.

    A ``BrokerResponseError`` (storage errors included) reports its own code; anything else
    — a bug, or an ``OSError`` whose ``errno`` is a POSIX number, not a Kafka code — reports
    UNKNOWN_SERVER_ERROR (-1).
    """
    if isinstance(exc, BrokerResponseError):
        return exc.errno
    return UnknownError.errno
