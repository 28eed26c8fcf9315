"""A stand-in cluster for client tests: brokers as threads of the test process.

``FakeCluster(tmp_path, brokers=2)`` writes ``D/meta.properties``, creates the metadata page
and publishes an image, as the supervisor and controller would; each ``FakeBroker`` is a
shm_ring Listener served by a thread, answering ApiVersions, Metadata, Produce, Fetch,
ListOffsets (earliest and latest), CreateTopics, DeleteTopics and CreatePartitions with
cluster.protocol.frames. Produced batches are validated (CRC) and kept per partition with
their offsets, so tests can read back what arrived; ``append(topic, partition, values)``
stores records as a producer would. The partition's log is one list shared by the brokers
(every record committed, high watermark = log end): after ``move_leader`` the new leader
serves the same log, as an in-sync follower would. Fetch and ListOffsets check leadership
and ``current_leader_epoch`` as a Kafka leader does (NOT_LEADER_OR_FOLLOWER;
FENCED_LEADER_EPOCH below the partition's epoch, UNKNOWN_LEADER_EPOCH above it) and answer
OFFSET_OUT_OF_RANGE outside [0, log end]. Faults are injected by the test:
``fail_next(topic, partition, code, times, api="PRODUCE")`` makes the partition's next
``times`` Produce (or "FETCH", "LIST_OFFSETS") answers that error code, ``truncate`` cuts a
log back (a leader elected uncleanly, missing the tail), ``stop_broker(id)`` closes a
listener (clients see the broker go away), ``start_broker(id)`` brings it back,
``move_leader`` changes leadership (and bumps the leader epoch; moving it to the same
broker only bumps the epoch),
``broker.paused`` (an Event) stops a broker from reading requests, ``broker.tamper`` (a
function of the response frame) alters what it answers, ``report_controllers`` (a list)
makes the next Metadata responses name those controllers instead of the real one.

Groups have two models, one per kind of test. ``group_model = "coordinator"`` (the
default, for consumers; tests/support/fake_coordinator.py): broker ``coordinator_id`` (0)
is the coordinator of every group, served by the broker's own group coordinator state
machine;
the other brokers answer NOT_COORDINATOR. ``move_coordinator(id)`` fails it over (groups
reloaded from what was stored); ``fail_next(group_id, None, code, api="JOIN_GROUP")``
(or "FIND_COORDINATOR", "SYNC_GROUP", "HEARTBEAT", "LEAVE_GROUP", "OFFSET_COMMIT",
"OFFSET_FETCH") injects errors as for partitions.
``group_model = "admin"`` (the admin client's and consumer-groups' tests, which place
groups as they please): ``add_group(group_id, state, members)``
places a group (FakeMember tuples: id, client id, host, subscribed topics, assignment) at
its coordinator, ``coordinators[group_id] = broker`` moves it (default: the lowest live
broker), ``commit`` stores a committed offset. FindCoordinator, DescribeGroups (an unknown
group is ``Dead``), ListGroups, DeleteGroups (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND),
OffsetFetch, OffsetCommit (generation -1 only for a group without members, else
UNKNOWN_MEMBER_ID) and OffsetDelete (GROUP_SUBSCRIBED_TO_TOPIC for a topic a member
subscribes to) answer as Kafka's coordinator does; any other broker answers
NOT_COORDINATOR. ``fail_next(group_id, None, code, api="FIND_COORDINATOR")`` (or another
group API's name) queues errors as for partitions. ListOffsets by timestamp answers the
first offset whose record's timestamp is at or after it (-1 if none).

Idempotent producers: InitProducerId hands out producer ids from ``next_producer_id``
(epoch 0; ``fail_next(None, None, code, api="INIT_PRODUCER_ID")`` injects errors), and a
batch with a producer id is checked as a Kafka leader checks it, per partition and
producer: an older epoch is INVALID_PRODUCER_EPOCH, a newer one must start at sequence 0,
a batch equal to one of the producer's last five is a duplicate (answered with its
original base offset, nothing stored), any other sequence than the one after the last is
OUT_OF_ORDER_SEQUENCE_NUMBER; a producer the partition has never seen may start anywhere.
``fail_next(topic, partition, code, api="PRODUCE_AFTER_APPEND")`` stores the batch and
then answers the error — a response lost after the append, as when a leader dies after
writing.

Transactions: broker ``txn_coordinator`` (0) is the transaction coordinator of every
transactional id (FindCoordinator key type 1; the others answer NOT_COORDINATOR).
InitProducerId with a transactional id gives a new id a producer id at epoch 0 and an
known one its producer id at the next epoch (an open transaction is aborted: the older
producer is fenced); AddPartitionsToTxn, AddOffsetsToTxn and EndTxn check the producer id
(INVALID_PRODUCER_ID_MAPPING) and epoch (an older one: INVALID_PRODUCER_EPOCH, as Kafka
answers these versions) and keep ``transactions[transactional_id]`` (FakeTransaction:
partitions, groups, the offsets of TxnOffsetCommit, and ``ended``: (committed, partitions,
offsets) per transaction ended). TxnOffsetCommit goes to the group's coordinator
(NOT_COORDINATOR elsewhere); a commit stores its offsets in ``txn_committed[group]``. A
transactional batch for a partition its producer has not added answers INVALID_TXN_STATE.
``fail_next(transactional_id, None, code, api=...)`` (api "FIND_COORDINATOR",
"INIT_PRODUCER_ID" with topic None, "ADD_PARTITIONS_TO_TXN", "ADD_OFFSETS_TO_TXN",
"END_TXN"; "TXN_OFFSET_COMMIT" keyed by group id) injects errors.

Not a broker: no logs on disk, no purgatory; just enough of the protocol, kept simple.
The ``fake_cluster`` fixture that makes and closes them is in tests/conftest.py.
"""
from __future__ import annotations

