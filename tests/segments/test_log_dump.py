"""The dump-log tool: Kafka-style lines for .log, .index, .timeindex and .snapshot files."""
from __future__ import annotations

import argparse
import io

from segments import dump
from segments.cleaner import clean
from segments.producer_state import ORIGIN_COORDINATOR
from segments.record import batch_descriptor as d
from segments.record.control_record import ABORT, COMMIT
from tests.segments.helpers import end_txn, idempotent, make_batch, marker, open_log, txn_batch
from tests.support.clock import T0, FakeClock

STEM = "00000000000000000000"


def run(*argv):
    parser = dump.add_arguments(argparse.ArgumentParser())
    out = io.StringIO()
    code = dump.run(parser.parse_args(list(argv)), out)
    return code, out.getvalue().splitlines()


def build(path):
    log = open_log(path, **{"index.interval.bytes": 100})
    log.append(make_batch([(T0, b"k0", b"hello"), (T0 + 5, None, b"world")]), leader_epoch=3)
    for n in range(6):
        log.append(make_batch([(T0 + 10 + n, b"key-%d" % n, b"v" * 60)]))
    log.append(make_batch([(T0 + 100, b"t", None)], compression=1))
    log.close()
    return path


def test_dump_log_batch_lines(tmp_path):
    path = build(tmp_path / "t-0")
    code, lines = run("--files", str(path / f"{STEM}.log"))
    assert code == 0
    assert lines[0] == f"Dumping {path / STEM}.log"
    assert lines[1] == "Starting offset: 0"
    size = len(make_batch([(T0, b"k0", b"hello"), (T0 + 5, None, b"world")]))
    assert lines[2] == (
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 3 isTransactional: false "
        f"isControl: false deleteHorizonMs: OptionalLong.empty position: 0 "
        f"CreateTime: {T0 + 5} size: {size} magic: 2 "
        "compresscodec: none crcValid: true")
    assert len(lines) == 2 + 8
    assert lines[-1].startswith("baseOffset: 8 lastOffset: 8 count: 1 ")
    assert "compresscodec: gzip crcValid: true" in lines[-1]


def test_dump_log_with_data(tmp_path):
    path = build(tmp_path / "t-0")
    code, lines = run("--files", str(path / f"{STEM}.log"), "--print-data-log")
    assert code == 0
    records = [line for line in lines if line.startswith("|")]
    assert records[0] == (f"| offset: 0 CreateTime: {T0} keySize: 2 valueSize: 5 "
                          "sequence: -1 headerKeys: [] key: k0 payload: hello")
    assert records[1] == (f"| offset: 1 CreateTime: {T0 + 5} keySize: -1 valueSize: 5 "
                          "sequence: -1 headerKeys: [] payload: world")
    assert records[-1] == (f"| offset: 8 CreateTime: {T0 + 100} keySize: 1 valueSize: -1 "
                           "sequence: -1 headerKeys: [] key: t")
    assert len(records) == 9
    code, lines = run("--files", str(path / f"{STEM}.log"), "--deep-iteration")
    assert [line for line in lines if line.startswith("|")][0].endswith("headerKeys: []")


def test_dump_reports_a_bad_crc_and_trailing_bytes(tmp_path):
    path = build(tmp_path / "t-0")
    log_file = path / f"{STEM}.log"
    data = bytearray(log_file.read_bytes())
    data[-1] ^= 0x10
    log_file.write_bytes(bytes(data) + b"\x00" * 7)
    code, lines = run("--files", str(log_file))
    assert code == 1
    assert lines[-2].endswith("crcValid: false")
    assert lines[-1] == f"Found 7 invalid bytes at the end of {STEM}.log"


def test_dump_indexes(tmp_path):
    path = build(tmp_path / "t-0")
    index = path / f"{STEM}.index"
    code, lines = run("--files", f"{index},{path / STEM}.timeindex")
    assert code == 0
    raw = index.read_bytes()
    expected = []
    for n in range(0, len(raw), 8):
        relative, position = d.INT32.unpack_from(raw, n)[0], d.INT32.unpack_from(raw, n + 4)[0]
        expected.append(f"offset: {relative} position: {position}")
    assert expected and lines[1:1 + len(expected)] == expected
    time_lines = lines[lines.index(f"Dumping {path / STEM}.timeindex") + 1:]
    assert time_lines and all(line.startswith("timestamp: ") for line in time_lines)
    assert time_lines[-1] == f"timestamp: {T0 + 100} offset: 8"


