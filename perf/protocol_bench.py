"""Protocol codec on the hot paths: a Produce v8 request with one 16 KB batch, a Fetch v11
response with 1 MB of record bytes, a consumer's one-partition Fetch v11 request. Ours —
``cluster.protocol.frames`` for the Produce request, the broker's
``cluster.protocol.fetch_response.FetchResponseFrame`` for the response, the consumer's kept
``cluster.protocol.fetch_frame.FetchFrame`` (patched and copied into a ring slot per fetch)
for the Fetch request — against kio used the straightforward way (entity writer into a
BytesIO, entity reader), in one run; the Fetch request also as kio objects encoded by
``frames.encode_request`` (what the consumer did per fetch before the kept frame).

    .venv/bin/python -m perf.protocol_bench [--repeat 7]

Prints the median over repeats of µs per call, and ours/kio ratios. "build" is constructing
the kio request object, which both paths need; a memcpy of the record bytes is the floor
for any codec that copies them once. Our decode is our header parse plus kio's native body
reader (records come back as bytes, copied once).
"""
from __future__ import annotations

import argparse
import datetime
import functools
import io
import os
import statistics
import timeit

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as KioRequestHeader
from kio.schema.response_header.v0.header import ResponseHeader as KioResponseHeader
from kio.serial import entity_reader, entity_writer

from cluster.protocol import frames as protocol
from cluster.protocol.fetch_frame import FetchFrame
from cluster.protocol.fetch_response import FetchResponseFrame, PartitionData
from cluster.protocol.frame_descriptor import INT32
from cluster.protocol.frames import ApiKey

BATCH_BYTES = 16 * 1024
FETCH_BYTES = 1024 * 1024
CLIENT_ID = "producer-1"


# -- kio, the straightforward way: header and body through entity writers / readers ----------

def kio_encode(header_cls, header, body):
    out = io.BytesIO()
    out.write(bytes(4))
    entity_writer(header_cls)(out, header)
    entity_writer(type(body))(out, body)
    frame = out.getbuffer()
    INT32.pack_into(frame, 0, len(frame) - 4)
    del frame
    return out.getvalue()


def kio_decode(header_cls, body_cls, frame):
    header, header_size = entity_reader(header_cls)(frame, 4)
    body, _ = entity_reader(body_cls)(frame, 4 + header_size)
    return header, body


# -- workloads ---------------------------------------------------------------------------------

PRODUCE_V8 = protocol.request_module(ApiKey.PRODUCE, 8)
FETCH_V11 = protocol.response_module(ApiKey.FETCH, 11)
FETCH_REQUEST_V11 = protocol.request_module(ApiKey.FETCH, 11)
CONSUMER_ID = "consumer-1"
#: The consumer's fixed Fetch fields (its defaults: fetch_max_wait_ms, fetch_min_bytes, ...).
FETCH_FIELDS = dict(max_wait_ms=500, min_bytes=1, max_bytes=52_428_800, isolation_level=0,
                    partition_max_bytes=1_048_576)


# The request's objects with their fixed fields bound once, as the consumer's fetcher made
# them per fetch before the kept frame.
_make_request = functools.partial(
    FETCH_REQUEST_V11.FetchRequest, replica_id=-1,
    max_wait=datetime.timedelta(milliseconds=FETCH_FIELDS["max_wait_ms"]),
    min_bytes=FETCH_FIELDS["min_bytes"], max_bytes=FETCH_FIELDS["max_bytes"],
    isolation_level=FETCH_FIELDS["isolation_level"], session_id=0, session_epoch=-1,
    forgotten_topics_data=(), rack_id="")
_make_partition = functools.partial(
    FETCH_REQUEST_V11.FetchPartition, log_start_offset=-1,
    partition_max_bytes=FETCH_FIELDS["partition_max_bytes"])


def fetch_request(offset):
    """A consumer's one-partition Fetch v11 request as kio objects."""
    return _make_request(topics=(FETCH_REQUEST_V11.FetchTopic(topic="app-logs", partitions=(
        _make_partition(partition=3, current_leader_epoch=0, fetch_offset=offset),)),))


def produce_request(batch):
    m = PRODUCE_V8
    return m.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(milliseconds=30000),
        topic_data=(m.TopicProduceData(name="app-logs", partition_data=(
            m.PartitionProduceData(index=3, records=batch),)),))


def fetch_response(records):
    m = FETCH_V11
    return m.FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
        responses=(m.FetchableTopicResponse(topic="app-logs", partitions=(m.PartitionData(
            partition_index=3, error_code=ErrorCode.none, high_watermark=1_000_000,
            last_stable_offset=1_000_000, log_start_offset=0, aborted_transactions=None,
            preferred_read_replica=-1, records=records),)),))


class _Slice:
    """The two things ``FetchResponseFrame`` asks of a log slice, over bytes in memory."""

    def __init__(self, data):
        self.data = data
        self.size = len(data)

    def read_into(self, view):
        view[:] = self.data


def fetch_frame(records):
    """The broker's Fetch v11 frame for the same partition as ``fetch_response``."""
    return FetchResponseFrame(11, 42, [("app-logs", [PartitionData(
        3, ErrorCode.none, high_watermark=1_000_000, last_stable_offset=1_000_000,
        log_start_offset=0, records=_Slice(records))])])