import dataclasses
import datetime
import threading
import uuid

from kio.schema.errors import ErrorCode

from cluster.metadata import data_dir as dd
from cluster.metadata.model import BrokerInfo, MetadataImage, PartitionState, TopicInfo
from cluster.metadata.page import MetadataPage
from cluster.protocol import consumer_protocol, frames as protocol
from cluster.protocol.frames import ApiKey
from segments.record.batch_header import BatchHeader
from segments.record.records import RecordBatch, RecordBatchBuilder
from shm_ring import Listener
from shm_ring.naming import cleanup_stale, list_objects
from shm_ring.wakeup import WaitPolicy
from tests.support.fake_coordinator import GROUP_APIS, FakeGroupCoordinator, Parked

FAST = WaitPolicy(spin=20, poll_interval=0.02)
NO_TIME = datetime.timedelta(0)


class FakeCluster:
    """The shared state of the fake brokers (module doc). Thread-safe: one lock."""

    def __init__(self, data_dir, brokers=2, auto_create=True, num_partitions=1,
                 group_config=None, group_model="coordinator"):
        self.data_dir = str(data_dir)
        self.cluster_id = dd.ensure_cluster_id(self.data_dir)
        self.auto_create = auto_create
        self.num_partitions = num_partitions
        self.lock = threading.Lock()
        self.page = MetadataPage.create(self.cluster_id, size=1 << 20)
        self.image = MetadataImage.empty(self.cluster_id).replace(
            controller_id=min(range(brokers)),
            brokers={i: BrokerInfo(i, 0, True) for i in range(brokers)})
        self.logs = {}        # (topic, partition) -> list of (base_offset, batch bytes)
        self.failures = {}    # (api name, topic, partition) -> [error code, ...] to answer next
        self.requests = []    # (broker id, api key name, request) in arrival order
        self.report_controllers = []
        self.next_producer_id = 1000
        self.producers = {}  # (topic, partition, producer id) -> [epoch, [(first seq,
        #                      last seq, base offset) of its last five batches]]
        self.groups = {}        # group id -> FakeGroup
        self.coordinators = {}  # group id -> broker id (default: the lowest live broker)
        self.group_model = group_model  # "coordinator" or "admin": see the module doc
        self.coordinator_id = 0
        self.txn_coordinator = 0
        self.transactions = {}  # transactional id -> FakeTransaction
        self.txn_committed = {}  # group id -> {(topic, partition): offset} committed in txns
        self.group_coordinator = FakeGroupCoordinator(group_config)
        self.brokers = {}
        self.page.publish(self.image)
        for broker_id in range(brokers):
            self.start_broker(broker_id)

    # -- the test's controls ---------------------------------------------------------------

    def start_broker(self, broker_id):
        broker = FakeBroker(self, broker_id)
        self.brokers[broker_id] = broker
        self._set_alive(broker_id, True)
        return broker

    def stop_broker(self, broker_id):
        """Close the broker's listener (clients get PeerClosedError) and mark it dead."""
        self.brokers.pop(broker_id).stop()
        self._set_alive(broker_id, False)

    def fence_broker(self, broker_id):
        """Mark the broker dead on the page, as a controller fences a broker whose heartbeats
        stopped; its thread keeps running (paused, it answers nothing: a hung broker)."""
        self._set_alive(broker_id, False)

    def _set_alive(self, broker_id, alive):
        with self.lock:
            brokers = dict(self.image.brokers)
            brokers[broker_id] = BrokerInfo(broker_id, 0, alive)
            self._publish(brokers=brokers)

    def _publish(self, **changes):
        self.image = self.image.replace(**changes)
        self.page.publish(self.image)

    def create_topic(self, name, partitions=1, leaders=None):
        with self.lock:
            self._create(name, partitions, leaders)

    def _create(self, name, count, leaders=None):
        live = [b for b, info in sorted(self.image.brokers.items()) if info.alive]
        leaders = leaders or [live[p % len(live)] for p in range(count)]
        states = tuple(PartitionState(name, p, leaders[p], 0, (leaders[p],), (leaders[p],))
                       for p in range(count))
        topics = dict(self.image.topics)
        topics[name] = TopicInfo(name, str(uuid.uuid4()), states, {})
        self._publish(topics=topics)

    def move_leader(self, topic, partition, leader):
        with self.lock:
            info = self.image.topics[topic]
            states = list(info.partitions)
            old = states[partition]
            states[partition] = PartitionState(topic, partition, leader, old.leader_epoch + 1,
                                               (leader,), (leader,))
            topics = dict(self.image.topics)
            topics[topic] = TopicInfo(topic, info.topic_id, tuple(states), info.configs)
            self._publish(topics=topics)

    def move_coordinator(self, broker_id):
        """Make ``broker_id`` the groups' coordinator: the old one's parked requests get
        NOT_COORDINATOR and the groups are loaded afresh from what was stored."""
        with self.lock:
            self.group_coordinator.failover()
            self.coordinator_id = broker_id

    def fail_next(self, topic, partition, code, times=1, api="PRODUCE"):
        with self.lock:
            self.failures.setdefault((api, topic, partition), []).extend([int(code)] * times)

    def _injected(self, api, topic, partition):
        """The next error code queued by ``fail_next`` for this request, or None; caller
        holds the lock."""
        queued = self.failures.get((api, topic, partition))
        return queued.pop(0) if queued else None

    def append(self, topic, partition, values, timestamp_ms=0):
        """Store one batch of records with ``values`` (no keys) as its leader would; returns
        its base offset."""
        builder = RecordBatchBuilder()
        for value in values:
            builder.append(timestamp_ms, None, value)
        with self.lock:
            state = self.image.partition(topic, partition)
            return _store(self.logs.setdefault((topic, partition), []), builder.build(),
                          state.leader_epoch)

    def truncate(self, topic, partition, end_offset):
        """Drop the batches of the partition from the one holding ``end_offset`` on."""
        with self.lock:
            log = self.logs.get((topic, partition), [])
            log[:] = [(base, data) for base, data in log
                      if base + BatchHeader(data).record_count <= end_offset]

    def records(self, topic, partition):
        """Every record stored for the partition, in offset order (Record tuples)."""
        with self.lock:
            stored = list(self.logs.get((topic, partition), []))
        return [record for _, data in stored for record in RecordBatch(data)]

    def batches(self, topic, partition):
        with self.lock:
            return list(self.logs.get((topic, partition), []))

    def add_group(self, group_id, state="Stable", members=(), protocol="range",
                  protocol_type="consumer"):
        """Place a group at its coordinator: ``members`` FakeMember tuples."""
        with self.lock:
            group = self.groups.setdefault(group_id, FakeGroup())
            group.state, group.protocol, group.protocol_type = state, protocol, protocol_type
            group.members = list(members)
            return group

    def commit(self, group_id, topic, partition, offset, metadata="", leader_epoch=-1):
        """Store a committed offset of the group (created Empty if unknown)."""
        with self.lock:
            group = self.groups.setdefault(group_id, FakeGroup())
            group.offsets[(topic, partition)] = (offset, leader_epoch, metadata)

    def committed(self, group_id):
        """``{(topic, partition): offset}`` committed for the group."""
        with self.lock:
            group = self.groups.get(group_id)
            return {} if group is None else {k: v[0] for k, v in group.offsets.items()}

    def coordinator(self, group_id):
        """The broker id coordinating ``group_id``; caller holds the lock."""
        live = [b for b, info in sorted(self.image.brokers.items()) if info.alive]
        return self.coordinators.get(group_id, live[0] if live else -1)

    def close(self):
        """Stop every broker and remove the page; returns the names of objects clients left
        behind (then removes them too)."""
        for broker in list(self.brokers.values()):
            broker.stop()
        self.brokers.clear()
        self.page.unlink()
        self.page.close()
        leftovers = list_objects(self.cluster_id)
        cleanup_stale(self.cluster_id)
        return leftovers


