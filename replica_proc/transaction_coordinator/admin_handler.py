"""ListTransactions v0-1 and DescribeTransactions v0 (KIP-664, what ``kafka-transactions.sh
list`` / ``describe`` ask): the transaction coordinator's view of its transactional ids,
answered at once from the broker's ``TransactionCoordinator`` (``transaction_coordinator.runtime``).

ListTransactions lists the ids of every ``__transaction_state`` partition this broker
leads (an admin client asks every broker); COORDINATOR_LOAD_IN_PROGRESS while one of them
loads. Its filters are Kafka's: ``state_filters`` by Kafka's state names (a name Kafka does
not know comes back in ``unknown_state_filters`` and matches nothing),
``producer_id_filters``, and v1's ``duration_filter`` (>= 0: transactions started more
than that many milliseconds ago).

DescribeTransactions answers each id: INVALID_REQUEST for an empty one; NOT_COORDINATOR
or COORDINATOR_LOAD_IN_PROGRESS when its partition is not (yet) here;
TRANSACTIONAL_ID_NOT_FOUND for an id the coordinator does not hold (or is expiring);
else its state name, timeout, start time (-1: no transaction), producer id and epoch, and
the partitions of its transaction (while it ends, those still without a marker). An
error's other fields are Kafka's defaults (0, "").

Owner: the broker's loop thread.
"""
from __future__ import annotations

import datetime

from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.responses import NO_THROTTLE, build, error, module
from replica_proc.transaction_coordinator.states import TransactionState

#: ListTransactions v1's ``duration_filter`` that filters nothing.
NO_DURATION_FILTER = -1


class TransactionAdminHandler:
    """ListTransactions and DescribeTransactions over ``coordinator`` (the broker's
    TransactionCoordinator)."""

    def __init__(self, coordinator):
        self._coordinator = coordinator

    def handlers(self):
        """{ApiKey: handler(channel, header, request)}."""
        return {
            ApiKey.LIST_TRANSACTIONS: self.list_transactions,
            ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
        }

    def list_transactions(self, channel, header, request):
        classes = module(ApiKey.LIST_TRANSACTIONS, header.request_api_version)
        states = unknown = None
        if request.state_filters:
            states, unknown = set(), []
            for name in request.state_filters:
                state = TransactionState.from_kafka_name(name)
                if state is None:
                    unknown.append(name)
                else:
                    states.add(state)
        code, listed = self._coordinator.transactions(
            states, set(request.producer_id_filters),
            getattr(request, "duration_filter", NO_DURATION_FILTER))
        response = build(
            classes.ListTransactionsResponse, throttle_time=NO_THROTTLE, error_code=error(code),
            unknown_state_filters=tuple(unknown or ()),
            transaction_states=tuple(build(
                classes.TransactionState, transactional_id=m.transactional_id,
                producer_id=m.producer_id, transaction_state=m.state.kafka_name)
                for m in sorted(listed, key=lambda m: m.transactional_id)))
        channel.send(protocol.encode_response(response, header.correlation_id))

    def describe_transactions(self, channel, header, request):
        classes = module(ApiKey.DESCRIBE_TRANSACTIONS, header.request_api_version)
        states = []
        for transactional_id in request.transactional_ids:
            code, m = self._coordinator.describe(transactional_id)
            if m is None:
                states.append(build(
                    classes.TransactionState, error_code=error(code),
                    transactional_id=transactional_id, transaction_state="",
                    transaction_timeout=datetime.timedelta(0), transaction_start_time=0,
                    producer_id=0, producer_epoch=0, topics=()))
                continue
            by_topic = {}
            for topic, partition in sorted(m.partitions):
                by_topic.setdefault(topic, []).append(partition)
            states.append(build(
                classes.TransactionState, error_code=error(code),
                transactional_id=transactional_id, transaction_state=m.state.kafka_name,
                transaction_timeout=datetime.timedelta(milliseconds=m.timeout_ms),
                transaction_start_time=m.start_ms, producer_id=m.producer_id,
                producer_epoch=m.producer_epoch,
                topics=tuple(build(classes.TopicData, topic=topic, partitions=tuple(indexes))
                             for topic, indexes in by_topic.items())))
        response = build(classes.DescribeTransactionsResponse, throttle_time=NO_THROTTLE,
                         transaction_states=tuple(states))
        channel.send(protocol.encode_response(response, header.correlation_id))
