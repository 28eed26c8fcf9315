"""The broker's producer ids: handed out from blocks the controller allocates (Kafka's
``RPCProducerIdManager``, KIP-730).

``generate_producer_id()`` returns the next id of the broker's current block. Blocks come
from the active controller (``controller.producer_ids``): through
``Controller.allocate_producer_ids`` at once when this broker is the active controller,
else as an AllocateProducerIds request (v0) through the broker's ``ControllerChannel`` to
the controller the metadata names. The next block is asked for ahead of exhaustion, once
``PREFETCH_THRESHOLD`` of the current one is used, so a busy broker rarely waits; when no
id is at hand (the first call, or a block used up before the next came),
``generate_producer_id`` raises CoordinatorLoadInProgressError and the request goes out
at the next ``poll()`` — the client retries InitProducerId on that error (Kafka's broker
answers the same while its block is on the way). A lost connection, NOT_CONTROLLER or an
unreachable controller is tried again after a backoff (``retry_backoff`` doubled after
each failure in a row, up to ``RETRY_BACKOFF_MAX``); another error is logged and tried
again after the same backoff. A block that arrives is never handed out twice, and one the
broker does not finish (it stops) is simply lost: ids are never reused.

This is the allocator the transaction coordinator uses too (InitProducerId with a
``transactional_id`` takes a new producer id when the transactional id has none, or its
epoch is used up).

Owner: the broker's loop thread: ``generate_producer_id`` (from request handlers) and
``poll`` are called from it.
"""
from __future__ import annotations

import logging

from cluster.errors import CoordinatorLoadInProgressError, NotControllerError
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.controller.producer_ids import ProducerIdsBlock

log = logging.getLogger(__name__)

PREFETCH_THRESHOLD = 0.9
"""Fraction of the current block used before the next is asked for (Kafka's 0.90)."""

RETRY_BACKOFF = 0.1
"""Seconds before a failed AllocateProducerIds is tried again (Kafka's 100 ms)."""

RETRY_BACKOFF_MAX = 1.0

_VERSION = protocol.SUPPORTED_VERSIONS[ApiKey.ALLOCATE_PRODUCER_IDS][1]
_NO_BROKER_EPOCH = -1


class ProducerIdManager:
    """Broker ``broker_id``'s producer ids (module doc). ``metadata``: its BrokerMetadata
    (``image.controller_id``); ``controller``: its Controller or None; ``channel``: its
    ControllerChannel; ``clock``: monotonic seconds."""

    def __init__(self, broker_id, metadata, controller, channel, clock,
                 retry_backoff=RETRY_BACKOFF):
        self.broker_id = broker_id
        self._metadata = metadata
        self._controller = controller
        self._channel = channel
        self._clock = clock
        self._retry_backoff = retry_backoff
        self._block = None       # the ProducerIdsBlock ids are handed out from
        self._next_id = 0        # the next id of _block to hand out
        self._prefetched = None  # the block to use when _block is used up
        self._wanted = False     # a block should be asked for
        self._in_flight = False  # an AllocateProducerIds request is out
        self._answers = []       # responses (or None) that arrived, handled by poll()
        self._next_send = float("-inf")
        self._failures = 0

    def generate_producer_id(self):
        """The next producer id, never handed out before by any broker; raises
        CoordinatorLoadInProgressError when no block is at hand yet (one is asked for)."""
        if self._block is None or self._next_id > self._block.last_id:
            self._block, self._prefetched = self._prefetched, None
            if self._block is not None:
                self._next_id = self._block.first_id
        if self._block is None:
            self._want_block()
            if self._block is None:
                raise CoordinatorLoadInProgressError(
                    f"broker {self.broker_id} is waiting for a block of producer ids from "
                    f"the controller")
            self._next_id = self._block.first_id
        producer_id = self._next_id
        self._next_id += 1
        block = self._block
        if (self._prefetched is None and
                self._next_id - block.first_id >= PREFETCH_THRESHOLD * block.size):
            self._want_block()
        return producer_id

    def _want_block(self):
        self._wanted = True
        controller = self._controller
        if controller is not None and controller.active and not self._in_flight:
            self._local(controller)  # one fsynced metadata-log append, once per block

    def poll(self):
        """Hand out the answers that arrived; ask for a block when one is wanted. Never
        waits for an answer."""
        answers, self._answers = self._answers, []
        for response in answers:
            self._answered(response)
        if not self._wanted or self._in_flight or self._clock() < self._next_send:
            return
        controller = self._controller
        if controller is not None and controller.active:
            self._local(controller)
        else:
            self._remote()

    # -- asking -------------------------------------------------------------------------------

    def _local(self, controller):
        try:
            block = controller.allocate_producer_ids(self.broker_id, _NO_BROKER_EPOCH)
        except Exception as exc:  # NotControllerError, UnknownError (ids used up)
            log.warning("broker %d: no block of producer ids from its own controller: %s",
                        self.broker_id, exc)
            self._back_off()
            return
        self._received(block)

    def _remote(self):
        controller_id = self._metadata.image.controller_id
        classes = protocol.request_module(ApiKey.ALLOCATE_PRODUCER_IDS, _VERSION)
        request = classes.AllocateProducerIdsRequest(broker_id=self.broker_id,
                                                     broker_epoch=_NO_BROKER_EPOCH)
        if self._channel.send(controller_id, request,
                              lambda response: self._answers.append(response)):
            self._in_flight = True
        else:
            self._back_off()

    def _answered(self, response):
        self._in_flight = False
        if response is None or response.error_code != 0:
            code = None if response is None else int(response.error_code)
            if code is not None and code != NotControllerError.errno:
                log.warning("broker %d: AllocateProducerIds failed with error %d",
                            self.broker_id, code)
            self._back_off()
            return
        self._received(ProducerIdsBlock(self.broker_id, response.producer_id_start,
                                        response.producer_id_len))

    def _received(self, block):
        self._failures = 0
        self._wanted = False
        if self._block is None or self._next_id > self._block.last_id:
            self._block, self._next_id = block, block.first_id
        else:
            self._prefetched = block
        log.info("broker %d got producer ids %d..%d", self.broker_id, block.first_id,
                 block.last_id)

    def _back_off(self):
        backoff = min(self._retry_backoff * 2 ** self._failures, RETRY_BACKOFF_MAX)
        self._failures += 1
        self._next_send = self._clock() + backoff

