"""One replica of a partition hosted by this broker: its log, its role, its high watermark.

A ``Partition`` is what the request handlers see of a topic-partition: appends as leader
(stamping the leader epoch into each batch), reads bounded by the high watermark, offsets
for ListOffsets. Its state comes from the controller's ``PartitionState`` (``update``):
leader or follower, leader epoch, replicas, ISR.

High watermark (HW): a field of its own, not the log end offset (LEO). On the leader
(Kafka's Partition.maybeIncrementLeaderHW) it is the smallest LEO of this broker and of
every follower that is in the maximal ISR (the ISR plus an expansion in flight) or is
caught up and alive (``ReplicaState.is_caught_up``), it never decreases, and it stays
where it is while the ISR is smaller than min(min.insync.replicas, replication factor)
(Kafka 3.7). It moves after appends (``append_as_leader``), follower fetches
(``update_follower``), ISR changes and new leadership. With the leader alone in the replica
set (replication factor 1) an append sets it to the LEO directly: that path costs nothing
more. Every move other than an append's is reported to ``on_high_watermark(partition,
old_hw)`` (the request handler completes delayed produces and parked consumer fetches);
the produce handler reports an append's itself. Consumers read below the HW; followers
(``replica_id`` >= 0 in a Fetch) up to the LEO.

Followers, on the leader: one ``ReplicaState`` per other replica (``followers``), reset
when this broker starts a new leader epoch (Kafka's makeLeader), updated by each of the
follower's Fetches. ISR changes (Kafka's maybeShrinkIsr / maybeExpandIsr, AlterPartition of KIP-497)
are proposed through ``alter_partition``, an object with ``submit(topic, index, leader_epoch,
partition_epoch, new_isr, callback)`` that sends the controller an AlterPartition and later calls
``callback(error_code, new_state)`` (``new_state`` a PartitionState, or None on an error) — on the
broker's loop thread, as
everything here:

- expansion (``update_follower``): a follower outside the ISR whose LEO is >= the HW and
  >= this leader epoch's start offset, on a live broker, joins;
- shrink (``maybe_shrink_isr``, every replica.lag.time.max.ms / 2 from the broker loop):
  followers whose LEO is not the leader's and that were last caught up more than
  replica.lag.time.max.ms ago leave.

One change at a time (Kafka's pending ISR state): while a proposal is in flight
(``pending_isr``) no other is made, and the HW already counts the followers it adds
(``maximal_isr``); a shrink counts only once committed. The answer, or a new
PartitionState from the metadata, settles it: an error drops the proposal (the next fetch
or check proposes again); a state of another leader epoch, or an older partition epoch,
is not applied.

The partition directory carries ``partition.metadata`` (Kafka's PartitionMetadataFile:
exactly the two lines ``version: 0`` and ``topic_id: <id>``) so that a topic deleted and
created again under the same name while this broker was down is recognised as a different
topic. ``read_topic_id`` parses it strictly: anything else raises KafkaStorageError naming
the file and what was wrong, and the ReplicaManager takes that partition offline.

A follower never truncates below its own high watermark unless it is itself damaged
(``may_truncate_to``; ``replica_proc.damaged_replicas``).

Owner: the broker's loop thread (through the ReplicaManager); not thread-safe, like the
PartitionLog it owns.
"""
from __future__ import annotations

import logging
import os
import re
import time

from cluster.errors import (
    FencedLeaderEpochError,
    KafkaStorageError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    UnknownLeaderEpochError,
)
from replica_proc.replica_state import ReplicaState
from segments.checkpoint import write_atomically
from segments.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, DuplicateAppend, PartitionLog
from segments.producer_state import ORIGIN_CLIENT

log = logging.getLogger(__name__)

PARTITION_METADATA = "partition.metadata"
METADATA_VERSION = 0
_METADATA_FORMAT = re.compile(rb"version: %d\ntopic_id: ([A-Za-z0-9_-]{1,64})\n"
                              % METADATA_VERSION)
#: Longer than any well-formed partition.metadata (what an error message quotes of it).
_MAX_METADATA_BYTES = 96

