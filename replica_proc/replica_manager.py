"""The replicas this broker hosts, kept in step with the controller's metadata.

``apply(image)`` reconciles the open partitions with a new ``MetadataImage``:

- every partition with a replica on this broker is open (its ``PartitionLog`` under
  ``<log dir>/<topic>-<partition>``, created or recovered) and has the image's leader,
  epoch, replicas and ISR;
- a partition no longer placed here, or whose topic was deleted, is closed and its
  directory deleted; so is, on the first image, any directory the image does not place
  here (a stray left by a deletion or a move this broker missed) whose
  ``partition.metadata`` names a deleted topic's id or its topic's current id. Any other
  stray (an id that cannot be read, or that the metadata does not know: a metadata log
  that lost records, say) is renamed aside, never deleted;
- a partition directory whose ``partition.metadata`` names the id of a deleted topic
  (``image.deleted_topic_ids``: the topic was deleted, and created again under its name,
  while this broker was down) is renamed aside to ``<topic>-<p>.<uuid>-stray``, as
  Kafka's LogManager does with stray logs, and a new log is started; one whose
  ``partition.metadata`` does not parse, or names any other id, is **offline**: an ERROR
  line names the file, the id expected and the one found, the directory is left as it is,
  and requests for the partition get KAFKA_STORAGE_ERROR (Kafka's answer for an offline
  replica) until an image no longer places it here. So is a partition whose log fails
  to open in any other way (an unexpected error is logged with its traceback). Other
  partitions are not affected;
- topic configs become each log's ``LogConfig`` (``BrokerConfig.log_config``) and the
  partition's ``min.insync.replicas``, over the broker's defaults: its server.properties
  under the image's dynamic broker configs (``cluster.config.dynamic``), so a changed
  topic config or broker default reaches every open log without a restart.

An image of version 0 (the empty page before any controller published) is ignored: it
says nothing about which logs to keep.

Replication, on the partitions this broker leads (``partition``): each Partition gets the
image's live brokers (ISR eligibility), ``replica.lag.time.max.ms``, the loop's clock, the
``alter_partition`` channel for ISR proposals, and reports high-watermark moves to
``on_high_watermark`` (set by the request handler). ``maybe_shrink_isr()`` (the broker
loop, every replica.lag.time.max.ms / 2) runs every led partition's ISR-shrink check.

New partitions are created together when an image brings at least
``CREATE_TOGETHER_MIN`` of them (``_create_directories``):
each directory is made with all its files (``segments.log.stage_empty_log``, and
``partition.metadata``) inside one staging directory ``<log dir>/.creating-<uuid>``,
without an fsync; one syncfs makes them all durable, they are renamed into place and the
log directory is fsynced once. A crash leaves only complete partition directories under
their names; a staging directory left behind holds nothing anyone wrote to, and is
deleted at start-up (its partitions are created again). If the staging fails (a full
disk), each partition is created on its own, as it is when there are fewer. Those logs,
and every log the first image opens (a broker start), open with ``durable_open=False``
(the removal of the clean-shutdown marker is not fsynced) and one syncfs follows before
``apply`` returns, before any of them takes a write. So neither a new partition nor the
reopening of one after a clean shutdown costs an fsync of its own (a new one cost six).
A syncfs writes out whatever else is dirty on the file system too: hence the minimum,
so that creating a few partitions on a busy broker does not flush every log.
Likewise ``close`` (a clean shutdown) closes at least ``CREATE_TOGETHER_MIN`` logs
together (``segments.log.close_together``): two syncfs instead of about ten fsyncs per log,
so a broker with 10,000 partitions stops within seconds instead of outliving the
supervisor's stop timeout.

Offline replicas: one notion, whatever the cause — a log that failed to open (above), or
an open log that went offline (``segments.log``: a failed fsync, a write that could not be
undone, damaged bytes found by the first read of a segment; its ``on_offline`` tells this
manager). Each is one entry of ``_offline`` holding its KAFKA_STORAGE_ERROR, worded
``partition <topic>-<p> is offline on broker <id>: <reason>`` (the log's own error, raised
by the call that took it offline, reads the same without the broker), until an image no
longer places the partition here or a restart opens it again. An offline log stays open
(closing it at shutdown decides whether the next open recovers it: ``segments.log``) but
gets no background work. A failed write that undid itself is not offline: that append
fails, the next may succeed.

Lookups for requests: ``partition(topic, index)`` raises KAFKA_STORAGE_ERROR for an
offline replica, UNKNOWN_TOPIC_OR_PARTITION for a topic or partition the image does not
have and NOT_LEADER_OR_FOLLOWER for one placed on other brokers; ``leader(...)`` also
refuses replicas this broker does not lead. ``offline(topic, index)`` is the error of an
offline replica (None if it is not one), for Metadata responses.

Damaged replicas (``damaged_replicas``): a log whose recovery dropped bytes or ended below
the checkpointed high watermark, or that is offline for damaged bytes, is reported to the
controller in ``damaged-replicas.json`` (rewritten when the list changes, at the end of
``apply`` and when a log goes offline), so that it does not lead while an intact replica
could. It heals once an image names a live leader that is not damaged itself: an offline
one has its damage set aside (``segments.damaged``: the damaged segment and those after
it renamed ``.damaged``, never deleted, the log cut at its last good batch) and is opened
again; then, as a follower, it fetches, and the first fetch answer whose high watermark
its log end reaches (``Partition.on_healed``: it holds every record the leader had
acknowledged) takes it off the list; the leader's ISR expansion brings it back into the
ISR. The list survives restarts (a replica still catching up stays on it). The follower
side (``Partition.may_truncate_to``): an intact replica never truncates below its own
high watermark (only a damaged one may, or any with ``unclean.leader.election.enable``).

High watermarks survive restarts (``replica_proc.high_watermark_checkpoint``):
``checkpoint_high_watermarks()`` (the LogManager's timer, and ``close``) writes every open
partition's high watermark to ``<log dir>/replication-offset-checkpoint``, and a partition
opened after a restart starts at its checkpointed value clamped to its log's [log start,
log end] (at the log start without one, or when the file does not parse: logged).

Owner: the broker's loop thread, the only caller.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
import uuid

from cluster.config.dynamic import effective_broker_config
from cluster.errors import (
    InconsistentTopicIdError,
    InvalidConfigurationError,
    KafkaStorageError,
    NotLeaderForPartitionError,
    UnknownTopicOrPartitionError,
)
from replica_proc.damaged_replicas import DamagedReplica, read_reports, write_reports
from replica_proc.high_watermark_checkpoint import HighWatermarkCheckpoint
from replica_proc.partition import (
    PARTITION_METADATA,
    Partition,
    directory_name,
    parse_directory_name,
    read_topic_id,
    write_topic_id,
)
from segments.checkpoint import fsync_directory, sync_filesystem
from segments.damaged import set_aside_damage
from segments.errors import CorruptSegmentError
from segments.log import PartitionLog, close_together, stage_empty_log

log = logging.getLogger(__name__)

#: Suffix of a partition directory renamed aside (Kafka's LogManager.StrayDirSuffix).
STRAY_SUFFIX = "-stray"
#: Prefix of the directory in which new partition directories are made (not a
#: partition directory name: ``parse_directory_name`` refuses it).
STAGING_PREFIX = ".creating-"
#: The fewest new partitions of one image created together, and the fewest logs a
#: shutdown closes together (see the module doc).
CREATE_TOGETHER_MIN = 16


class ReplicaManager:
    """The partitions of broker ``broker_id`` in ``log_dir`` (see the module doc).

    ``clock`` (milliseconds since the epoch) is handed to every PartitionLog;
    ``loop_clock`` (the broker loop's monotonic seconds) and ``alter_partition`` (an object
    with ``submit(topic, index, leader_epoch, partition_epoch, new_isr, callback)``, or
    None: no ISR change is proposed) to every Partition.
    """

    def __init__(self, broker_id, log_dir, config, clock=None, *, loop_clock=time.monotonic,
                 alter_partition=None):
        self.broker_id = broker_id
        self.log_dir = os.fspath(log_dir)
        self.static_config = config
        #: ``static_config`` with the dynamic broker configs of the image applied.
        self.config = config
        self.clock = clock
        self.image = None
        self._partitions = {}  # (topic, index) -> Partition (offline ones included)
        #: (topic, index) -> (topic id, KafkaStorageError) of every offline replica here
        self._offline = {}
        self._topic_settings = {}  # topic -> (configs, LogConfig, min.insync.replicas)
        self.loop_clock = loop_clock
        self.alter_partition = alter_partition
        #: Called with (partition, old high watermark) when a Partition reports a move.
        self.on_high_watermark = None
        self._deferred = None  # the moves reported while ``apply`` runs, or None
        os.makedirs(self.log_dir, exist_ok=True)
        self._hw_checkpoint = HighWatermarkCheckpoint(self.log_dir)
        #: (topic, index) -> DamagedReplica of every damaged replica here (module doc)
        self._damage = {}
        #: offline replicas whose logs are offline for damaged bytes (they can heal)
        self._healable = set()
        try:
            self._damage = {r.key: r for r in read_reports(self.log_dir)}
        except ValueError as exc:
            log.warning("%s; the damaged replicas are listed again from the logs", exc)
        self._written_damage = dict(self._damage)
        #: (topic, index) -> high watermark read at start, for partitions not opened yet.
        self._checkpointed_hws = self._read_high_watermarks()
        self._written_hws = None  # what the file holds since our last write
        for name in os.listdir(self.log_dir):
            if name.startswith(STAGING_PREFIX):
                log.info("deleting %s: partitions a crash left half-created (they are "
                         "created again)", os.path.join(self.log_dir, name))
                shutil.rmtree(os.path.join(self.log_dir, name), ignore_errors=True)

    def __len__(self):
        return len(self._partitions)

    def partitions(self):
        """The open partitions that are not offline (a list: the caller may apply images
        while iterating)."""
        if not self._offline:
            return list(self._partitions.values())
        return [p for key, p in self._partitions.items() if key not in self._offline]

    @property
    def offline_count(self):
        """How many partitions hosted here are offline (a storage error)."""
        return len(self._offline)

    @property
    def damaged_count(self):
        """How many replicas hosted here are damaged: offline for damage, or healing."""
        return len(self._damage)

    # -- lookups --------------------------------------------------------------------------

    def partition(self, topic, index):
        """The open Partition ``topic``-``index`` (leader or follower), else raise."""
        found = self._partitions.get((topic, index))
        if self._offline:
            offline = self._offline.get((topic, index))
            if offline is not None:
                raise offline[1]
        if found is not None:
            return found
        image = self.image
        info = image.topics.get(topic) if image is not None else None
        if info is None:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} does not exist (broker {self.broker_id})")
        if not 0 <= index < len(info.partitions):
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0..{len(info.partitions) - 1}, not {index}")
        state = info.partitions[index]
        raise NotLeaderForPartitionError(
            f"{topic}-{index} is not hosted on broker {self.broker_id} (leader: "
            f"{state.leader}, replicas {list(state.replicas)})")

    def hosted(self, topic, index):
        """The open Partition ``topic``-``index``, or None."""
        return self._partitions.get((topic, index))

    def offline(self, topic, index):
        """The KafkaStorageError of ``topic``-``index`` if its replica here is offline."""
        offline = self._offline.get((topic, index))
        return None if offline is None else offline[1]

    def leader(self, topic, index, current_leader_epoch=-1):
        """The Partition ``topic``-``index`` if this broker leads it, else raise (as
        ``partition``, then NOT_LEADER_OR_FOLLOWER or an epoch error)."""
        partition = self.partition(topic, index)
        partition.check_leader(current_leader_epoch)
        return partition

    def _take_offline(self, key, topic_id, reason, damaged=False, log_end=-1):
        """Record the replica ``key`` as offline for ``reason`` (see the module doc);
        ``damaged``: for damaged bytes (it can heal), its log ending at ``log_end``."""
        self._offline[key] = (topic_id, KafkaStorageError(
            f"partition {key[0]}-{key[1]} is offline on broker {self.broker_id}: {reason}"))
        if damaged:
            self._healable.add(key)
        known = self._damage.get(key)
        before = max(log_end, self._checkpointed_hws.get(key, -1),
                     known.log_end_before if known is not None else -1)
        self._damage[key] = DamagedReplica(key[0], key[1], topic_id, before, -1, True, reason)
        if self._deferred is None:  # a log that went offline while serving
            self._write_damage()

    def _on_log_offline(self, key, topic_id, reason):
        partition = self._partitions.get(key)
        offline_log = partition.log if partition is not None else None
        self._take_offline(key, topic_id, reason,
                           damaged=offline_log is not None and offline_log.offline_for_damage,
                           log_end=offline_log.log_end_offset if offline_log else -1)

    def _write_damage(self):
        """Rewrite damaged-replicas.json if the list changed (a failed write is logged:
        the next change writes again)."""
        if self._damage == self._written_damage:
            return
        try:
            write_reports(self.log_dir, self._damage.values())
        except OSError as exc:
            log.error("writing the damaged replicas of broker %d failed: %s",
                      self.broker_id, exc)
            return
        self._written_damage = dict(self._damage)

    def _healed(self, partition):
        """``partition`` (a damaged follower) reached its leader's high watermark."""
        key = (partition.topic, partition.index)
        partition.damaged = False
        if self._damage.pop(key, None) is not None:
            log.warning("%s-%d healed on broker %d: its log holds every record leader %d "
                        "acknowledged (log end %d); it may rejoin the ISR", *key,
                        self.broker_id, partition.leader_id, partition.log.log_end_offset)
            self._write_damage()

    # -- reconciliation -------------------------------------------------------------------

    def apply(self, image):
        """Reconcile with ``image``; return the keys ``(topic, index)`` of the partitions
        opened, changed or removed (for waking requests that wait on them)."""
        if image.version == 0:
            return set()
        self._deferred = []
        try:
            changed = self._apply(image)
        finally:
            deferred, self._deferred = self._deferred, None
        for partition, old in deferred:
            self._report_high_watermark(partition, old)
        return changed

    def _apply(self, image):
        first = self.image is None
        if first or image.broker_configs != self.image.broker_configs:
            self._apply_broker_configs(image.broker_configs)
        self.image = image
        hosted = {(state.topic, state.partition): state
                  for state in image.partitions_on(self.broker_id)}
        changed = set()
        live = frozenset(image.live_brokers())
        lag = self.config["replica.lag.time.max.ms"] / 1000
        for key, partition in list(self._partitions.items()):
            info = image.topics.get(key[0])
            if key not in hosted or info.topic_id != partition.topic_id:
                self._remove(key, "topic deleted" if info is None else
                             "topic re-created" if info.topic_id != partition.topic_id
                             else "partition moved to other brokers")
                changed.add(key)
        for key, (topic_id, _) in list(self._offline.items()):
            if key not in hosted or image.topics[key[0]].topic_id != topic_id:
                del self._offline[key]
                self._healable.discard(key)
                changed.add(key)
        for key, damage in list(self._damage.items()):
            info = image.topics.get(key[0])
            if key not in hosted or info is None or info.topic_id != damage.topic_id:
                del self._damage[key]
        if first:
            self._delete_strays(image, hosted)
        staged = self._create_directories(
            [key for key in hosted if key not in self._partitions and key not in self._offline
             and not os.path.lexists(self._path(*key))], image)
        opened = []  # logs opened without an fsync of their own
        for key, state in hosted.items():
            info = image.topics[key[0]]
            log_config, min_isr, unclean = self._settings(info)
            if key in self._healable and self._may_heal(state, live):
                self._heal(key)
                changed.add(key)
            partition = self._partitions.get(key)
            if partition is None:
                if key in self._offline:
                    continue
                lazy = first or key in staged
                partition = self._open(info, key[1], log_config, min_isr, durable_open=not lazy)
                if lazy:
                    opened.append(key)
                changed.add(key)
                if partition is None:
                    continue
            elif partition.log.config != log_config:
                partition.log.update_config(log_config)
            partition.min_insync_replicas = min_isr
            partition.unclean_leader_election = unclean
            partition.replica_lag_max = lag
            if partition.update(state, live):
                changed.add(key)
        for name in self._topic_settings.keys() - image.topics.keys():
            del self._topic_settings[name]
        if opened:
            self._sync_opened(opened)  # what their opens wrote, before any append
        self._write_damage()
        return changed

    def _may_heal(self, state, live):
        """Whether an image's ``state`` names a leader this offline replica can heal
        from: another broker, alive, not damaged itself."""
        leader = state.leader
        return (leader >= 0 and leader != self.broker_id and leader in live
                and leader not in state.damaged)

    def _heal(self, key):
        """Set the damage of the offline replica ``key`` aside and let it open again (the
        caller opens it: it is no longer offline), or leave it offline if that fails."""
        partition = self._partitions.pop(key, None)
        if partition is not None:
            partition.log.abandon()
        path = self._path(*key)
        try:
            found = set_aside_damage(path)
        except (OSError, KafkaStorageError) as exc:
            log.error("partition %s-%d stays offline: setting its damage aside failed: %s",
                      *key, exc)
            found = None
        else:
            if found is None:
                log.error("partition %s-%d stays offline: every batch of %s passes its "
                          "checks, so nothing can be set aside", *key, path)
        self._healable.discard(key)
        if found is None:
            return
        del self._offline[key]
        log.warning("partition %s-%d heals on broker %d: its log is cut at the last good "
                    "batch of segment %d, the rest comes from the leader", *key,
                    self.broker_id, found[0])

    def _path(self, topic, index):
        return os.path.join(self.log_dir, directory_name(topic, index))

    def _create_directories(self, keys, image):
        """Create the directories of the new partitions ``keys`` together if there are
        enough of them (see the module doc); return the keys created so. If that fails,
        those not renamed into place are created by their own opens."""
        if len(keys) < CREATE_TOGETHER_MIN:
            return set()
        staging = os.path.join(self.log_dir, f"{STAGING_PREFIX}{uuid.uuid4().hex}")
        try:
            os.mkdir(staging)
            for topic, index in keys:
                path = os.path.join(staging, directory_name(topic, index))
                stage_empty_log(path)
                write_topic_id(path, image.topics[topic].topic_id, durable=False)
            sync_filesystem(staging)
            for topic, index in keys:
                os.rename(os.path.join(staging, directory_name(topic, index)),
                          self._path(topic, index))
            os.rmdir(staging)
            fsync_directory(self.log_dir)
        except OSError as exc:
            log.warning("creating %d partition directories together failed (%s); "
                        "creating them one by one", len(keys), exc)
            shutil.rmtree(staging, ignore_errors=True)
            return {key for key in keys if os.path.lexists(self._path(*key))}  # renamed
        return set(keys)

    def _sync_opened(self, keys):
        """Make durable what the opens of the partitions ``keys`` wrote: one syncfs, else
        an fsync of each directory (a partition whose fsync fails is offline)."""
        try:
            sync_filesystem(self.log_dir)
            return
        except OSError as exc:
            log.warning("syncfs of %s failed (%s); fsyncing each new partition directory",
                        self.log_dir, exc)
        for key in keys:
            partition = self._partitions.get(key)
            if partition is None:
                continue
            try:
                fsync_directory(partition.log.path)
            except OSError as exc:
                log.error("partition %s-%d offline: fsync of its new directory failed: %s",
                          key[0], key[1], exc)
                self._take_offline(key, partition.topic_id,
                                   f"fsync of its new directory failed: {exc}")

    def _apply_broker_configs(self, broker_configs):
        try:
            self.config = effective_broker_config(self.static_config, broker_configs,
                                                  self.broker_id)
        except InvalidConfigurationError as exc:  # valid on the controller, not here
            log.error("dynamic broker configs %s: %s; keeping the previous ones",
                      broker_configs, exc)
            return
        self._topic_settings.clear()

    def _settings(self, info):
        """``(LogConfig, min.insync.replicas, unclean.leader.election.enable)`` of a topic,
        rebuilt when its configs change."""
        cached = self._topic_settings.get(info.name)
        if cached is not None and cached[0] == info.configs:
            return cached[1:]
        try:
            merged = self.config.topic_config(info.configs)
            log_config = self.config.log_config(info.configs)
        except InvalidConfigurationError as exc:
            log.error("topic %s: %s; using the broker's defaults", info.name, exc)
            merged = self.config.topic_config()
            log_config = self.config.log_config()
        settings = (dict(info.configs), log_config, merged["min.insync.replicas"],
                    merged["unclean.leader.election.enable"])
        self._topic_settings[info.name] = settings
        return settings[1:]

    def _open(self, info, index, log_config, min_isr, durable_open=True):
        """Open (recover) or create the log of ``info.name``-``index``; None if the
        partition is offline (see the module doc), with the reason logged. With
        ``durable_open=False`` the caller syncs the file system before the log takes a
        write (``_sync_opened``)."""
        path = os.path.join(self.log_dir, directory_name(info.name, index))
        key = (info.name, index)
        try:
            found_id = read_topic_id(path) if os.path.isdir(path) else None
            if found_id is not None and found_id != info.topic_id:
                if found_id not in self.image.deleted_topic_ids:
                    raise InconsistentTopicIdError(
                        f"{os.path.join(path, PARTITION_METADATA)}: topic id {found_id!r} "
                        f"on disk, expected {info.topic_id!r} (the metadata's id of topic "
                        f"{info.name!r}), and {found_id!r} is no deleted topic's id")
                aside = self._rename_aside(path)
                # its checkpointed high watermark was the deleted topic's, not this one's
                self._checkpointed_hws.pop(key, None)
                log.warning("%s: topic id %s on disk is a deleted topic's; the metadata's "
                            "is %s (topic %s re-created): old log moved to %s", path,
                            found_id, info.topic_id, info.name, aside)
            partition_log = PartitionLog(
                path, log_config, clock=self.clock,
                on_offline=lambda why: self._on_log_offline(key, info.topic_id, why),
                durable_open=durable_open)
            if found_id != info.topic_id:
                write_topic_id(path, info.topic_id)
        except Exception as exc:  # even a bug reading one log must not stop the others
            expected = isinstance(exc, (KafkaStorageError, InconsistentTopicIdError, OSError))
            reason = str(exc) if expected else repr(exc)
            log.error("partition %s-%d offline (its directory %s is left as it is): %s",
                      info.name, index, path, reason, exc_info=not expected)
            self._take_offline(key, info.topic_id, reason,
                               damaged=isinstance(exc, CorruptSegmentError))
            return None
        recovery = partition_log.recovery
        log.info("opened %s: offsets %d..%d%s", path, partition_log.log_start_offset,
                 partition_log.log_end_offset,
                 f" (recovered {recovery.segments_recovered} segment(s), dropped "
                 f"{recovery.bytes_dropped} bytes)" if recovery.segments_recovered else "")
        partition = Partition(info.name, index, info.topic_id, self.broker_id, partition_log,
                              min_isr, clock=self.loop_clock,
                              replica_lag_max=self.config["replica.lag.time.max.ms"] / 1000,
                              alter_partition=self.alter_partition,
                              on_high_watermark=self._report_high_watermark)
        checkpointed = self._checkpointed_hws.pop(key, None)
        if checkpointed is not None:
            partition.high_watermark = min(max(checkpointed, partition_log.log_start_offset),
                                           partition_log.log_end_offset)
        self._note_damage(partition, checkpointed)
        self._partitions[key] = partition
        return partition

    def _note_damage(self, partition, checkpointed_hw):
        """Put a log just opened on the damaged list if its recovery lost records, or
        keep it there if it was on it (still healing, or healing starts: see the module
        doc)."""
        key = (partition.topic, partition.index)
        recovery = partition.log.recovery
        end = partition.log.log_end_offset
        known = self._damage.get(key)
        if known is not None and known.topic_id != partition.topic_id:
            known = None
        reason = None
        if recovery.bytes_dropped:
            reason = f"recovery dropped {recovery.bytes_dropped} bytes of damaged batches"
        elif checkpointed_hw is not None and end < checkpointed_hw:
            reason = (f"the log ends at {end}, below the high watermark {checkpointed_hw} "
                      f"checkpointed before (lost writes)")
        if reason is not None:
            before = max(recovery.log_end_before, recovery.recovery_point,
                         checkpointed_hw or -1,
                         known.log_end_before if known is not None else -1)
            log.warning("partition %s-%d lost records on broker %d: %s (log end %d, before "
                        "%d); it leads only if no intact replica can", *key,
                        self.broker_id, reason, end, before)
            known = DamagedReplica(*key, partition.topic_id, before, end, False, reason)
        elif known is not None and known.offline:
            known = dataclasses.replace(known, offline=False, log_end_after=end)
        if known is None:
            self._damage.pop(key, None)
            return
        self._damage[key] = known
        partition.damaged = True
        partition.on_healed = self._healed

    def _report_high_watermark(self, partition, old_high_watermark):
        """Pass a Partition's HW move on — after ``apply`` when it happens during one, so
        that what it wakes reads a fully applied image."""
        if self._deferred is not None:
            self._deferred.append((partition, old_high_watermark))
        elif self.on_high_watermark is not None:
            self.on_high_watermark(partition, old_high_watermark)

    # -- ISR ------------------------------------------------------------------------------

    def maybe_shrink_isr(self):
        """Run the ISR-shrink check (Kafka's maybeShrinkIsr) of every partition this broker
        leads."""
        for partition in self.partitions():
            if partition.is_leader and partition.followers:
                partition.maybe_shrink_isr()

    @staticmethod
    def _rename_aside(path):
        """Rename a partition directory to ``<path>.<uuid>-stray`` (never deleted here);
        return the new path."""
        aside = f"{path}.{uuid.uuid4().hex}{STRAY_SUFFIX}"
        os.rename(path, aside)
        fsync_directory(os.path.dirname(path))
        return aside

    def _remove(self, key, reason):
        partition = self._partitions.pop(key)
        self._offline.pop(key, None)
        self._healable.discard(key)
        log.info("deleting %s-%d (%s)", key[0], key[1], reason)
        partition.delete()

    def _delete_strays(self, image, hosted):
        """Delete partition directories the first image does not place on this broker;
        rename aside those whose topic id cannot be read."""
        for name in os.listdir(self.log_dir):
            path = os.path.join(self.log_dir, name)
            key = parse_directory_name(name)
            if key is None or not os.path.isdir(path) or key in hosted:
                continue
            try:
                topic_id = read_topic_id(path)
            except KafkaStorageError as exc:
                topic_id = None
                log.error("%s", exc)
            info = image.topics.get(key[0])
            if topic_id not in image.deleted_topic_ids and (
                    info is None or info.topic_id != topic_id):
                log.error("stray log %s (not a partition of broker %d in metadata version "
                          "%d) has topic id %s, which the metadata does not know: moved to "
                          "%s, not deleted", path, self.broker_id, image.version, topic_id,
                          self._rename_aside(path))
                continue
            log.info("deleting stray log %s (topic id %s): not a partition of broker %d in "
                     "metadata version %d", path, topic_id, self.broker_id, image.version)
            shutil.rmtree(path, ignore_errors=True)

    # -- high watermarks -------------------------------------------------------------------

    def _read_high_watermarks(self):
        try:
            return self._hw_checkpoint.read()
        except KafkaStorageError as exc:
            log.error("%s; every high watermark starts at its log start offset", exc)
            return {}

    def checkpoint_high_watermarks(self):
        """Write every open partition's high watermark (and those read at start of the
        partitions still offline) to replication-offset-checkpoint, unless the file
        already holds exactly these; True if it wrote. Raises OSError if the write
        fails (the file keeps its previous content)."""
        high_watermarks = {key: partition.high_watermark
                           for key, partition in self._partitions.items()}
        for key in self._offline:
            if key in self._checkpointed_hws:
                high_watermarks[key] = self._checkpointed_hws[key]
        if high_watermarks == self._written_hws:
            return False
        self._hw_checkpoint.write(high_watermarks)
        self._written_hws = high_watermarks
        return True

    # -- ending ---------------------------------------------------------------------------

    def close(self):
        """Checkpoint the high watermarks, then flush and close every log (clean
        shutdown); a failure is logged, the rest still close."""
        try:
            self.checkpoint_high_watermarks()
        except OSError as exc:
            log.error("writing %s failed: %s", self._hw_checkpoint.path, exc)
        partitions = list(self._partitions.items())
        self._partitions.clear()
        if len(partitions) < CREATE_TOGETHER_MIN:
            for key, partition in partitions:
                try:
                    partition.close()
                except (KafkaStorageError, OSError) as exc:
                    log.error("closing %s-%d failed: %s", key[0], key[1], exc)
            return
        names = {id(partition.log): key for key, partition in partitions}
        started = time.monotonic()
        try:
            failed = close_together([partition.log for _, partition in partitions],
                                    self.log_dir)
        except OSError as exc:
            log.error("syncing %s at shutdown failed: %s; every log is recovered at the "
                      "next start", self.log_dir, exc)
            return
        for partition_log, exc in failed:
            key = names[id(partition_log)]
            log.error("closing %s-%d failed: %s", key[0], key[1], exc)
        log.info("closed %d logs together in %.1f s", len(partitions) - len(failed),
                 time.monotonic() - started)
