"""``ringlog dump-log``: print segment files the way Kafka's kafka-dump-log does.

The CLI (``cluster.tools.cli``) builds an ``argparse`` sub-parser, calls ``add_arguments`` on
it and ``run(args)`` with the parsed namespace. For each file:

- ``.log``: ``Dumping <file>``, ``Starting offset: <base offset>``, then one line per
  batch (``baseOffset: .. lastOffset: .. count: .. baseSequence: .. lastSequence: ..
  producerId: .. producerEpoch: .. partitionLeaderEpoch: .. isTransactional: ..
  isControl: .. deleteHorizonMs: OptionalLong[..]|OptionalLong.empty position: ..
  CreateTime: .. size: .. magic: 2 compresscodec: ..
  crcValid: ..``); with ``--deep-iteration`` (implied by ``--print-data-log``) one
  ``| offset: ..`` line per record, with ``key: .. payload: ..`` under
  ``--print-data-log`` (a control batch's record instead ends with
  ``endTxnMarker: COMMIT|ABORT coordinatorEpoch: ..``, or ``controlType: NAME(id)``).
  Bytes after the last whole batch are reported (``Found N invalid bytes at the end of
  <file>``), and offsets that are not consecutive under ``--deep-iteration``.
- ``.index``: ``offset: N position: P`` per entry, checked against the batch at ``P``;
  ``.timeindex``: ``timestamp: T offset: N`` per entry, checked against the batch holding
  ``N``. ``--verify-index-only`` prints only the mismatches; ``--index-sanity-check``
  only runs the check the log runs at open.
- ``.snapshot`` (producer state, ``segments.producer_snapshot_descriptor``): one line per
  producer, ``producerId: .. producerEpoch: .. coordinatorEpoch: ..
  currentTxnFirstOffset: OptionalLong[..]|OptionalLong.empty lastTimestamp: ..`` and,
  when it has a batch, ``firstSequence: .. lastSequence: .. lastOffset: .. offsetDelta:
  .. timestamp: ..`` (kafka-dump-log prints Java's OptionalLong as is); a snapshot that
  fails its parse or CRC prints why.
- ``.txnindex``: ``version: 0 producerId: .. firstOffset: .. lastOffset: ..
  lastStableOffset: ..`` per aborted transaction; an index that does not parse is a
  problem reported with the rule it breaks (the log would rebuild it).

Everything goes to ``out``. ``run`` returns 0 when every file checked out, 1 when some
problem was reported (invalid CRC, trailing bytes, index mismatch, unknown file), 2 when
a file could not be read. Read-only: it opens the files, never the log.
"""
from __future__ import annotations

import os
import sys

from segments import producer_snapshot_descriptor as sd
from segments.errors import CorruptRecordError, StorageError
from segments.index import CorruptIndexError, OffsetIndex, TimeIndex
from segments.producer_state import decrement_sequence
from segments.record import batch_descriptor as bd, control_record_descriptor as cd
from segments.record.batch_header import BatchHeader
from segments.record.compression import CODEC_NAMES
from segments.record.records import RecordBatch
from segments.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    base_offset_from_name,
    iter_file_batches,
)
from segments.txn_index import TXN_INDEX_SUFFIX, parse_entries

#: Prefix of a record line (Kafka's RecordIndent).
RECORD_INDENT = "|"
#: Big enough for any index file's entry count (the dump reads, never appends).
_ANY_INDEX_SIZE = 2**31 - 1
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def add_arguments(parser):
    """Add kafka-dump-log's options to an ``argparse`` parser."""
    parser.add_argument(
        "--files", action="append", required=True, metavar="FILE[,FILE...]",
        help="segment files to dump (.log, .index, .timeindex, .snapshot, .txnindex); "
             "comma-separated or repeated")
    parser.add_argument(
        "--print-data-log", action="store_true",
        help="print the records' keys and values (implies --deep-iteration)")
    parser.add_argument(
        "--deep-iteration", action="store_true",
        help="print every record, not only the batch headers")
    parser.add_argument(
        "--verify-index-only", action="store_true",
        help="check index entries against the log and print only the mismatches")
    parser.add_argument(
        "--index-sanity-check", action="store_true",
        help="only run the index sanity check a log runs when it opens")
    return parser