#: ListOffsets' answer when no offset matches (Kafka's UNKNOWN_OFFSET / NO_TIMESTAMP).
UNKNOWN_OFFSET = -1
NO_TIMESTAMP = -1

#: replica.lag.time.max.ms's default, in seconds.
DEFAULT_REPLICA_LAG_MAX = 30.0


def directory_name(topic, partition):
    """``<topic>-<partition>``, Kafka's partition directory name."""
    return f"{topic}-{partition}"


def parse_directory_name(name):
    """``(topic, partition)`` from a partition directory name, or None if it is not one."""
    topic, dash, number = name.rpartition("-")
    if not dash or not topic or not number.isdigit() or str(int(number)) != number:
        return None
    return topic, int(number)


def read_topic_id(path):
    """The topic id recorded in ``path``/partition.metadata, or None if there is none.

    Strict (Kafka's PartitionMetadataFile has no checksum, so the parser is the check):
    ASCII, exactly ``version: 0`` and ``topic_id: <id>`` with an id of 1-64 characters of
    ``[A-Za-z0-9_-]``, each line ending in a newline, nothing else. Anything else raises
    KafkaStorageError naming the file and what was found.
    """
    target = os.path.join(path, PARTITION_METADATA)
    try:
        with open(target, "rb") as f:
            data = f.read(_MAX_METADATA_BYTES + 1)
    except FileNotFoundError:
        return None
    match = _METADATA_FORMAT.fullmatch(data)
    if match is None:
        raise KafkaStorageError(
            f"{target}: malformed partition metadata {data[:_MAX_METADATA_BYTES]!r}, "
            f"expected b'version: {METADATA_VERSION}\\ntopic_id: <id>\\n'")
    return match.group(1).decode("ascii")


def write_topic_id(path, topic_id, durable=True):
    """Record ``topic_id`` in ``path``/partition.metadata (atomically; durably unless
    ``durable`` is False: see ``segments.checkpoint.write_atomically``)."""
    write_atomically(os.path.join(path, PARTITION_METADATA),
                     f"version: {METADATA_VERSION}\ntopic_id: {topic_id}\n".encode("ascii"),
                     durable)


