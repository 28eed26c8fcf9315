"""Decode each request frame and hand it to the handler of its API.

``handle(channel, frame)`` decodes the frame with ``cluster.protocol.frames`` and dispatches on the
API key:

========================  ================================  ======================================
API                       versions                          handler
========================  ================================  ======================================
Produce                   3-8                               produce_handler
Fetch                     4-11                              fetch_handler
ListOffsets               1-5                               list_offsets_handler
Metadata                  1-8                               metadata_handler
ApiVersions               0-3 (v3 flexible)                 here
CreateTopics              2-4                               admin_handler
DeleteTopics              1-3                               admin_handler
CreatePartitions          0-1                               admin_handler
DescribeConfigs           1-3                               describe_configs_handler
AlterConfigs              0-1                               admin_handler
IncrementalAlterConfigs   0                                 admin_handler
ElectLeaders              0-1                               admin_handler
AlterPartition            2-3 (flexible)                    alter_partition_handler
AllocateProducerIds       0 (flexible)                      producer_id_handler
InitProducerId            0-1                               producer_id_handler,
                                                            transaction_coordinator.handler
AddPartitionsToTxn        0-2                               transaction_coordinator.handler
AddOffsetsToTxn           0-2                               transaction_coordinator.handler
EndTxn                    0-2                               transaction_coordinator.handler
OffsetsForLeaderEpoch     2-3                               offsets_for_leader_epoch_handler
WriteTxnMarkers           1 (flexible)                      txn_markers_handler
ListTransactions          0-1 (flexible)                    transaction_coordinator.admin_handler
DescribeTransactions      0 (flexible)                      transaction_coordinator.admin_handler
DescribeProducers         0 (flexible)                      describe_producers_handler
FindCoordinator           0-2                               group_coordinator.handler
JoinGroup                 2-5                               group_coordinator.handler
SyncGroup                 1-3                               group_coordinator.handler
Heartbeat                 1-3                               group_coordinator.handler
LeaveGroup                1-3                               group_coordinator.handler
DescribeGroups            0-4                               group_coordinator.handler
ListGroups                0-2                               group_coordinator.handler
DeleteGroups              0-1                               group_coordinator.handler
OffsetCommit              2-7                               group_coordinator.offset_handler
TxnOffsetCommit           0-3 (v3 flexible)                 group_coordinator.offset_handler
OffsetFetch               1-7 (v6+ flexible)                group_coordinator.offset_handler
OffsetDelete              0                                 group_coordinator.offset_handler
========================  ================================  ======================================

ApiVersions advertises exactly these. Bad input never stops the broker:

- an ApiVersions request of a version outside 0-3 is answered with ApiVersions v0 and
  UNSUPPORTED_VERSION, listing ApiVersions' own range only (Kafka's rule, KIP-511: a newer
  client asks again at the highest version served);
- an ApiVersions v3 request whose ``client_software_name`` or ``client_software_version``
  does not match KIP-511's pattern is answered INVALID_REQUEST with no APIs (Kafka's
  ``ApiVersionsRequest.isValid``); the connection stays open;
- a frame that does not decode — garbage, a truncated body, an API or version not in the
  table — raises ``CloseConnection``:
  the broker logs it and drops that connection, as Kafka closes the socket; every other
  connection keeps being served.

``alter_partitions`` is the broker's ``AlterPartitionManager``: partition leaders submit
their ISR changes to it, and the loop polls it. ``producer_ids`` is its
``ProducerIdManager`` (the loop polls it too): InitProducerId takes ids from it, and so
does the transaction coordinator (``transactions``, a
``transaction_coordinator.runtime.TransactionRuntime``: FindCoordinator of a transactional id,
InitProducerId with one, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn; ListTransactions
and DescribeTransactions read it; its markers go
out through its ``sender``, made with the ``connector`` the broker passes in).

``refresh_metadata()`` (every loop iteration, and after this broker's controller changed
something) applies a new image to the ReplicaManager and answers parked fetches and
delayed produces of the partitions that changed, and lets the group coordinator
(``groups``, a ``group_coordinator.runtime.GroupRuntime``) and the transaction coordinator load or
unload the ``__consumer_offsets`` and ``__transaction_state`` partitions whose leadership
changed.

Delayed responses: a channel's ``parked`` is its parked Fetch (``delayed_fetch``) or a
group request waiting for the group coordinator (``delayed_response``), its ``produces``
the acks=all Produce requests waiting for replication (``delayed_produce``); ``cancel(channel)``
forgets them when the client goes away, ``expire(now)`` answers those whose time ran out and
``next_deadline()`` is the earliest. Every high-watermark move a Partition reports
(``ReplicaManager.on_high_watermark``) wakes the consumers' fetches and the delayed
produces of that partition.

Owner: the broker's loop thread, the only caller.
"""
from __future__ import annotations