def test_verify_index_only_reports_mismatches(tmp_path):
    path = build(tmp_path / "t-0")
    index = path / f"{STEM}.index"
    raw = bytearray(index.read_bytes())
    relative = d.INT32.unpack_from(raw, 0)[0]
    d.INT32.pack_into(raw, 0, relative + 1)
    index.write_bytes(bytes(raw))
    code, lines = run("--files", str(index), "--verify-index-only")
    assert code == 1
    assert lines == [f"Dumping {index}", f"Mismatches in :{index}",
                     f"  Index offset: {relative + 1}, log offset: {relative}"]


def test_index_sanity_check_and_unknown_files(tmp_path):
    path = build(tmp_path / "t-0")
    index = path / f"{STEM}.index"
    code, lines = run("--files", str(index), "--index-sanity-check")
    assert (code, lines[-1]) == (0, f"{index} passed sanity check.")
    index.write_bytes(index.read_bytes() + b"\x01")
    code, lines = run("--files", str(index), "--index-sanity-check")
    assert code == 1 and "failed sanity check" in lines[-1]
    other = path / "notes.txt"
    other.write_text("x")
    code, lines = run("--files", str(other))
    assert code == 1 and lines[-1] == f"Ignoring unknown file {other}"
    code, lines = run("--files", str(path / "00000000000000000999.log"))
    assert code == 2 and lines[-1].startswith("Could not dump")


def test_sequences_follow_the_batch(tmp_path):
    from segments.record.records import RecordBatchBuilder
    builder = RecordBatchBuilder(0, 1 << 20, producer_id=42, producer_epoch=1,
                                 base_sequence=10)
    builder.append(T0, b"a", b"1")
    builder.append(T0, b"b", b"2")
    log = open_log(tmp_path / "t-0")
    log.append(bytes(builder.build()))
    log.close()
    code, lines = run("--files", str(tmp_path / "t-0" / f"{STEM}.log"), "--deep-iteration")
    assert "baseSequence: 10 lastSequence: 11 producerId: 42 producerEpoch: 1" in lines[2]
    assert [line.split("sequence: ")[1].split()[0] for line in lines[3:]] == ["10", "11"]