def median_us(fn, number, repeat):
    times = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(times) / number * 1e6


def bench(repeat):
    batch = os.urandom(BATCH_BYTES)
    segment = os.urandom(FETCH_BYTES)
    request = produce_request(batch)
    response = fetch_response(memoryview(segment))
    produce_header = KioRequestHeader(request_api_key=ApiKey.PRODUCE, request_api_version=8,
                                      correlation_id=42, client_id=CLIENT_ID)
    fetch_header = KioResponseHeader(correlation_id=42)
    request_cls, response_cls = type(request), type(response)

    ours_request = protocol.encode_request(request, 42, CLIENT_ID)
    kio_request = kio_encode(KioRequestHeader, produce_header, request)
    assert bytes(ours_request) == kio_request
    frame = fetch_frame(memoryview(segment))
    ours_response = frame.tobytes()
    kio_response = kio_encode(KioResponseHeader, fetch_header, response)
    assert bytes(ours_response) == kio_response

    kept = FetchFrame(11, CONSUMER_ID, **FETCH_FIELDS)
    partitions = {("app-logs", 3): (1234, 0, -1)}
    fetch_header = KioRequestHeader(request_api_key=ApiKey.FETCH, request_api_version=11,
                                    correlation_id=42, client_id=CONSUMER_ID)
    fetch_slot = memoryview(bytearray(256))
    FetchFrame.write(kept.frame(0, partitions), fetch_slot, 42)
    kio_fetch = kio_encode(KioRequestHeader, fetch_header, fetch_request(1234))
    assert bytes(fetch_slot[:len(kio_fetch)]) == kio_fetch
    assert bytes(protocol.encode_request(fetch_request(1234), 42, CONSUMER_ID)) == kio_fetch

    request_slot = bytearray(len(ours_request) + 64)
    response_view = memoryview(bytearray(len(ours_response) + 64))
    floor_16k = memoryview(bytearray(BATCH_BYTES))
    floor_1m = memoryview(bytearray(FETCH_BYTES))

    def copy_16k():
        floor_16k[:] = batch

    def copy_1m():
        floor_1m[:] = segment

    n_small, n_large = 2000, 100
    rows = [
        ("produce v8, 16 KB", "build request object", median_us(
            lambda: produce_request(batch), n_small, repeat), None),
        ("produce v8, 16 KB", "encode -> bytes", median_us(
            lambda: protocol.encode_request(request, 42, CLIENT_ID), n_small, repeat),
         median_us(lambda: kio_encode(KioRequestHeader, produce_header, request),
                   n_small, repeat)),
        ("produce v8, 16 KB", "size + encode into slot", median_us(
            lambda: (protocol.request_frame_size(request, CLIENT_ID),
                     protocol.encode_request_into(request_slot, 0, request, 42, CLIENT_ID)),
            n_small, repeat), None),
        ("produce v8, 16 KB", "decode", median_us(
            lambda: protocol.decode_request(ours_request), n_small, repeat),
         median_us(lambda: kio_decode(KioRequestHeader, request_cls, kio_request),
                   n_small, repeat)),
        ("produce v8, 16 KB", "memcpy 16 KB (floor)", median_us(copy_16k, n_small, repeat),
         None),
        ("fetch v11, 1 MB", "encode -> bytes", median_us(
            lambda: fetch_frame(segment).tobytes(), n_large, repeat),
         median_us(lambda: kio_encode(KioResponseHeader, fetch_header, response),
                   n_large, repeat)),
        ("fetch v11, 1 MB", "size + encode into slot", median_us(
            lambda: fetch_frame(segment).write_into(response_view), n_large, repeat), None),
        ("fetch v11, 1 MB", "decode", median_us(
            lambda: protocol.decode_response(ours_response, ApiKey.FETCH, 11),
            n_large, repeat),
         median_us(lambda: kio_decode(KioResponseHeader, response_cls, kio_response),
                   n_large, repeat)),
        ("fetch v11, 1 MB", "memcpy 1 MB (floor)", median_us(copy_1m, n_large, repeat), None),
        ("fetch v11 request", "kept frame into slot", median_us(
            lambda: FetchFrame.write(kept.frame(0, partitions), fetch_slot, 42),
            n_small, repeat),
         median_us(lambda: kio_encode(KioRequestHeader, fetch_header, fetch_request(1234)),
                   n_small, repeat)),
        ("fetch v11 request", "build + encode -> bytes", median_us(
            lambda: protocol.encode_request(fetch_request(1234), 42, CONSUMER_ID),
            n_small, repeat), None),
    ]
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="repeats; the median is shown")
    args = parser.parse_args(argv)
    rows = bench(args.repeat)
    print(f"median of {args.repeat} repeats, µs per call "
          f"(identical frame bytes from both codecs checked first)")
    print(f"{'workload':<20}{'operation':<26}{'ringlog':>10}{'kio':>10}{'ringlog/kio':>13}")
    for workload, operation, ours, kio in rows:
        kio_text = f"{kio:10.2f}" if kio is not None else f"{'':>10}"
        ratio = f"{ours / kio:13.2f}" if kio is not None else ""
        print(f"{workload:<20}{operation:<26}{ours:10.2f}{kio_text}{ratio}")


if __name__ == "__main__":
    main()