class Partition:
    """This broker's replica of ``topic``-``index`` (see the module doc).

    Created by the ReplicaManager with an open ``log``; ``update`` applies each new
    PartitionState; ``close``/``delete`` end it. ``clock``: the broker loop's monotonic
    seconds; ``replica_lag_max``: replica.lag.time.max.ms in seconds; ``alter_partition``
    and ``on_high_watermark``: see the module doc (None: no ISR change is proposed, no
    move reported).
    """

    __slots__ = ("topic", "index", "topic_id", "broker_id", "log", "leader_id",
                 "leader_epoch", "partition_epoch", "replicas", "isr", "high_watermark",
                 "min_insync_replicas", "followers", "pending_isr", "leader_epoch_start_offset",
                 "live_brokers", "clock", "replica_lag_max", "alter_partition",
                 "on_high_watermark", "unclean_leader_election", "damaged", "on_healed",
                 "damage_known")

    def __init__(self, topic, index, topic_id, broker_id, log: PartitionLog,
                 min_insync_replicas=1, *, clock=time.monotonic,
                 replica_lag_max=DEFAULT_REPLICA_LAG_MAX, alter_partition=None,
                 on_high_watermark=None):
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.broker_id = broker_id
        self.log = log
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas = ()
        self.isr = ()
        self.high_watermark = log.log_start_offset
        self.min_insync_replicas = min_insync_replicas
        self.followers = {}  # broker id -> ReplicaState, while this broker leads
        self.pending_isr = None  # the ISR proposed to the controller, while in flight
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self.live_brokers = frozenset()
        self.clock = clock
        self.replica_lag_max = replica_lag_max
        self.alter_partition = alter_partition
        self.on_high_watermark = on_high_watermark
        #: The topic's unclean.leader.election.enable (see ``may_truncate_to``).
        self.unclean_leader_election = False
        #: Whether this replica lost records (``replica_proc.damaged_replicas``) and has not
        #: caught up with an intact leader since; then ``on_healed(self)`` is called by the
        #: first fetch answer whose high watermark its log end reaches.
        self.damaged = False
        self.on_healed = None
        #: Whether the controller's state names this replica damaged (``state.damaged``):
        #: an election made knowing it. A ``damaged`` replica made leader by an election
        #: that did not know (a metadata log replayed from before the damage was found, or
        #: the report not read yet) does not act as leader (``check_leader``): its followers
        #: would truncate what it lost away on every intact replica.
        self.damage_known = False

    def __repr__(self):
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return (f"Partition({self.topic}-{self.index}, {role}, epoch={self.leader_epoch}, "
                f"isr={list(self.isr)}, hw={self.high_watermark}, "
                f"leo={self.log.log_end_offset})")

    @property
    def is_leader(self):
        return self.leader_id == self.broker_id

    @property
    def maximal_isr(self):
        """The ISR plus the followers a proposal in flight adds (Kafka's maximalIsr)."""
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return self.isr + tuple(b for b in pending if b not in self.isr)

    # -- state from the controller --------------------------------------------------------

    def update(self, state, live_brokers=None):
        """Apply the controller's PartitionState (and the live brokers, for ISR
        eligibility); True if leadership, replicas or ISR changed. A state of this leader
        epoch older (by partition epoch) than one an AlterPartition answer applied is
        ignored."""
        if live_brokers is not None:
            self.live_brokers = frozenset(live_brokers)
        self.damage_known = self.broker_id in state.damaged
        partition_epoch = state.partition_epoch
        replicas = tuple(state.replicas)
        isr = tuple(state.isr)
        changed = (state.leader != self.leader_id or state.leader_epoch != self.leader_epoch
                   or isr != self.isr or replicas != self.replicas)
        if not changed and partition_epoch == self.partition_epoch:
            return False
        if (state.leader == self.leader_id and state.leader_epoch == self.leader_epoch
                and partition_epoch < self.partition_epoch):
            return False
        was_leader = self.is_leader
        new_epoch = state.leader_epoch != self.leader_epoch
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        self.isr = isr
        self.pending_isr = None
        if not self.is_leader:
            self.followers = {}
            self.leader_epoch_start_offset = UNKNOWN_OFFSET
            return changed
        followers = {b: self.followers.get(b) or ReplicaState(b)
                     for b in replicas if b != self.broker_id}
        self.followers = followers
        if new_epoch or not was_leader:
            now = self.clock()
            leo = self.log.log_end_offset
            self.leader_epoch_start_offset = leo
            # Leader epochs (Kafka's LeaderEpochFileCache): a new leader records where its epoch
            # starts, its LEO.
            if self.leader_epoch > self.log.leader_epoch_cache.latest_epoch \
                    and self.log.offline is None:
                self.log.leader_epoch_cache.assign(self.leader_epoch, leo)
            for replica in followers.values():
                replica.reset(now, leo, not was_leader, replica.broker_id in isr)
        old = self.high_watermark
        if self._increment_high_watermark():
            self._report(old)
        return changed

    def check_leader(self, current_leader_epoch=-1):
        """Raise unless this replica leads; with ``current_leader_epoch`` >= 0 (a client's
        view, KIP-320) also unless it is this leader's epoch."""
        if self.leader_id == self.broker_id and not self.damaged and current_leader_epoch < 0:
            return  # the usual answer, in one test (every request to a leader asks it)
        if not self.is_leader:
            raise NotLeaderForPartitionError(
                f"broker {self.broker_id} is not the leader of {self.topic}-{self.index} "
                f"(leader: {self.leader_id}, epoch {self.leader_epoch})")
        if self.damaged and not self.damage_known:
            raise NotLeaderForPartitionError(
                f"broker {self.broker_id} does not lead {self.topic}-{self.index} at epoch "
                f"{self.leader_epoch}: its replica lost records, and the controller elected "
                f"it without knowing (it is re-electing)")
        self.check_epoch(current_leader_epoch)

    def check_epoch(self, current_leader_epoch):
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.topic}-{self.index}: request's leader epoch {current_leader_epoch} "
                f"is older than the current {self.leader_epoch}")
        raise UnknownLeaderEpochError(
            f"{self.topic}-{self.index}: request's leader epoch {current_leader_epoch} is "
            f"newer than this broker's {self.leader_epoch}")

    # -- high watermark -------------------------------------------------------------------

    def _increment_high_watermark(self):
        """Move the HW as Kafka's maybeIncrementLeaderHW (see the module doc); True if it moved."""
        if len(self.isr) < min(self.min_insync_replicas, len(self.replicas)):
            return False
        leo = self.log.log_end_offset
        new = leo
        if self.followers:
            now = self.clock()
            maximal = self.maximal_isr
            lag = self.replica_lag_max
            live = self.live_brokers
            for broker, replica in self.followers.items():
                follower_leo = replica.log_end_offset
                if follower_leo < new and (
                        broker in maximal
                        or (broker in live and replica.is_caught_up(leo, now, lag))):
                    new = follower_leo
        if new > self.high_watermark:
            self.high_watermark = new
            return True
        return False

    def _report(self, old_high_watermark):
        if self.on_high_watermark is not None:
            self.on_high_watermark(self, old_high_watermark)

    def check_enough_replicas(self, required_offset):
        """A delayed acks=all produce's test (Kafka's checkEnoughReplicasReachOffset):
        ``(done, error)``, ``error`` None or the exception to answer with. Not done while
        the HW is below ``required_offset``; then done, with NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if the maximal ISR is smaller than min.insync.replicas; done with
        NOT_LEADER_OR_FOLLOWER once this broker no longer leads."""
        if not self.is_leader:
            return True, NotLeaderForPartitionError(
                f"broker {self.broker_id} no longer leads {self.topic}-{self.index} "
                f"(leader: {self.leader_id}, epoch {self.leader_epoch})")
        if self.high_watermark < required_offset:
            return False, None
        isr = self.maximal_isr
        if len(isr) < self.min_insync_replicas:
            return True, NotEnoughReplicasAfterAppendError(
                f"{self.topic}-{self.index}: the records up to offset {required_offset} are "
                f"appended, but the ISR {list(isr)} has {len(isr)} replica(s), fewer than "
                f"min.insync.replicas={self.min_insync_replicas}")
        return True, None

    # -- followers ------------------------------------------------------------------------

    def check_follower(self, replica_id):
        """Raise NOT_LEADER_OR_FOLLOWER unless ``replica_id`` is a follower of this
        leader (Kafka's followerReplicaOrThrow)."""
        if replica_id not in self.followers:
            raise NotLeaderForPartitionError(
                f"leader {self.broker_id} of {self.topic}-{self.index} cannot record the "
                f"position of replica {replica_id}: not one of the replicas "
                f"{list(self.replicas)} (leader epoch {self.leader_epoch}, partition epoch "
                f"{self.partition_epoch})")

    def update_follower(self, replica_id, fetch_offset, leader_leo):
        """Record follower ``replica_id``'s Fetch at ``fetch_offset``, served when this log
        ended at ``leader_leo`` (Kafka's updateFollowerFetchState); propose it for the ISR if it
        qualifies (maybeExpandIsr); move
        the HW if its LEO moved."""
        replica = self.followers[replica_id]
        before = replica.log_end_offset
        replica.on_fetch(fetch_offset, leader_leo, self.clock())
        self._maybe_expand_isr(replica)
        if replica.log_end_offset != before:
            old = self.high_watermark
            if self._increment_high_watermark():
                self._report(old)

    def _maybe_expand_isr(self, replica):
        if self.pending_isr is not None or self.alter_partition is None:
            return
        broker = replica.broker_id
        leo = replica.log_end_offset
        if (broker not in self.isr and leo >= self.high_watermark
                and leo >= self.leader_epoch_start_offset and broker in self.live_brokers):
            self._propose(self.isr + (broker,))

    def maybe_shrink_isr(self):
        """Propose the ISR without the followers that fell out of sync (Kafka's maybeShrinkIsr);
        True if a change was proposed."""
        if not self.is_leader or self.pending_isr is not None or self.alter_partition is None:
            return False
        leo = self.log.log_end_offset
        now = self.clock()
        lag = self.replica_lag_max
        followers = self.followers
        out = {b for b in self.isr if b in followers
               and not followers[b].is_caught_up(leo, now, lag)}
        if not out:
            return False
        log.info("%s-%d: shrinking the ISR %s by %s (LEO %d, lag limit %.3f s): %s",
                 self.topic, self.index, list(self.isr), sorted(out), leo, lag,
                 [followers[b] for b in sorted(out)])
        self._propose(tuple(b for b in self.isr if b not in out))
        return True

    def _propose(self, new_isr):
        self.pending_isr = proposal = tuple(new_isr)
        epoch = self.leader_epoch

        def answered(error_code, state):
            self._on_alter_partition(proposal, epoch, error_code, state)

        if not self.alter_partition.submit(self.topic, self.index, epoch,
                                           self.partition_epoch, list(proposal), answered):
            # An earlier change of this partition is still on its way to the controller
            # (this one was settled by a new image meanwhile): propose again later.
            self.pending_isr = None

    def _on_alter_partition(self, proposal, epoch, error_code, state):
        """The controller's answer to ``proposal``: commit its new state, or drop the
        proposal (the next fetch or shrink check proposes again)."""
        if self.pending_isr is not proposal:
            return  # settled already (a new PartitionState, or a newer proposal)
        self.pending_isr = None
        if error_code:
            log.warning("%s-%d: AlterPartition to ISR %s failed with error %d", self.topic,
                        self.index, list(proposal), error_code)
            return
        if (state is None or not self.is_leader or epoch != self.leader_epoch
                or state.leader_epoch != self.leader_epoch
                or state.partition_epoch < self.partition_epoch):
            return
        self.isr = tuple(state.isr)
        self.partition_epoch = state.partition_epoch
        old = self.high_watermark
        if self._increment_high_watermark():
            self._report(old)

    # -- the hot paths --------------------------------------------------------------------

    def append_as_leader(self, records, required_acks, origin=ORIGIN_CLIENT):
        """Validate, stamp (offsets, leader epoch) and append ``records`` (whole batches);
        return the first offset and move the HW (not reported: the caller does that).
        acks=all needs min.insync.replicas in the ISR first. A producer's retry of a batch
        the log holds already appends nothing and returns the log's ``DuplicateAppend``
        (the original batch's first and last offsets) instead of an int. ``origin``:
        ``ORIGIN_COORDINATOR`` for the transaction coordinator's markers."""
        if self.leader_id != self.broker_id:
            self.check_leader()
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.index}: the ISR {list(self.isr)} has {len(self.isr)} "
                f"replica(s), fewer than min.insync.replicas={self.min_insync_replicas} "
                f"that acks=all requires")
        first, _ = appended = self.log.append(records, leader_epoch=self.leader_epoch,
                                              origin=origin)
        if appended.__class__ is DuplicateAppend:
            return appended
        if self.followers:
            self._increment_high_watermark()
        else:
            self.high_watermark = self.log.log_end_offset
        return first

    def read_slice(self, offset, max_bytes, min_one_batch, follower):
        """The LogSlice of whole batches from the one holding ``offset``: up to the high
        watermark for consumers, the log end for a follower (OffsetOutOfRangeError outside
        the log)."""
        return self.log.read_slice(offset, max_bytes,
                                   None if follower else self.high_watermark, min_one_batch)

    # -- transactions ---------------------------------------------------------------------

    @property
    def last_stable_offset(self):
        """Kafka's last stable offset: the first offset of the oldest transaction still
        open or whose marker is not yet below the high watermark, if below the high
        watermark; else the high watermark. A follower answers its own view (Kafka's
        followers do too). Two dict checks when no transaction is open."""
        high_watermark = self.high_watermark
        state = self.log.producer_state
        state.on_high_watermark_updated(high_watermark)
        first = state.first_unstable_offset()
        return high_watermark if first is None or first >= high_watermark else first

    def active_producers(self):
        """The ProducerStateEntry of every producer id this replica keeps state for
        (DescribeProducers; a follower's are its own, rebuilt from what it replicated)."""
        return list(self.log.producer_state.producers.values())

    def read_committed(self, offset, max_bytes, min_one_batch):
        """A read_committed consumer's read: ``(LogSlice, aborted)`` — whole batches from
        the one holding ``offset``, none at or past the last stable offset, and the
        ``AbortedTxn``s overlapping them (OffsetOutOfRangeError outside the log)."""
        log = self.log
        stable = self.last_stable_offset
        found = log.read_slice(offset, max_bytes, stable, min_one_batch)
        if not found.size:
            return found, ()
        return found, log.collect_aborted_transactions(
            offset, log.fetch_upper_bound(found, stable))

    # -- ListOffsets ----------------------------------------------------------------------

    def offset_for(self, timestamp, read_committed=False):
        """ListOffsets: ``(timestamp, offset)`` for -2 (earliest), -1 (latest: the high
        watermark, or the last stable offset for ``read_committed``) or a timestamp
        (first record at or after it, below that same bound); ``(-1, -1)`` when no
        record qualifies."""
        bound = self.last_stable_offset if read_committed else self.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return NO_TIMESTAMP, bound
        if timestamp == EARLIEST_TIMESTAMP:
            return NO_TIMESTAMP, self.log.log_start_offset
        found = self.log.lookup_timestamp(timestamp)
        if found is None or found.offset >= bound:
            return NO_TIMESTAMP, UNKNOWN_OFFSET
        return found.timestamp, found.offset

    # -- ending ---------------------------------------------------------------------------

    def close(self):
        """Flush and close the log (leaving its clean-shutdown marker)."""
        self.log.close()

    def delete(self):
        """Close the log and remove the partition directory."""
        self.log.delete()

    # -- follower -------------------------------------------------------------------------
    # Called by the replica fetcher (replica_fetcher) while another broker leads.

    def append_as_follower(self, records):
        """Append batches fetched from the leader, with its offsets and epochs (validated:
        ``PartitionLog.append_as_follower``), then flush as the log's flush policy says;
        return ``(first, last)`` offsets appended."""
        appended = self.log.append_as_follower(records)
        self.log.flush_if_due()
        return appended

    def update_follower_high_watermark(self, leader_high_watermark):
        """The follower's high watermark = min(the leader's, its own log end offset), never
        moving back (Kafka's maybeUpdateHighWatermark); return it."""
        log = self.log
        new = max(min(leader_high_watermark, log.log_end_offset), log.log_start_offset)
        if new > self.high_watermark:
            self.high_watermark = new
        if self.damaged and log.log_end_offset >= leader_high_watermark \
                and self.on_healed is not None:
            self.on_healed(self)
        return self.high_watermark

    def may_truncate_to(self, offset):
        """Whether a follower may truncate to ``offset``: never below its own high
        watermark while it holds every record it had (it is not ``damaged``) — a leader
        that would make it (one that lost records) has fewer than were acknowledged, and
        following it would lose them everywhere — unless the topic allows unclean
        leader election (an out-of-sync leader's log is then the truth)."""
        return (offset >= self.high_watermark or self.damaged
                or self.unclean_leader_election)

    def update_follower_log_start(self, leader_log_start):
        """Follow the leader's log start offset up (its retention or DeleteRecords), never
        past this replica's high watermark (Kafka's maybeIncrementLogStartOffset refuses
        that); return the log start offset."""
        log = self.log
        target = min(leader_log_start, self.high_watermark)
        if target > log.log_start_offset:
            log.delete_records_before(target)
        return log.log_start_offset

    def truncate_to(self, offset):
        """Drop the records at and after ``offset`` (the high watermark follows the log end
        down); return the bytes dropped."""
        dropped = self.log.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        return dropped

    def truncate_to_high_watermark(self):
        """Kafka's pre-KIP-101 truncation before fetching from a new leader: drop what lies
        past the high watermark; return the bytes dropped."""
        return self.truncate_to(self.high_watermark)

    def truncate_fully_and_start_at(self, offset):
        """Restart the log empty at ``offset`` (Kafka's fetchOffsetAndTruncate: behind the leader's
        log start); return the bytes dropped."""
        dropped = self.log.truncate_fully_and_start_at(offset)
        self.high_watermark = offset
        return dropped