def run(args, out=None, parse_record=None):
    """Dump every file named by ``args`` (an argparse namespace); return the exit code.
    ``parse_record(record)``, when given, is ``(key text, payload text)`` (either None to
    leave it out) of a record printed with ``--print-data-log`` (Kafka's MessageParser:
    ``--offsets-decoder`` passes one)."""
    out = sys.stdout if out is None else out
    files = [name for item in args.files for name in item.split(",") if name]
    deep = args.deep_iteration or args.print_data_log
    status = 0
    for name in files:
        print(f"Dumping {name}", file=out)
        try:
            if name.endswith(LOG_SUFFIX):
                ok = dump_log(name, out, deep, args.print_data_log, parse_record)
            elif name.endswith(INDEX_SUFFIX):
                ok = dump_index(name, out, args.verify_index_only, args.index_sanity_check)
            elif name.endswith(TIME_INDEX_SUFFIX):
                ok = dump_time_index(name, out, args.verify_index_only,
                                     args.index_sanity_check)
            elif name.endswith(sd.SUFFIX):
                ok = dump_producer_snapshot(name, out)
            elif name.endswith(TXN_INDEX_SUFFIX):
                ok = dump_txn_index(name, out)
            else:
                print(f"Ignoring unknown file {name}", file=out)
                ok = False
        except (OSError, ValueError, StorageError) as e:
            print(f"Could not dump {name}: {e}", file=out)
            status = 2
            continue
        if not ok:
            status = max(status, 1)
    return status


# -- .log -----------------------------------------------------------------------------------

def dump_log(path, out, deep=False, print_data=False, parse_record=None):
    """Print the batches (and records) of a .log file; False if a problem was found."""
    print(f"Starting offset: {base_offset_from_name(path)}", file=out)
    ok = True
    non_consecutive = []
    last_offset = None
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        valid_bytes = 0
        for position, view in iter_file_batches(f.fileno(), 0, size):
            try:
                header = BatchHeader(view)
                header.validate(check_crc=False)
            except CorruptRecordError:
                break
            crc_valid = header.compute_crc() == header.crc
            ok &= crc_valid
            print(_batch_line(header, position, crc_valid), file=out)
            if deep:
                try:
                    for record in RecordBatch(view):
                        if last_offset is not None and record.offset != last_offset + 1:
                            non_consecutive.append((last_offset, record.offset))
                        last_offset = record.offset
                        print(_record_line(header, record, print_data, parse_record),
                              file=out)
                except StorageError as e:
                    print(f"{RECORD_INDENT} cannot decode the records: {e}", file=out)
                    ok = False
            valid_bytes = position + header.size_in_bytes
    if valid_bytes < size:
        print(f"Found {size - valid_bytes} invalid bytes at the end of "
              f"{os.path.basename(path)}", file=out)
        ok = False
    if non_consecutive:
        print(f"Non-consecutive offsets in {path}", file=out)
        for first, second in non_consecutive:
            print(f"  {first} is followed by {second}", file=out)
    return ok