def test_markers_and_the_txn_index(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(txn_batch(5, 2, producer_epoch=1))
    end_txn(log, COMMIT, 5, producer_epoch=1, coordinator_epoch=17, timestamp=T0 + 9)
    log.append(txn_batch(6, 1))
    end_txn(log, ABORT, 6, coordinator_epoch=3, timestamp=T0 + 10)
    log.close()
    code, lines = run("--deep-iteration", "--files", str(tmp_path / "t-0" / f"{STEM}.log"))
    assert code == 0
    assert "isTransactional: true isControl: true" in lines[5]
    assert lines[6] == (f"| offset: 2 CreateTime: {T0 + 9} keySize: 4 valueSize: 6 "
                        "sequence: -1 headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 17")
    assert lines[-1].endswith("endTxnMarker: ABORT coordinatorEpoch: 3")
    # --print-data-log prints no key or payload for a marker
    _, data_lines = run("--print-data-log", "--files",
                        str(tmp_path / "t-0" / f"{STEM}.log"))
    assert data_lines[6] == lines[6]
    index = str(tmp_path / "t-0" / f"{STEM}.txnindex")
    code, lines = run("--files", index)
    assert code == 0
    assert lines == [f"Dumping {index}", "version: 0 producerId: 6 firstOffset: 3 "
                     "lastOffset: 4 lastStableOffset: 5"]
    with open(index, "ab") as f:
        f.write(b"\x00")
    code, lines = run("--files", index)
    assert code == 1 and "failed sanity check" in lines[1] and "whole number" in lines[1]


def build_transactional(path):
    """An idempotent batch, a transaction of producer 9 and its COMMIT marker."""
    log = open_log(path)
    log.append(idempotent(7, 2, 5, 2, timestamp=T0))
    log.append(idempotent(9, 0, 0, 1, transactional=True, timestamp=T0 + 3))
    log.append(marker(9, 0, commit=True, coordinator_epoch=4, timestamp=T0 + 4),
               origin=ORIGIN_COORDINATOR)
    log.close()
    return path


def test_a_marker_stamped_by_compaction_shows_its_delete_horizon(tmp_path):
    clock = FakeClock(T0 + 100)
    log = open_log(tmp_path / "t-0", clock, **{"cleanup.policy": "compact",
                                                "delete.retention.ms": 1000})
    log.append(idempotent(5, 0, 0, transactional=True))  # key k0 at 0
    end_txn(log, COMMIT, 5)
    log.append(idempotent(5, 0, 1, transactional=True))  # k0 again at 2
    end_txn(log, COMMIT, 5)
    log.roll()
    clean(log, force=True)  # the first transaction's batch goes; its marker stays
    clean(log, force=True)  # nothing of it left: the marker gets its horizon
    log.close()
    code, lines = run("--files", str(tmp_path / "t-0" / f"{STEM}.log"))
    assert code == 0
    markers = [line for line in lines if "isControl: true" in line]
    assert [line.split(" position:")[0].split("isControl: true ")[1] for line in markers] \
        == [f"deleteHorizonMs: OptionalLong[{T0 + 1100}]", "deleteHorizonMs: OptionalLong.empty"]


def test_dump_log_shows_producer_fields_and_transaction_markers(tmp_path):
    path = build_transactional(tmp_path / "t-0")
    code, lines = run("--files", str(path / f"{STEM}.log"), "--print-data-log")
    assert code == 0
    batches = [line for line in lines if line.startswith("baseOffset")]
    assert batches[0].startswith(
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 5 lastSequence: 6 "
        "producerId: 7 producerEpoch: 2 partitionLeaderEpoch: -1 isTransactional: false "
        "isControl: false ")
    assert "producerId: 9 producerEpoch: 0 partitionLeaderEpoch: -1 isTransactional: true " \
        "isControl: false " in batches[1]
    assert "baseSequence: -1 lastSequence: -1 producerId: 9 producerEpoch: 0 " \
        "partitionLeaderEpoch: -1 isTransactional: true isControl: true " in batches[2]
    records = [line for line in lines if line.startswith("|")]
    assert records[1] == (f"| offset: 1 CreateTime: {T0 + 1} keySize: 2 valueSize: 5 "
                          "sequence: 6 headerKeys: [] key: k1 payload: value")
    assert records[-1] == (f"| offset: 3 CreateTime: {T0 + 4} keySize: 4 valueSize: 6 "
                           "sequence: -1 headerKeys: [] endTxnMarker: COMMIT "
                           "coordinatorEpoch: 4")


def test_dump_producer_snapshot(tmp_path):
    path = build_transactional(tmp_path / "t-0")
    idem = tmp_path / "i-0"
    log = open_log(idem)
    log.append(idempotent(7, 2, 5, 2, timestamp=T0))
    log.append(idempotent(9, 0, 0, 1, transactional=True, timestamp=T0 + 3))
    log.close()
    code, lines = run("--files", str(idem / "00000000000000000003.snapshot"))
    assert code == 0
    assert lines[1:] == [
        f"producerId: 7 producerEpoch: 2 coordinatorEpoch: -1 currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {T0 + 1} firstSequence: 5 lastSequence: 6 "
        f"lastOffset: 1 offsetDelta: 1 timestamp: {T0 + 1}",
        f"producerId: 9 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        f"OptionalLong[2] lastTimestamp: {T0 + 3} firstSequence: 0 lastSequence: 0 "
        f"lastOffset: 2 offsetDelta: 0 timestamp: {T0 + 3}"]
    # after the marker: the transaction is closed, the marker's time is the last timestamp
    code, lines = run("--files", str(path / "00000000000000000004.snapshot"))
    assert lines[2] == (
        f"producerId: 9 producerEpoch: 0 coordinatorEpoch: 4 currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {T0 + 4} firstSequence: 0 lastSequence: 0 "
        f"lastOffset: 2 offsetDelta: 0 timestamp: {T0 + 4}")
    snapshot = idem / "00000000000000000003.snapshot"
    data = bytearray(snapshot.read_bytes())
    data[-1] ^= 0xFF
    snapshot.write_bytes(data)
    code, lines = run("--files", str(snapshot))
    assert code == 1
    assert "corrupt" in lines[1] and "CRC" in lines[1]
