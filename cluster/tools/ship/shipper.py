"""The shipper's loop: read lines while the bounded buffer has room, send them, follow their
acknowledgements per file, checkpoint what is acknowledged.

``Shipper(producer, topic, tailer, ...)``. Each turn of ``run(stop)``:

1. acknowledgements: each followed file keeps its sent, unacknowledged *chunks* (the lines
   of one read, and the position after them) oldest first; a chunk whose records are all
   acknowledged moves the file's ``acked`` position to its end. A chunk with a failed record
   (the producer gave up: ``delivery.timeout.ms`` passed while the cluster was down, or a
   non-retriable error) *rewinds* its file: every unacknowledged chunk of it is forgotten
   and reading starts again at ``acked`` after ``retry_backoff`` seconds. Nothing is
   dropped; what was in flight may be delivered twice.
2. a scan every ``scan_interval`` (``tailer``).
3. reading, while the bytes sent and not yet acknowledged stay below ``max_buffer_bytes``:
   once the buffer is full (the cluster down or slow) the shipper stops reading, so memory
   stays bounded and nothing is lost.
4. the checkpoint every ``checkpoint_interval`` when an acknowledged position moved: only
   acknowledged positions are written, so a crash re-sends at most what followed the last
   checkpoint and never skips a line.
5. the progress line every ``progress_interval`` (stderr).

``run`` returns when ``stop()`` is true, or with ``once`` when every file is read to its end;
then ``finish()`` flushes the producer, collects the last acknowledgements, writes the
checkpoint and returns the files' checkpointed positions.

Records are sent with the producer the caller built (the command: acks=all, idempotent), one
per line: its key from the key template, its value the line, its headers ``records``'s.
With ``partition_by_key`` (the producer has the default partitioner) the lines of one read go
out in one bulk send (``KafkaProducer.send_batch``: its batches are encoded at once, bounded
by the producer's ``batch.size``; one timestamp, the time of the send), to the partition of
the file's key computed once as the default partitioner would (murmur2 of the key modulo the
topic's partitions), or with per-line keys (``--parse json``) each where murmur2 puts it;
with another partitioner each line is sent by ``send`` so the partitioner sees every record.
The records of one file go out in order; with a key per file (``{file}``) they land in one
partition in order.

Owner: the thread calling ``run`` (the command's main thread); ``stats_source`` is called
by the stats publisher thread and reads plain counters only.
"""
from __future__ import annotations

import logging
import sys
import time

from cluster.errors import KafkaError, KafkaTimeoutError
from cluster.producer.partitioner import partition_for_key
from cluster.tools.ship import checkpoint
from cluster.tools.ship.records import (
    ERROR_HEADER,
    ID_HEADER,
    OFFSET_HEADER,
    PATH_HEADER,
    parse_json,
)

log = logging.getLogger(__name__)

#: Seconds the loop sleeps when there was nothing to read.
IDLE_SLEEP = 0.02


class Chunk:
    """The lines of one read of one file, sent: their futures (one per producer batch they
    went into), the position after them, their bytes and count."""

    __slots__ = ("futures", "end", "skipping", "size", "lines", "checked")

    def __init__(self, futures, end, skipping, size, lines):
        self.futures = futures
        self.end = end
        self.skipping = skipping
        self.size = size
        self.lines = lines
        self.checked = 0

    def done(self):
        futures = self.futures
        while self.checked < len(futures):
            if not futures[self.checked].is_done:
                return False
            self.checked += 1
        return True

    def error(self):
        return next((f.exception for f in self.futures if f.failed()), None)