def _optional_long(value):
    """``value`` (or None) as Java prints an OptionalLong, as kafka-dump-log shows it."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _delete_horizon(header):
    """The batch's delete horizon (KIP-534: its baseTimestamp when attributes bit 6 is
    set, stamped by compaction), or None."""
    return header.base_timestamp if header.attributes & bd.DELETE_HORIZON_MASK else None


def _batch_line(header, position, crc_valid):
    last_sequence = bd.NO_SEQUENCE if header.base_sequence == bd.NO_SEQUENCE else \
        (header.base_sequence + header.last_offset_delta) % 2**31
    return (f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
            f"count: {header.record_count} baseSequence: {header.base_sequence} "
            f"lastSequence: {last_sequence} producerId: {header.producer_id} "
            f"producerEpoch: {header.producer_epoch} "
            f"partitionLeaderEpoch: {header.partition_leader_epoch} "
            f"isTransactional: {_bool(header.is_transactional)} "
            f"isControl: {_bool(header.is_control_batch)} "
            f"deleteHorizonMs: {_optional_long(_delete_horizon(header))} position: {position} "
            f"{_TIMESTAMP_TYPES[header.timestamp_type]}: {header.max_timestamp} "
            f"size: {header.size_in_bytes} magic: {header.magic} "
            f"compresscodec: {CODEC_NAMES.get(header.compression_type, 'unknown')} "
            f"crcValid: {_bool(crc_valid)}")


def _record_line(header, record, print_data, parse_record=None):
    sequence = bd.NO_SEQUENCE if header.base_sequence == bd.NO_SEQUENCE else \
        (header.base_sequence + record.offset - header.base_offset) % 2**31
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    line = (f"{RECORD_INDENT} offset: {record.offset} "
            f"{_TIMESTAMP_TYPES[record.timestamp_type]}: {record.timestamp} "
            f"keySize: {key_size} valueSize: {value_size} sequence: {sequence} "
            f"headerKeys: [{','.join(key for key, _ in record.headers)}]")
    if header.is_control_batch:
        return line + _control_text(record)
    if print_data and parse_record is not None:
        key, payload = parse_record(record)
        if key is not None:
            line += f" key: {key}"
        if payload is not None:
            line += f" payload: {payload}"
    elif print_data:
        if record.key is not None:
            line += f" key: {_text(record.key)}"
        if record.value is not None:
            line += f" payload: {_text(record.value)}"
    return line


def _control_text(record):
    """What kafka-dump-log adds to a control record's line."""
    key, value = record.key, record.value
    control_type = cd.KEY.unpack(key)[1] if key is not None and \
        len(key) == cd.KEY_SIZE else -1
    if control_type in (cd.ABORT, cd.COMMIT) and value is not None and \
            len(value) >= cd.VALUE_SIZE:
        return (f" endTxnMarker: {cd.TYPE_NAMES[control_type]} coordinatorEpoch: "
                f"{cd.END_TXN_MARKER.unpack_from(value)[1]}")
    return f" controlType: {cd.TYPE_NAMES.get(control_type, 'UNKNOWN')}({control_type})"


def _text(data):
    return bytes(data).decode("utf-8", errors="replace")


def _bool(value):
    return "true" if value else "false"


# -- .snapshot -------------------------------------------------------------------------------