import logging
import re
from time import perf_counter

from cluster.errors import InvalidRequestError, UnsupportedVersionError
from cluster.metadata.model import INTERNAL_TOPICS
from cluster.protocol import frames as protocol
from cluster.protocol.frames import ApiKey
from replica_proc.admin_handler import AdminHandler
from replica_proc.alter_partition_handler import AlterPartitionHandler
from replica_proc.alter_partition_manager import AlterPartitionManager
from replica_proc.broker_stats import TIMED_EVERY, RequestStats
from replica_proc.channel import CloseConnection
from replica_proc.delayed_fetch import FetchPurgatory
from replica_proc.delayed_produce import ProducePurgatory
from replica_proc.delayed_response import DelayedResponse
from replica_proc.describe_configs_handler import DescribeConfigsHandler
from replica_proc.describe_producers_handler import DescribeProducersHandler
from replica_proc.fetch_handler import FetchHandler
from replica_proc.group_coordinator.handler import GroupHandler
from replica_proc.group_coordinator.offset_handler import OffsetHandler
from replica_proc.group_coordinator.runtime import GroupRuntime
from replica_proc.list_offsets_handler import ListOffsetsHandler
from replica_proc.metadata_handler import MetadataHandler
from replica_proc.offsets_for_leader_epoch_handler import OffsetsForLeaderEpochHandler
from replica_proc.produce_handler import ProduceHandler
from replica_proc.producer_id_handler import AllocateProducerIdsHandler, InitProducerIdHandler
from replica_proc.producer_id_manager import ProducerIdManager
from replica_proc.responses import NO_THROTTLE, build, error, module
from replica_proc.transaction_coordinator.admin_handler import TransactionAdminHandler
from replica_proc.transaction_coordinator.handler import TransactionHandler
from replica_proc.transaction_coordinator.runtime import TransactionRuntime
from replica_proc.txn_markers_handler import WriteTxnMarkersHandler

log = logging.getLogger(__name__)

#: What an ApiVersions v3+ request's client software name and version must match (KIP-511,
#: Kafka's ``ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN``): else INVALID_REQUEST.
SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


