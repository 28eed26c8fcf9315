"""InitProducerId v0-1 (a producer asks for its id) and AllocateProducerIds v0 (a broker asks
the controller for a block of ids, KIP-730).

InitProducerId without a ``transactional_id`` (the idempotent producer): a producer id
from the broker's ``ProducerIdManager``, epoch 0 — any broker answers it, as in Kafka.
While the broker waits for a block from the controller the answer is
COORDINATOR_LOAD_IN_PROGRESS (retriable: the producer asks again after its backoff).
With a ``transactional_id`` the request goes to the transaction coordinator
(``transaction_coordinator.handler.TransactionHandler.init_producer_id``).

AllocateProducerIds is answered by the active controller only (NOT_CONTROLLER
elsewhere, the asking broker then sends it again to the controller the metadata names):
``Controller.allocate_producer_ids``, the block committed to the metadata log before the
answer goes out.

Owner: the broker's loop thread.
"""
from __future__ import annotations

from cluster.errors import NotControllerError
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.responses import NO_THROTTLE, build, code_of, error, module

#: The epoch of a new producer id.
FIRST_EPOCH = 0


class InitProducerIdHandler:
    """InitProducerId over the broker's ``ProducerIdManager`` and, for a transactional
    id, ``transactional(channel, header, request)`` (module doc)."""

    def __init__(self, producer_ids, transactional):
        self._producer_ids = producer_ids
        self._transactional = transactional

    def __call__(self, channel, header, request):
        if request.transactional_id is not None:
            self._transactional(channel, header, request)
            return
        classes = module(ApiKey.INIT_PRODUCER_ID, header.request_api_version)
        producer_id, epoch, code = -1, -1, 0
        try:
            producer_id, epoch = self._producer_ids.generate_producer_id(), FIRST_EPOCH
        except Exception as exc:
            code = code_of(exc, "InitProducerId")
        response = build(classes.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                         error_code=error(code), producer_id=producer_id,
                         producer_epoch=epoch)
        channel.send(protocol.encode_response(response, header.correlation_id))


class AllocateProducerIdsHandler:
    """AllocateProducerIds against ``controller`` (None: this broker never runs one)."""

    def __init__(self, controller):
        self._controller = controller

    def __call__(self, channel, header, request):
        classes = module(ApiKey.ALLOCATE_PRODUCER_IDS, header.request_api_version)
        controller = self._controller
        start, length, code = -1, 0, 0
        if controller is None or not controller.active:
            code = NotControllerError.errno
        else:
            try:
                block = controller.allocate_producer_ids(request.broker_id,
                                                         request.broker_epoch)
                start, length = block.first_id, block.size
            except Exception as exc:
                code = code_of(exc, "AllocateProducerIds")
        response = build(classes.AllocateProducerIdsResponse, throttle_time=NO_THROTTLE,
                         error_code=error(code), producer_id_start=start,
                         producer_id_len=length)
        channel.send(protocol.encode_response(response, header.correlation_id))