def dump_producer_snapshot(path, out):
    """Print the producers of a producer-state snapshot; False if it does not parse."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        entries = sd.decode(data)
    except sd.CorruptSnapshotError as e:
        print(f"Snapshot {path} is corrupt: {e}", file=out)
        return False
    for (producer_id, epoch, last_seq, last_offset, offset_delta, timestamp,
         coordinator_epoch, txn_first_offset) in entries:
        txn = _optional_long(txn_first_offset if txn_first_offset >= 0 else None)
        line = (f"producerId: {producer_id} producerEpoch: {epoch} coordinatorEpoch: "
                f"{coordinator_epoch} currentTxnFirstOffset: {txn} lastTimestamp: "
                f"{timestamp} ")
        if last_offset >= 0:
            line += (f"firstSequence: {decrement_sequence(last_seq, offset_delta)} "
                     f"lastSequence: {last_seq} lastOffset: "
                     f"{last_offset} offsetDelta: {offset_delta} timestamp: {timestamp}")
        print(line, file=out)
    return True


# -- indexes --------------------------------------------------------------------------------

def _log_path(index_path, suffix):
    return index_path[:-len(suffix)] + LOG_SUFFIX


def _batch_at(fd, position, size):
    """BatchHeader of the batch at ``position`` of a .log, or None."""
    if not 0 <= position <= size - bd.HEADER_SIZE:
        return None
    data = os.pread(fd, bd.HEADER_SIZE, position)
    header = BatchHeader(data)
    return header if header.magic == bd.MAGIC else None


def dump_index(path, out, verify_only=False, sanity_only=False):
    """Print an offset index and check each entry against the .log; False on mismatch."""
    base = base_offset_from_name(path)
    index = OffsetIndex(path, base, _ANY_INDEX_SIZE, mutable=False)
    try:
        with open(_log_path(path, INDEX_SUFFIX), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if sanity_only:
                return _sanity(lambda: index.sanity_check(size), path, out)
            if not index.entries:
                print(f"{path} is empty.", file=out)
                return True
            mismatches = []
            for n in range(index.entries):
                relative, position = index.entry(n)
                offset = base + relative
                if relative == 0 and n > 0:
                    break  # zeros of a preallocated index (Kafka's rule)
                header = _batch_at(f.fileno(), position, size)
                found = header.last_offset if header is not None else -1
                if found != offset:
                    mismatches.append((offset, found))
                if not verify_only:
                    print(f"offset: {offset} position: {position}", file=out)
    finally:
        index.close()
    if mismatches:
        print(f"Mismatches in :{path}", file=out)
        for offset, found in mismatches:
            print(f"  Index offset: {offset}, log offset: {found}", file=out)
    return not mismatches


def dump_time_index(path, out, verify_only=False, sanity_only=False):
    """Print a time index and check each entry against the batch holding its offset."""
    base = base_offset_from_name(path)
    time_index = TimeIndex(path, base, _ANY_INDEX_SIZE, mutable=False)
    index_path = path[:-len(TIME_INDEX_SUFFIX)] + INDEX_SUFFIX
    offset_index = OffsetIndex(index_path, base, _ANY_INDEX_SIZE, mutable=False)
    mismatches, out_of_order, not_found = [], [], []
    try:
        if sanity_only:
            return _sanity(time_index.sanity_check, path, out)
        with open(_log_path(path, TIME_INDEX_SUFFIX), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            previous = bd.NO_TIMESTAMP
            for n in range(time_index.entries):
                timestamp, relative = time_index.entry(n)
                offset = base + relative
                if relative == 0 and n > 0:
                    break
                _, position = offset_index.lookup(offset)
                batch = None
                while position <= size - bd.HEADER_SIZE:
                    header = _batch_at(f.fileno(), position, size)
                    if header is None or header.size_in_bytes < bd.HEADER_SIZE:
                        break
                    if header.last_offset >= offset:
                        batch = header
                        break
                    position += header.size_in_bytes
                if batch is None or batch.last_offset != offset:
                    not_found.append((offset, -1 if batch is None else batch.last_offset))
                else:
                    if batch.max_timestamp != timestamp:
                        mismatches.append((timestamp, batch.max_timestamp))
                    if previous >= timestamp:
                        out_of_order.append((timestamp, previous))
                if not verify_only:
                    print(f"timestamp: {timestamp} offset: {offset}", file=out)
                previous = timestamp
    finally:
        time_index.close()
        offset_index.close()
    if mismatches:
        print(f"Found timestamp mismatch in :{path}", file=out)
        for indexed, logged in mismatches:
            print(f"  Index timestamp: {indexed}, log timestamp: {logged}", file=out)
    if out_of_order:
        print(f"Found out of order timestamp in :{path}", file=out)
        for indexed, previous in out_of_order:
            print(f"  Index timestamp: {indexed}, Previously indexed timestamp: {previous}",
                  file=out)
    if not_found:
        print("The following indexed offsets are not found in the log.", file=out)
        for indexed, found in not_found:
            print(f"Indexed offset: {indexed}, found log offset: {found}", file=out)
    return not (mismatches or out_of_order or not_found)


def dump_txn_index(path, out):
    """Print the aborted transactions of a .txnindex file; False if it does not parse."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        entries = parse_entries(data, base_offset_from_name(path), path)
    except CorruptIndexError as e:
        print(f"{path} failed sanity check: {e}", file=out)
        return False
    for txn in entries:
        print(f"version: 0 producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
              f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}",
              file=out)
    return True


def _sanity(check, path, out):
    try:
        check()
    except CorruptIndexError as e:
        print(f"{path} failed sanity check: {e}", file=out)
        return False
    print(f"{path} passed sanity check.", file=out)
    return True
