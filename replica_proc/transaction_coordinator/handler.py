"""InitProducerId v0-1 with a ``transactional_id``, AddPartitionsToTxn v0-2,
AddOffsetsToTxn v0-2, EndTxn v0-2: the transactional producer's requests to its
transaction coordinator, decoded here and decided by the broker's
``TransactionCoordinator`` (``transaction_coordinator.runtime``).

Each request parks its channel (``delayed_response``) and is answered when the
coordinator's Result carries the answer — at once, or once its ``__transaction_state``
write is replicated. PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH to these
versions (``results.client_error``, KIP-588). Every request makes sure
``__transaction_state`` exists (created on first use).

AddPartitionsToTxn checks the partitions first, as Kafka's ``KafkaApis`` does: when one
does not exist in the metadata, those answer UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED, and the coordinator is not asked; otherwise every partition
answers the coordinator's error. AddOffsetsToTxn adds the group's ``__consumer_offsets``
partition to the transaction. Either, arriving while the previous transaction of its id
still writes its markers, waits for them instead of being answered
CONCURRENT_TRANSACTIONS (``TransactionRuntime.call_after_completion``).

Owner: the broker's loop thread.
"""
from __future__ import annotations

import datetime

from cluster.errors import OperationNotAttemptedError, UnknownTopicOrPartitionError
from cluster.protocol.frames import ApiKey
from replica_proc.delayed_response import DelayedResponse
from replica_proc.responses import NO_THROTTLE, build, encoder, error, module
from replica_proc.transaction_coordinator.results import client_error

_MS = datetime.timedelta(milliseconds=1)


class TransactionHandler:
    """The transactional producer's APIs over ``runtime`` (a TransactionRuntime);
    ``metadata``: the BrokerMetadata (which partitions exist)."""

    def __init__(self, runtime, metadata):
        self._runtime = runtime
        self._coordinator = runtime.coordinator
        self._metadata = metadata

    def handlers(self):
        """{ApiKey: handler(channel, header, request)} (InitProducerId is routed here by
        ``producer_id_handler`` when it names a transactional id)."""
        return {
            ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            ApiKey.END_TXN: self.end_txn,
        }

    def _call(self, channel, header, operation, answer, opens=None):
        """Park ``channel``, run ``operation()``'s Result and answer with
        ``answer(Answer with its client error code)``'s response. ``opens``: the
        transactional id of a call that may open its transaction (AddPartitionsToTxn,
        AddOffsetsToTxn): it waits for the id's previous transaction to complete
        (``TransactionRuntime.call_after_completion``)."""
        self._runtime.topic()
        api_key, version = header.request_api_key, header.request_api_version

        def respond(result):
            code = client_error(api_key, version, result.error)
            parked.send(encoder(header, answer(code, result)))

        parked = DelayedResponse(channel)
        if opens:
            self._runtime.call_after_completion(opens, operation, respond)
        else:
            self._runtime.run(operation(), respond)

    def init_producer_id(self, channel, header, request):
        classes = module(ApiKey.INIT_PRODUCER_ID, header.request_api_version)
        self._call(channel, header, lambda: self._coordinator.init_producer_id(
            request.transactional_id, int(request.transaction_timeout / _MS)),
            lambda code, result: build(
                classes.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                error_code=error(code), producer_id=result.producer_id if not code else -1,
                producer_epoch=result.producer_epoch if not code else -1))

    def add_partitions_to_txn(self, channel, header, request):
        classes = module(ApiKey.ADD_PARTITIONS_TO_TXN, header.request_api_version)
        topics = {}
        for topic in request.v3_and_below_topics:
            topics.setdefault(topic.name, {}).update(dict.fromkeys(topic.partitions))
        partitions = {(name, p) for name, indexes in topics.items() for p in indexes}

        def answer(codes):
            return build(classes.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE,
                         results_by_topic_v3_and_below=tuple(build(
                             classes.AddPartitionsToTxnTopicResult, name=name,
                             results_by_partition=tuple(build(
                                 classes.AddPartitionsToTxnPartitionResult,
                                 partition_index=p, partition_error_code=error(codes(name, p)))
                                 for p in indexes))
                             for name, indexes in topics.items()))

        missing = {tp for tp in partitions if not self._exists(*tp)}
        if missing:
            self._runtime.topic()
            channel.send(encoder(header, answer(
                lambda *tp: UnknownTopicOrPartitionError.errno if tp in missing
                else OperationNotAttemptedError.errno))())
            return
        self._call(channel, header, lambda: self._coordinator.add_partitions(
            request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, partitions),
            lambda code, result: answer(lambda *tp: code),
            opens=request.v3_and_below_transactional_id)

    def _exists(self, topic, partition):
        info = self._metadata.image.topics.get(topic)
        return info is not None and 0 <= partition < len(info.partitions)

    def add_offsets_to_txn(self, channel, header, request):
        classes = module(ApiKey.ADD_OFFSETS_TO_TXN, header.request_api_version)
        self._call(channel, header, lambda: self._coordinator.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.group_id),
            lambda code, result: build(classes.AddOffsetsToTxnResponse,
                                       throttle_time=NO_THROTTLE, error_code=error(code)),
            opens=request.transactional_id)

    def end_txn(self, channel, header, request):
        classes = module(ApiKey.END_TXN, header.request_api_version)
        self._call(channel, header, lambda: self._coordinator.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.committed),
            lambda code, result: build(classes.EndTxnResponse, throttle_time=NO_THROTTLE,
                                       error_code=error(code)))