class FakeBroker:
    """One broker: a Listener and the thread that serves it."""

    def __init__(self, cluster, broker_id):
        self.cluster = cluster
        self.broker_id = broker_id
        self.listener = Listener(cluster.cluster_id, broker_id, policy=FAST,
                                 liveness_interval=0.02)
        self.paused = threading.Event()
        self.tamper = None
        self._parked = {}  # connection -> Parked response it waits for (it is not read)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"fake-broker-{broker_id}",
                                        daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        self.listener.close()

    def _serve(self):
        listener = self.listener
        while not self._stop.is_set():
            listener.wait(timeout=0.02)
            listener.accept_pending()
            if self.cluster.coordinator_id == self.broker_id:
                with self.cluster.lock:
                    self.cluster.group_coordinator.poll()
            if not self.paused.is_set():
                for connection, parked in list(self._parked.items()):
                    if parked.frame is not None:
                        del self._parked[connection]
                        self._send(connection, parked.frame)
                for connection in listener.ready():
                    while connection not in self._parked and \
                            (frame := connection.recv()) is not None:
                        answer = self._handle(bytes(frame))
                        del frame
                        if isinstance(answer, Parked):
                            self._parked[connection] = answer
                        elif answer is not None:
                            self._send(connection, answer)
                    connection.release()
            for connection in listener.reap():
                self._parked.pop(connection, None)

    def _send(self, connection, answer):
        while not connection.try_send(answer) and not self._stop.is_set():
            self.listener.wait(timeout=0.02)

    # -- requests ---------------------------------------------------------------------------

    def _handle(self, frame):
        header, request = protocol.decode_request(frame)
        api_key, version = header.request_api_key, header.request_api_version
        with self.cluster.lock:
            self.cluster.requests.append((self.broker_id, ApiKey(api_key).name, request))
            transactional = (api_key == ApiKey.FIND_COORDINATOR
                             and getattr(request, "key_type", 0) == 1)
            if api_key in GROUP_APIS and self.cluster.group_model == "coordinator" \
                    and not transactional:
                injected = self.cluster._injected(ApiKey(api_key).name,
                                                  _group_of(request), None)
                answer = self.cluster.group_coordinator.handle(self, api_key, version, request,
                                                    header.client_id, header.correlation_id,
                                                    injected)
                if isinstance(answer, bytes) and self.tamper is not None:
                    return self.tamper(answer)
                return answer
        handler = {
            ApiKey.API_VERSIONS: self._api_versions, ApiKey.METADATA: self._metadata,
            ApiKey.PRODUCE: self._produce, ApiKey.FETCH: self._fetch,
            ApiKey.LIST_OFFSETS: self._list_offsets, ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.DESCRIBE_GROUPS: self._describe_groups,
            ApiKey.LIST_GROUPS: self._list_groups, ApiKey.DELETE_GROUPS: self._delete_groups,
            ApiKey.OFFSET_FETCH: self._offset_fetch, ApiKey.OFFSET_COMMIT: self._offset_commit,
            ApiKey.OFFSET_DELETE: self._offset_delete,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self._add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self._add_offsets_to_txn,
            ApiKey.TXN_OFFSET_COMMIT: self._txn_offset_commit, ApiKey.END_TXN: self._end_txn,
        }[api_key]
        response = handler(request, version)
        if response is None:
            return None
        frame = bytes(protocol.encode_response(response, header.correlation_id))
        return frame if self.tamper is None else self.tamper(frame)

    def _api_versions(self, request, version):
        return protocol.api_versions_response(version)

    def _metadata(self, request, version):
        m = protocol.response_module(ApiKey.METADATA, version)
        cluster = self.cluster
        with cluster.lock:
            image = cluster.image
            names = (sorted(image.topics) if request.topics is None
                     else [t.name for t in request.topics])
            topics = []
            for name in names:
                info = image.topics.get(name)
                if info is None:
                    if any(c not in _LEGAL for c in name):
                        code = ErrorCode.invalid_topic_exception
                    elif cluster.auto_create and request.allow_auto_topic_creation:
                        cluster._create(name, cluster.num_partitions)
                        code = ErrorCode.leader_not_available
                    else:
                        code = ErrorCode.unknown_topic_or_partition
                    topics.append(m.MetadataResponseTopic(error_code=code, name=name,
                                                          partitions=()))
                    continue
                topics.append(m.MetadataResponseTopic(
                    error_code=ErrorCode.none, name=name, partitions=tuple(
                        m.MetadataResponsePartition(
                            error_code=(ErrorCode.none if p.leader >= 0
                                        else ErrorCode.leader_not_available),
                            partition_index=p.partition, leader_id=p.leader,
                            leader_epoch=p.leader_epoch, replica_nodes=p.replicas,
                            isr_nodes=p.isr, offline_replicas=())
                        for p in info.partitions)))
            brokers = tuple(m.MetadataResponseBroker(node_id=b, host="localhost", port=0)
                            for b, info in sorted(image.brokers.items()) if info.alive)
            controller = (cluster.report_controllers.pop(0) if cluster.report_controllers
                          else image.controller_id)
            return m.MetadataResponse(throttle_time=NO_TIME, brokers=brokers,
                                      cluster_id=cluster.cluster_id,
                                      controller_id=controller, topics=tuple(topics))

    def _produce(self, request, version):
        m = protocol.response_module(ApiKey.PRODUCE, version)
        cluster = self.cluster
        responses = []
        with cluster.lock:
            for topic in request.topic_data:
                partitions = []
                for data in topic.partition_data:
                    code, base_offset = self._append(topic.name, data.index, data.records)
                    partitions.append(m.PartitionProduceResponse(
                        index=data.index, error_code=ErrorCode(code), base_offset=base_offset,
                        record_errors=()))
                responses.append(m.TopicProduceResponse(name=topic.name,
                                                        partition_responses=tuple(partitions)))
        if request.acks == 0:
            return None
        return m.ProduceResponse(responses=tuple(responses))

    def _append(self, topic, partition, records):
        """(error code, base offset) for one partition's batch; caller holds the lock."""
        cluster = self.cluster
        injected = cluster._injected("PRODUCE", topic, partition)
        if injected is not None:
            return injected, -1
        state = cluster.image.partition(topic, partition)
        if state is None:
            return ErrorCode.unknown_topic_or_partition, -1
        if state.leader != self.broker_id:
            return ErrorCode.not_leader_or_follower, -1
        header = BatchHeader(records)
        header.validate()
        if header.is_transactional and not any(
                txn.producer_id == header.producer_id and (topic, partition) in txn.partitions
                for txn in cluster.transactions.values()):
            return ErrorCode.invalid_txn_state, -1
        if header.producer_id >= 0:
            refused = self._check_sequence(topic, partition, header)
            if refused is not None:
                return refused
        base_offset = _store(cluster.logs.setdefault((topic, partition), []), records,
                             state.leader_epoch)
        if header.producer_id >= 0:
            entry = cluster.producers[(topic, partition, header.producer_id)]
            entry[0] = header.producer_epoch
            entry[1] = entry[1][-4:] + [(header.base_sequence, _last_sequence(header),
                                         base_offset)]
        lost = cluster._injected("PRODUCE_AFTER_APPEND", topic, partition)
        if lost is not None:
            return lost, -1
        return ErrorCode.none, base_offset

    def _check_sequence(self, topic, partition, header):
        """(error code, base offset) refusing or deduplicating an idempotent batch, or None
        to append it (module doc); caller holds the lock."""
        entry = self.cluster.producers.setdefault((topic, partition, header.producer_id),
                                                  [header.producer_epoch, []])
        epoch, last = entry
        if header.producer_epoch < epoch:
            return ErrorCode.invalid_producer_epoch, -1
        if header.producer_epoch > epoch:
            if header.base_sequence != 0:
                return ErrorCode.out_of_order_sequence_number, -1
            entry[1] = []
            return None
        for first, end, base_offset in last:
            if (first, end) == (header.base_sequence, _last_sequence(header)):
                return ErrorCode.none, base_offset
        if last and header.base_sequence != (last[-1][1] + 1) % 2**31:
            return ErrorCode.out_of_order_sequence_number, -1
        return None

    def _init_producer_id(self, request, version):
        m = protocol.response_module(ApiKey.INIT_PRODUCER_ID, version)
        with self.cluster.lock:
            cluster = self.cluster
            txn_id = request.transactional_id
            injected = cluster._injected("INIT_PRODUCER_ID", None, None)
            if injected is None and txn_id is not None:
                injected = self._txn_coordinator_error(txn_id, "INIT_PRODUCER_ID")
            if injected:
                return m.InitProducerIdResponse(throttle_time=NO_TIME,
                                                error_code=ErrorCode(injected),
                                                producer_id=-1, producer_epoch=-1)
            txn = cluster.transactions.get(txn_id)
            if txn is not None:
                if txn.partitions or txn.groups:
                    txn.end(False, cluster)
                txn.epoch += 1
                return m.InitProducerIdResponse(throttle_time=NO_TIME,
                                                error_code=ErrorCode.none,
                                                producer_id=txn.producer_id,
                                                producer_epoch=txn.epoch)
            producer_id = cluster.next_producer_id
            cluster.next_producer_id += 1
            if txn_id is not None:
                cluster.transactions[txn_id] = FakeTransaction(producer_id, 0)
        return m.InitProducerIdResponse(throttle_time=NO_TIME, error_code=ErrorCode.none,
                                        producer_id=producer_id, producer_epoch=0)

    # -- transactions (module doc) ------------------------------------------------------------

    def _txn_coordinator_error(self, txn_id, api, producer_id=None, epoch=None):
        """The error code for a request to the transaction coordinator (0: none); caller
        holds the lock."""
        cluster = self.cluster
        injected = cluster._injected(api, txn_id, None)
        if injected is not None:
            return injected
        if cluster.txn_coordinator != self.broker_id:
            return ErrorCode.not_coordinator
        if producer_id is None:
            return 0
        txn = cluster.transactions.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if epoch != txn.epoch:
            return ErrorCode.invalid_producer_epoch
        return 0

    def _add_partitions_to_txn(self, request, version):
        m = protocol.response_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
        txn_id = request.v3_and_below_transactional_id
        with self.cluster.lock:
            code = self._txn_coordinator_error(txn_id, "ADD_PARTITIONS_TO_TXN",
                                               request.v3_and_below_producer_id,
                                               request.v3_and_below_producer_epoch)
            if not code:
                self.cluster.transactions[txn_id].partitions.update(
                    (t.name, p) for t in request.v3_and_below_topics for p in t.partitions)
        return m.AddPartitionsToTxnResponse(
            throttle_time=NO_TIME, results_by_topic_v3_and_below=tuple(
                m.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=tuple(
                    m.AddPartitionsToTxnPartitionResult(partition_index=p,
                                                        partition_error_code=ErrorCode(code))
                    for p in t.partitions))
                for t in request.v3_and_below_topics))

    def _add_offsets_to_txn(self, request, version):
        m = protocol.response_module(ApiKey.ADD_OFFSETS_TO_TXN, version)
        with self.cluster.lock:
            code = self._txn_coordinator_error(request.transactional_id, "ADD_OFFSETS_TO_TXN",
                                               request.producer_id, request.producer_epoch)
            if not code:
                self.cluster.transactions[request.transactional_id].groups.add(
                    request.group_id)
        return m.AddOffsetsToTxnResponse(throttle_time=NO_TIME, error_code=ErrorCode(code))

    def _txn_offset_commit(self, request, version):
        m = protocol.response_module(ApiKey.TXN_OFFSET_COMMIT, version)
        cluster = self.cluster
        with cluster.lock:
            code = cluster._injected("TXN_OFFSET_COMMIT", request.group_id, None) or 0
            coordinator = (cluster.coordinator_id if cluster.group_model == "coordinator"
                           else cluster.coordinator(request.group_id))
            txn = cluster.transactions.get(request.transactional_id)
            if not code and coordinator != self.broker_id:
                code = ErrorCode.not_coordinator
            if not code and (txn is None or request.group_id not in txn.groups):
                code = ErrorCode.invalid_txn_state
            if not code:
                txn.offsets.setdefault(request.group_id, {}).update(
                    ((t.name, p.partition_index), p.committed_offset)
                    for t in request.topics for p in t.partitions)
        return m.TxnOffsetCommitResponse(throttle_time=NO_TIME, topics=tuple(
            m.TxnOffsetCommitResponseTopic(name=t.name, partitions=tuple(
                m.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                                   error_code=ErrorCode(code))
                for p in t.partitions)) for t in request.topics))

    def _end_txn(self, request, version):
        m = protocol.response_module(ApiKey.END_TXN, version)
        cluster = self.cluster
        with cluster.lock:
            code = self._txn_coordinator_error(request.transactional_id, "END_TXN",
                                               request.producer_id, request.producer_epoch)
            if not code:
                cluster.transactions[request.transactional_id].end(request.committed, cluster)
        return m.EndTxnResponse(throttle_time=NO_TIME, error_code=ErrorCode(code))

    def _check_leader(self, topic, partition, current_leader_epoch):
        """The error code a leader answers a client's Fetch or ListOffsets with, and the
        partition's state; caller holds the lock."""
        state = self.cluster.image.partition(topic, partition)
        if state is None:
            return ErrorCode.unknown_topic_or_partition, None
        if state.leader != self.broker_id:
            return ErrorCode.not_leader_or_follower, state
        if 0 <= current_leader_epoch < state.leader_epoch:
            return ErrorCode.fenced_leader_epoch, state
        if current_leader_epoch > state.leader_epoch:
            return ErrorCode.unknown_leader_epoch, state
        return ErrorCode.none, state

    def _fetch(self, request, version):
        m = protocol.response_module(ApiKey.FETCH, version)
        cluster = self.cluster
        responses = []
        with cluster.lock:
            for topic in request.topics:
                partitions = []
                for asked in topic.partitions:
                    key = (topic.topic, asked.partition)
                    log = cluster.logs.get(key, [])
                    end = log[-1][0] + BatchHeader(log[-1][1]).record_count if log else 0
                    code, _ = self._check_leader(topic.topic, asked.partition,
                                                 asked.current_leader_epoch)
                    if code == ErrorCode.none:
                        code = ErrorCode(cluster._injected("FETCH", *key) or code)
                    if code == ErrorCode.none and not 0 <= asked.fetch_offset <= end:
                        code = ErrorCode.offset_out_of_range
                    records = bytearray()
                    if code == ErrorCode.none:
                        for base, data in log:
                            if base + BatchHeader(data).record_count <= asked.fetch_offset:
                                continue
                            if records and len(records) + len(data) > asked.partition_max_bytes:
                                break
                            records += data
                    partitions.append(_build(
                        m.PartitionData, partition_index=asked.partition, error_code=code,
                        high_watermark=end, last_stable_offset=end, log_start_offset=0,
                        aborted_transactions=None, preferred_read_replica=-1,
                        records=bytes(records) if records else None))
                responses.append(m.FetchableTopicResponse(topic=topic.topic,
                                                          partitions=tuple(partitions)))
        return _build(m.FetchResponse, throttle_time=NO_TIME, error_code=ErrorCode.none,
                      session_id=0, responses=tuple(responses))

    def _list_offsets(self, request, version):
        m = protocol.response_module(ApiKey.LIST_OFFSETS, version)
        cluster = self.cluster
        topics = []
        with cluster.lock:
            for topic in request.topics:
                partitions = []
                for asked in topic.partitions:
                    log = cluster.logs.get((topic.name, asked.partition_index), [])
                    end = log[-1][0] + BatchHeader(log[-1][1]).record_count if log else 0
                    code, state = self._check_leader(
                        topic.name, asked.partition_index,
                        getattr(asked, "current_leader_epoch", -1))
                    if code == ErrorCode.none:
                        code = ErrorCode(cluster._injected("LIST_OFFSETS", topic.name,
                                                           asked.partition_index) or code)
                    offset = {-2: 0, -1: end}.get(asked.timestamp)
                    if offset is None and asked.timestamp >= 0:
                        offset = next((r.offset for _, data in log for r in RecordBatch(data)
                                       if r.timestamp >= asked.timestamp), -1)
                    if code == ErrorCode.none and offset is None:
                        code = ErrorCode.invalid_request  # by time: not in the fake
                    partitions.append(_build(
                        m.ListOffsetsPartitionResponse, partition_index=asked.partition_index,
                        error_code=code, timestamp=-1,
                        offset=-1 if code != ErrorCode.none else offset,
                        leader_epoch=-1 if state is None else state.leader_epoch))
                topics.append(m.ListOffsetsTopicResponse(name=topic.name,
                                                         partitions=tuple(partitions)))
        return m.ListOffsetsResponse(throttle_time=NO_TIME, topics=tuple(topics))

    def _not_controller(self):
        return self.cluster.image.controller_id != self.broker_id

    def _create_topics(self, request, version):
        m = protocol.response_module(ApiKey.CREATE_TOPICS, version)
        cluster = self.cluster
        results = []
        with cluster.lock:
            live = sum(info.alive for info in cluster.image.brokers.values())
            for topic in request.topics:
                code, message = ErrorCode.none, None
                if self._not_controller():
                    code, message = ErrorCode.not_controller, f"broker {self.broker_id}"
                elif topic.name in cluster.image.topics:
                    code, message = (ErrorCode.topic_already_exists,
                                     f"Topic '{topic.name}' already exists.")
                elif not topic.name or any(c not in _LEGAL for c in topic.name):
                    code, message = ErrorCode.invalid_topic_exception, f"bad name {topic.name}"
                elif topic.replication_factor > live:
                    code, message = (ErrorCode.invalid_replication_factor,
                                     f"Replication factor: {topic.replication_factor} larger "
                                     f"than available brokers: {live}.")
                elif not request.validate_only:
                    count = topic.num_partitions if topic.num_partitions > 0 else \
                        cluster.num_partitions
                    cluster._create(topic.name, count)
                results.append(m.CreatableTopicResult(name=topic.name, error_code=code,
                                                      error_message=message))
        return m.CreateTopicsResponse(throttle_time=NO_TIME, topics=tuple(results))

    def _delete_topics(self, request, version):
        m = protocol.response_module(ApiKey.DELETE_TOPICS, version)
        cluster = self.cluster
        results = []
        with cluster.lock:
            topics = dict(cluster.image.topics)
            for name in request.topic_names:
                if self._not_controller():
                    code = ErrorCode.not_controller
                elif name not in topics:
                    code = ErrorCode.unknown_topic_or_partition
                else:
                    code = ErrorCode.none
                    del topics[name]
                results.append(m.DeletableTopicResult(name=name, error_code=code))
            cluster._publish(topics=topics)
        return m.DeleteTopicsResponse(throttle_time=NO_TIME, responses=tuple(results))

    def _create_partitions(self, request, version):
        m = protocol.response_module(ApiKey.CREATE_PARTITIONS, version)
        cluster = self.cluster
        results = []
        with cluster.lock:
            for topic in request.topics:
                info = cluster.image.topics.get(topic.name)
                code, message = ErrorCode.none, None
                if self._not_controller():
                    code = ErrorCode.not_controller
                elif info is None:
                    code, message = (ErrorCode.unknown_topic_or_partition,
                                     f"The topic '{topic.name}' does not exist.")
                elif topic.count <= len(info.partitions):
                    code, message = (ErrorCode.invalid_partitions,
                                     f"Topic currently has {len(info.partitions)} partitions, "
                                     f"which is higher than the requested {topic.count}.")
                elif not request.validate_only:
                    cluster._create(topic.name, topic.count,
                                    [p.leader for p in info.partitions]
                                    + [p.leader for p in info.partitions][:1]
                                    * (topic.count - len(info.partitions)))
                results.append(m.CreatePartitionsTopicResult(name=topic.name, error_code=code,
                                                             error_message=message))
        return m.CreatePartitionsResponse(throttle_time=NO_TIME, results=tuple(results))

    # -- groups -----------------------------------------------------------------------------

    def _coordinator_error(self, group_id, api):
        """NOT_COORDINATOR unless this broker coordinates the group, else a queued error or
        NONE; caller holds the lock."""
        cluster = self.cluster
        injected = cluster._injected(api, group_id, None)
        if injected is not None:
            return ErrorCode(injected)
        if cluster.coordinator(group_id) != self.broker_id:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    def _find_coordinator(self, request, version):
        m = protocol.response_module(ApiKey.FIND_COORDINATOR, version)
        cluster = self.cluster
        with cluster.lock:
            code = cluster._injected("FIND_COORDINATOR", request.key, None)
            node = (cluster.txn_coordinator if getattr(request, "key_type", 0) == 1
                    else cluster.coordinator(request.key))
        if code is not None:
            return _build(m.FindCoordinatorResponse, throttle_time=NO_TIME,
                          error_code=ErrorCode(code), error_message=None, node_id=-1,
                          host="", port=-1)
        return _build(m.FindCoordinatorResponse, throttle_time=NO_TIME,
                      error_code=ErrorCode.none, error_message=None, node_id=node,
                      host="localhost", port=9092 + node)

    def _describe_groups(self, request, version):
        m = protocol.response_module(ApiKey.DESCRIBE_GROUPS, version)
        described = []
        with self.cluster.lock:
            for group_id in request.groups:
                code = self._coordinator_error(group_id, "DESCRIBE_GROUPS")
                group = self.cluster.groups.get(group_id)
                if code != ErrorCode.none or group is None:
                    described.append(_build(
                        m.DescribedGroup, error_code=code, group_id=group_id,
                        group_state="Dead" if code == ErrorCode.none else "",
                        protocol_type="", protocol_data="", members=(),
                        authorized_operations=-2147483648))
                    continue
                described.append(_build(
                    m.DescribedGroup, error_code=ErrorCode.none, group_id=group_id,
                    group_state=group.state, protocol_type=group.protocol_type,
                    protocol_data=group.protocol if group.members else "",
                    members=tuple(_build(
                        m.DescribedGroupMember, member_id=member.member_id,
                        group_instance_id=member.instance_id, client_id=member.client_id,
                        client_host=member.host,
                        member_metadata=consumer_protocol.encode_subscription(member.topics),
                        member_assignment=consumer_protocol.encode_assignment(
                            member.assignment))
                        for member in group.members),
                    authorized_operations=-2147483648))
        return m.DescribeGroupsResponse(throttle_time=NO_TIME, groups=tuple(described))

    def _list_groups(self, request, version):
        m = protocol.response_module(ApiKey.LIST_GROUPS, version)
        cluster = self.cluster
        with cluster.lock:
            listed = tuple(m.ListedGroup(group_id=g, protocol_type=group.protocol_type)
                           for g, group in sorted(cluster.groups.items())
                           if cluster.coordinator(g) == self.broker_id)
        return _build(m.ListGroupsResponse, throttle_time=NO_TIME, error_code=ErrorCode.none,
                      groups=listed)

    def _delete_groups(self, request, version):
        m = protocol.response_module(ApiKey.DELETE_GROUPS, version)
        cluster = self.cluster
        results = []
        with cluster.lock:
            for group_id in request.groups_names:
                code = self._coordinator_error(group_id, "DELETE_GROUPS")
                group = cluster.groups.get(group_id)
                if code != ErrorCode.none:
                    pass
                elif group is None:
                    code = ErrorCode.group_id_not_found
                elif group.members:
                    code = ErrorCode.non_empty_group
                else:
                    del cluster.groups[group_id]
                results.append(m.DeletableGroupResult(group_id=group_id, error_code=code))
        return m.DeleteGroupsResponse(throttle_time=NO_TIME, results=tuple(results))

    def _offset_fetch(self, request, version):
        m = protocol.response_module(ApiKey.OFFSET_FETCH, version)
        cluster = self.cluster
        with cluster.lock:
            code = self._coordinator_error(request.group_id, "OFFSET_FETCH")
            group = cluster.groups.get(request.group_id)
            offsets = {} if group is None or code != ErrorCode.none else dict(group.offsets)
        if request.topics is None:
            wanted = {}
            for topic, partition in sorted(offsets):
                wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in request.topics}
        topics = tuple(m.OffsetFetchResponseTopic(name=topic, partitions=tuple(
            m.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=offsets.get((topic, p), (-1,))[0],
                committed_leader_epoch=offsets.get((topic, p), (-1, -1))[1],
                metadata=offsets.get((topic, p), (-1, -1, ""))[2], error_code=ErrorCode.none)
            for p in partitions)) for topic, partitions in wanted.items())
        return _build(m.OffsetFetchResponse, throttle_time=NO_TIME,
                      topics=() if code != ErrorCode.none else topics, error_code=code)

    def _offset_commit(self, request, version):
        m = protocol.response_module(ApiKey.OFFSET_COMMIT, version)
        cluster = self.cluster
        topics = []
        with cluster.lock:
            code = self._coordinator_error(request.group_id, "OFFSET_COMMIT")
            group = cluster.groups.get(request.group_id)
            if code == ErrorCode.none and group is not None and group.members:
                code = ErrorCode.unknown_member_id
            if code == ErrorCode.none and group is None:
                group = cluster.groups[request.group_id] = FakeGroup(state="Empty")
            for topic in request.topics:
                partitions = []
                for p in topic.partitions:
                    result = code
                    if result == ErrorCode.none and cluster.image.partition(
                            topic.name, p.partition_index) is None:
                        result = ErrorCode.unknown_topic_or_partition
                    if result == ErrorCode.none:
                        group.offsets[(topic.name, p.partition_index)] = (
                            p.committed_offset, p.committed_leader_epoch,
                            p.committed_metadata or "")
                    partitions.append(m.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=result))
                topics.append(m.OffsetCommitResponseTopic(name=topic.name,
                                                          partitions=tuple(partitions)))
        return m.OffsetCommitResponse(throttle_time=NO_TIME, topics=tuple(topics))

    def _offset_delete(self, request, version):
        m = protocol.response_module(ApiKey.OFFSET_DELETE, version)
        cluster = self.cluster
        topics = []
        with cluster.lock:
            code = self._coordinator_error(request.group_id, "OFFSET_DELETE")
            group = cluster.groups.get(request.group_id)
            if code == ErrorCode.none and group is None:
                code = ErrorCode.group_id_not_found
            if code == ErrorCode.none:
                subscribed = {t for member in group.members for t in member.topics}
                for topic in request.topics:
                    partitions = []
                    for p in topic.partitions:
                        result = ErrorCode.none
                        if topic.name in subscribed:
                            result = ErrorCode.group_subscribed_to_topic
                        elif cluster.image.partition(topic.name, p.partition_index) is None:
                            result = ErrorCode.unknown_topic_or_partition
                        else:
                            group.offsets.pop((topic.name, p.partition_index), None)
                        partitions.append(m.OffsetDeleteResponsePartition(
                            partition_index=p.partition_index, error_code=result))
                    topics.append(m.OffsetDeleteResponseTopic(name=topic.name,
                                                              partitions=tuple(partitions)))
        return m.OffsetDeleteResponse(error_code=code, throttle_time=NO_TIME,
                                      topics=tuple(topics))