class Shipper:
    """Files to a topic, at least once (module doc)."""

    def __init__(self, producer, topic, tailer, key_template, *, checkpoint_path=None,
                 parse="none", clock=time.monotonic, sleep=time.sleep,
                 max_buffer_bytes=16 << 20, scan_interval=1.0, checkpoint_interval=1.0,
                 progress_interval=10.0, retry_backoff=1.0, progress_stream=None,
                 partition_by_key=False):
        self.producer = producer
        self.topic = topic
        self.tailer = tailer
        self.key_template = key_template
        self.checkpoint_path = checkpoint_path
        self.parse_json = parse == "json"
        self.clock = clock
        self.sleep = sleep
        self.max_buffer_bytes = max_buffer_bytes
        self.scan_interval = scan_interval
        self.checkpoint_interval = checkpoint_interval
        self.progress_interval = progress_interval
        self.retry_backoff = retry_backoff
        self.partition_by_key = partition_by_key
        self.progress_stream = sys.stderr if progress_stream is None else progress_stream
        self.lines_read = 0
        self.records_sent = 0
        self.records_acked = 0
        self.parse_errors = 0
        self.resends = 0
        self.buffer_bytes = 0
        self.lag_bytes = 0
        self._keys = {}
        #: the producer's batch.size bounds each batch of the bulk send too
        self.batch_size = producer.config["batch_size"]
        self._stored = None
        self._next_scan = self._next_checkpoint = self._next_progress = 0.0

    # -- the loop --------------------------------------------------------------------------

    def run(self, stop=lambda: False):
        """Ship until ``stop()`` (or, with the tailer's ``once``, until every file is read
        and acknowledged); the caller then calls ``finish()``."""
        self.start()
        while not stop() and self.turn():
            pass

    def start(self):
        """The first scan (the files present at start)."""
        self.tailer.scan()
        now = self.clock()
        self._next_scan = now + self.scan_interval
        self._next_progress = now + self.progress_interval

    def turn(self):
        """One turn of the loop (module doc); False when ``once`` is done."""
        self.collect()
        now = self.clock()
        once = self.tailer.once
        if not once and now >= self._next_scan:
            self.tailer.scan()
            self._next_scan = now + self.scan_interval
        read = self._fill()
        if now >= self._next_checkpoint:
            self.write_checkpoint()
            self._next_checkpoint = now + self.checkpoint_interval
        if self.progress_interval and now >= self._next_progress:
            self.print_progress()
            self._next_progress = now + self.progress_interval
        if once and self.tailer.finished():
            if not self.buffer_bytes:
                return False
            self._flush(1.0)
        elif not read:
            self.sleep(IDLE_SLEEP)
        return True

    def _fill(self):
        """Read and send while the buffer has room; whether anything was read."""
        read = False
        while self.buffer_bytes < self.max_buffer_bytes:
            got = self.tailer.read(self.max_buffer_bytes - self.buffer_bytes)
            if got is None:
                break
            self.send(*got)
            read = True
        return read

    def send(self, tracked, cut):
        """Send the lines of ``cut`` (read from ``tracked``) and keep them as a chunk."""
        lines, positions = cut.lines, cut.positions
        size = sum(map(len, lines))
        futures = []
        if lines:
            self.lines_read += len(lines)
            try:
                self._send_lines(tracked, lines, positions, futures)
            except KafkaError as exc:  # every send error rewinds the file
                self.buffer_bytes += size
                tracked.pending.append(Chunk(futures, tracked.position, tracked.skipping,
                                             size, len(lines)))
                self._rewind(tracked, exc)
                return
            self.records_sent += len(lines)
        self.buffer_bytes += size
        tracked.pending.append(Chunk(futures, tracked.position, tracked.skipping, size,
                                     len(lines)))

    def _send_lines(self, tracked, lines, positions, futures):
        topic = self.topic
        path = (PATH_HEADER, tracked.origin.encode("utf-8", "surrogateescape"))
        fid = (ID_HEADER, tracked.id_bytes)
        headers = [[path, fid, (OFFSET_HEADER, b"%d" % position)] for position in positions]
        key = self._file_key(tracked)
        keys = None if key is None else [key] * len(lines)
        if self.parse_json:
            keys = self._parse_lines(tracked, lines, headers, keys)
        if not self.partition_by_key:  # the producer's own partitioner, record by record
            send = self.producer.send
            last = None
            for line, line_key, line_headers in zip(lines, keys or [None] * len(lines),
                                                    headers):
                future = send(topic, line, line_key, line_headers)
                if future[0] is not last:  # one future per producer batch is enough
                    last = future[0]
                    futures.append(future)
            return
        partition = None
        if keys is not None and keys.count(key) == len(keys):  # the default partitioner, once
            partition = partition_for_key(key, len(self.producer.partitions_for(topic)))
        futures.extend(self.producer.send_batch(topic, lines, keys, partition,
                                                headers=headers, batch_size=self.batch_size))

    def _parse_lines(self, tracked, lines, headers, keys):
        """``--parse json``: count the lines that are not JSON objects and mark them (header
        error.message); the keys, each line's own when a JSON field fills the template."""
        per_line = self.key_template.template and self.key_template.per_line
        for index, line in enumerate(lines):
            fields = parse_json(line)
            if isinstance(fields, str):
                self.parse_errors += 1
                headers[index].append((ERROR_HEADER, fields.encode()))
            elif per_line:
                keys[index] = self.key_template.line_key(tracked.origin, fields)
        return keys

    def _file_key(self, tracked):
        key = self._keys.get(tracked.origin, False)
        if key is False:
            key = self._keys[tracked.origin] = self.key_template.file_key(tracked.origin)
        return key

    def collect(self):
        """Move each file's acknowledged position over its acknowledged chunks; rewind a
        file whose chunk failed (module doc)."""
        for tracked in self.tailer.tracked:
            pending = tracked.pending
            while pending and pending[0].done():
                chunk = pending[0]
                error = chunk.error()
                if error is not None:
                    self._rewind(tracked, error)
                    break
                pending.popleft()
                self.buffer_bytes -= chunk.size
                self.records_acked += chunk.lines
                tracked.acked = chunk.end
                tracked.acked_skipping = chunk.skipping

    def _rewind(self, tracked, error):
        self.resends += 1
        self.buffer_bytes -= sum(chunk.size for chunk in tracked.pending)
        tracked.pending.clear()
        if tracked.replaced:
            log.error("records of %s failed (%s) after it was truncated in place: its lines "
                      "from position %d are gone from the file and cannot be sent again",
                      tracked.path, error, tracked.acked)
            return
        log.warning("records of %s failed (%s): sending its lines again from position %d "
                    "in %.1f s", tracked.path, error, tracked.acked, self.retry_backoff)
        tracked.position = tracked.acked
        tracked.skipping = tracked.acked_skipping
        tracked.retry_at = self.clock() + self.retry_backoff
        tracked.idle_since = None
        if tracked.done and tracked.handle is not None:
            tracked.done = False

    # -- checkpoint, progress, stop --------------------------------------------------------

    def write_checkpoint(self):
        """Store the acknowledged positions when they changed since the last store."""
        entries = self.tailer.entries()
        self.lag_bytes = sum(max(t.size, t.position) - t.acked for t in self.tailer.tracked)
        if self.checkpoint_path is None or entries == self._stored:
            return
        checkpoint.store(self.checkpoint_path, entries)
        self._stored = entries

    def _flush(self, timeout):
        try:
            self.producer.flush(timeout)
        except KafkaTimeoutError:
            return False
        return True

    def finish(self, timeout=30.0):
        """Flush (at most ``timeout`` seconds), collect the last acknowledgements, write the
        checkpoint; return ``(current path, checkpoint entry)`` of every followed file."""
        if not self._flush(timeout):
            log.warning("records still unacknowledged after %s s: their lines are not "
                        "checkpointed and will be sent again by the next run", timeout)
        self.collect()
        self.write_checkpoint()
        self.tailer.close()
        return [(t.path, t.entry()) for t in self.tailer.tracked if not t.replaced]

    def progress(self):
        """The progress line (lines read, sent, acknowledged, errors, lag bytes per file)."""
        lags = ", ".join(f"{t.path} {max(t.size, t.position) - t.acked}"
                         for t in self.tailer.tracked if not t.replaced)
        return (f"ship: {self.lines_read} lines read, {self.records_sent} sent, "
                f"{self.records_acked} acked, {self.parse_errors} parse errors, "
                f"{self.tailer.lines_split} split, {self.tailer.lines_truncated} truncated, "
                f"{self.resends} resends; lag bytes: {lags or 'none'}")

    def print_progress(self):
        print(self.progress(), file=self.progress_stream, flush=True)

    def stats_source(self):
        """The shipper's figures for its process's stats page (``cluster.stats``)."""
        return {
            "lines-read-total": self.lines_read,
            "records-acked-total": self.records_acked,
            "parse-error-total": self.parse_errors,
            "lines-split-total": self.tailer.lines_split,
            "lines-truncated-total": self.tailer.lines_truncated,
            "file-truncation-total": self.tailer.truncations,
            "resend-total": self.resends,
            "files-followed": len(self.tailer.tracked),
            "buffer-bytes": self.buffer_bytes,
            "lag-bytes": self.lag_bytes,
        }, {}