class RequestHandler:
    """Every API this broker serves, over ``replicas`` (ReplicaManager), ``metadata``
    (BrokerMetadata), ``controller`` (this broker's Controller, or None) and ``forwarder``
    (ControllerChannel). ``clock``: the loop's monotonic seconds; ``connector``: how the
    transaction coordinator's marker sender connects to other brokers (the broker's
    ``shm_ring.connect`` with its Listener as waker; None: markers for other brokers'
    partitions fail, as with no leader to reach: tests)."""

    def __init__(self, broker_id, config, replicas, metadata, controller, forwarder, clock,
                 connector=None):
        self.replicas = replicas
        self.metadata = metadata
        self.requests = RequestStats()  # per API, for the stats page (broker_stats)
        self.purgatory = FetchPurgatory()
        self.fetch = FetchHandler(replicas, self.purgatory, clock)
        self.produce_purgatory = ProducePurgatory(lambda key: replicas.hosted(*key))
        self.produce = ProduceHandler(replicas, self.produce_purgatory, clock,
                                      self.fetch.on_append, self.on_high_watermark)
        replicas.on_high_watermark = self.on_high_watermark
        self.admin = AdminHandler(broker_id, metadata, controller, forwarder,
                                  self.refresh_metadata, clock)
        self.alter_partitions = AlterPartitionManager(broker_id, metadata, controller,
                                                      forwarder, self.refresh_metadata, clock)
        # The partitions this broker leads propose their ISR changes through it (unless
        # the ReplicaManager was given another channel: tests).
        if replicas.alter_partition is None:
            replicas.alter_partition = self.alter_partitions
        self.txn_markers = WriteTxnMarkersHandler(replicas, clock, self.fetch.on_append,
                                                  self.on_high_watermark)
        self.producer_ids = ProducerIdManager(broker_id, metadata, controller, forwarder,
                                              clock)
        self.groups = GroupRuntime(config, replicas, metadata, self.admin.create_topic, clock,
                                   self.fetch.on_append, self.on_high_watermark)
        self.txn_markers.on_marker = self.groups.on_marker
        self.transactions = TransactionRuntime(
            broker_id, metadata.namespace, config, replicas, metadata,
            self.admin.create_topic, self.producer_ids, self.txn_markers, clock,
            self.fetch.on_append, self.on_high_watermark, connector)
        transactions = TransactionHandler(self.transactions, metadata)
        #: What ``expire`` and ``next_deadline`` go through every loop turn, bound once.
        self._expirers = (self.fetch.expire, self.produce.expire, self.txn_markers.expire,
                          self.groups.expire, self.transactions.expire)
        self._deadlines = (self.fetch.next_deadline, self.produce.next_deadline,
                           self.txn_markers.next_deadline, self.groups.next_deadline,
                           self.transactions.next_deadline)
        self._handlers = {
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: ListOffsetsHandler(replicas),
            ApiKey.METADATA: MetadataHandler(broker_id, config, metadata, replicas,
                                             self.admin.auto_create),
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.CREATE_TOPICS: self.admin.create_topics,
            ApiKey.DELETE_TOPICS: self.admin.delete_topics,
            ApiKey.CREATE_PARTITIONS: self.admin.create_partitions,
            ApiKey.DESCRIBE_CONFIGS: DescribeConfigsHandler(broker_id, config, metadata),
            ApiKey.ALTER_CONFIGS: self.admin.alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.admin.incremental_alter_configs,
            ApiKey.ELECT_LEADERS: self.admin.elect_leaders,
            ApiKey.ALTER_PARTITION: AlterPartitionHandler(controller, self.refresh_metadata),
            ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetsForLeaderEpochHandler(replicas),
            ApiKey.WRITE_TXN_MARKERS: self.txn_markers,
            ApiKey.INIT_PRODUCER_ID: InitProducerIdHandler(self.producer_ids,
                                                           transactions.init_producer_id),
            ApiKey.ALLOCATE_PRODUCER_IDS: AllocateProducerIdsHandler(controller),
            ApiKey.DESCRIBE_PRODUCERS: DescribeProducersHandler(replicas),
            **TransactionAdminHandler(self.transactions.coordinator).handlers(),
            **GroupHandler(self.groups, self.transactions, metadata, clock).handlers(),
            **transactions.handlers(),
            **OffsetHandler(self.groups, metadata, clock).handlers(),
        }

    def refresh_metadata(self):
        """Apply the newest image if the metadata moved; True if it did."""
        image = self.metadata.refresh()
        if image is None:
            return False
        changed = self.replicas.apply(image)
        if changed:
            self.fetch.on_change(changed)
            self.produce.on_change(changed)
            self.txn_markers.on_change(changed)
            self.groups.on_change(changed)
            self.transactions.on_change(changed)
        return True

    def on_high_watermark(self, partition, old_high_watermark, size=None):
        """``partition``'s HW moved up from ``old_high_watermark`` (``size``: the bytes
        that came below it, if known): answer what that completes."""
        key = (partition.topic, partition.index)
        self.fetch.on_high_watermark(key, partition, old_high_watermark, size)
        self.produce.on_high_watermark(key)
        self.txn_markers.on_high_watermark(key)
        if key[0] in INTERNAL_TOPICS:  # the coordinators wait on their own topics only
            self.groups.on_high_watermark(key)
            self.transactions.on_high_watermark(key)

    # -- delayed responses ------------------------------------------------------------------

    def expire(self, now):
        """Answer the parked fetches and delayed produces whose time ran out by ``now``;
        run the coordinators' timers (and time out their writes)."""
        for expire in self._expirers:
            expire(now)

    def next_deadline(self):
        """The earliest deadline of a parked fetch, a delayed produce or a coordinator, or
        None."""
        earliest = None
        for next_deadline in self._deadlines:
            deadline = next_deadline()
            if deadline is not None and (earliest is None or deadline < earliest):
                earliest = deadline
        return earliest

    def cancel(self, channel):
        """The channel's client went away: forget its delayed response, if any."""
        for produce in channel.forget_produces():
            self.produce.cancel(produce)
        parked = channel.parked
        if parked is None:
            return
        channel.parked = None
        if isinstance(parked, DelayedResponse):
            parked.cancel()
        else:
            self.fetch.cancel(parked)

    def handle(self, channel, frame):
        """Serve one request frame of ``channel`` (answered now, later, or never for
        acks=0); CloseConnection when the connection must be dropped."""
        try:
            header, request = protocol.decode_request(frame)
        except UnsupportedVersionError as exc:
            header = exc.header
            if header is None or header.request_api_key != ApiKey.API_VERSIONS:
                raise CloseConnection(str(exc)) from None
            classes = module(ApiKey.API_VERSIONS, 0)
            low, high = protocol.SUPPORTED_VERSIONS[ApiKey.API_VERSIONS]
            own = classes.ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=low,
                                     max_version=high)
            channel.send(protocol.encode_response(
                build(classes.ApiVersionsResponse,
                      error_code=error(UnsupportedVersionError.errno), api_keys=(own,)),
                header.correlation_id))
            return
        except InvalidRequestError as exc:
            raise CloseConnection(str(exc)) from None
        handler = self._handlers.get(header.request_api_key)
        if handler is None:
            raise CloseConnection(
                f"{ApiKey(header.request_api_key).name} (correlation_id "
                f"{header.correlation_id}) is not served by this broker yet")
        key = header.request_api_key
        counts = self.requests.counts
        counts[key] = count = counts[key] + 1
        if count % TIMED_EVERY != 1:
            handler(channel, header, request)
            return
        started = perf_counter()
        handler(channel, header, request)
        self.requests.record(key, perf_counter() - started)

    # -- ApiVersions ------------------------------------------------------------------------

    def _api_versions(self, channel, header, request):
        version = header.request_api_version
        classes = module(ApiKey.API_VERSIONS, version)
        if version >= 3 and not (
                SOFTWARE_NAME_VERSION.fullmatch(request.client_software_name)
                and SOFTWARE_NAME_VERSION.fullmatch(request.client_software_version)):
            log.info("ApiVersions v%d (correlation_id %d, client_id %r) refused: "
                     "client_software_name %r / client_software_version %r do not match "
                     "%s", version, header.correlation_id, header.client_id,
                     request.client_software_name, request.client_software_version,
                     SOFTWARE_NAME_VERSION.pattern)
            code, keys = InvalidRequestError.errno, ()
        else:
            code = 0
            keys = tuple(
                classes.ApiVersion(api_key=int(key), min_version=low, max_version=high)
                for key, (low, high) in sorted(protocol.SUPPORTED_VERSIONS.items())
                if key in self._handlers)
        channel.send(protocol.encode_response(
            build(classes.ApiVersionsResponse, error_code=error(code), api_keys=keys,
                  throttle_time=NO_THROTTLE),
            header.correlation_id))