@dataclasses.dataclass
class FakeTransaction:
    """A transactional id at the fake coordinator: its producer id and epoch, the open
    transaction's partitions ``{(topic, partition)}``, groups and offsets ``{group:
    {(topic, partition): offset}}``, and ``ended``: (committed, partitions, offsets) of
    each transaction ended."""

    producer_id: int
    epoch: int
    partitions: set = dataclasses.field(default_factory=set)
    groups: set = dataclasses.field(default_factory=set)
    offsets: dict = dataclasses.field(default_factory=dict)
    ended: list = dataclasses.field(default_factory=list)

    def end(self, committed, cluster):
        """Commit or abort the open transaction; caller holds the cluster's lock."""
        if committed:
            for group, offsets in self.offsets.items():
                cluster.txn_committed.setdefault(group, {}).update(offsets)
        self.ended.append((committed, set(self.partitions), dict(self.offsets)))
        self.partitions, self.groups, self.offsets = set(), set(), {}


@dataclasses.dataclass
class FakeGroup:
    """A group at its fake coordinator: Kafka's state name, members, committed offsets
    ``{(topic, partition): (offset, leader_epoch, metadata)}``."""

    state: str = "Empty"
    protocol: str = ""
    protocol_type: str = "consumer"
    members: list = dataclasses.field(default_factory=list)
    offsets: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class FakeMember:
    """A member of a FakeGroup: its subscription (topics) and assignment
    ``{topic: [partitions]}``."""

    member_id: str
    client_id: str = "consumer-1"
    host: str = "/127.0.0.1"
    topics: tuple = ()
    assignment: dict = dataclasses.field(default_factory=dict)
    instance_id: str | None = None


def _group_of(request):
    """The group id a group request is about (FindCoordinator: its key)."""
    return getattr(request, "group_id", None) or getattr(request, "key", None)


def _last_sequence(header):
    return (header.base_sequence + header.last_offset_delta) % 2**31


def _store(log, records, leader_epoch):
    """Append the batch ``records`` to ``log`` (a list of (base offset, bytes)), stamped with
    the next offset and ``leader_epoch``; returns its base offset."""
    base_offset = log[-1][0] + BatchHeader(log[-1][1]).record_count if log else 0
    stored = bytearray(records)
    BatchHeader(stored).stamp(base_offset, leader_epoch)
    log.append((base_offset, bytes(stored)))
    return base_offset


def _build(cls, **fields):
    """An instance of the kio class ``cls`` from the ``fields`` its version has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in fields.items() if name in names})


_LEGAL = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
