"""Kafka's record compression codecs, byte-compatible with Kafka and kafka-python.

When a batch is compressed, everything after recordCount (the records, back to back) is
replaced by one compressed blob; the header stays plain and its CRC covers the blob.

========  ==  =================================================================
codec     id  bytes written (what kafka-python's DefaultRecordBatchBuilder writes)
========  ==  =================================================================
none      0   the records as they are
gzip      1   one gzip member, level 9, mtime 0 (kafka-python stamps the current
              time there; 0 keeps a batch's bytes and CRC reproducible)
snappy    2   xerial framing, as Kafka's Java client writes it: 16-byte header
              (``\\x82SNAPPY\\x00``, version 1, compatible 1), then per 32 KiB of
              input a big-endian int32 length and a raw snappy block
lz4       3   one LZ4 frame (not the raw block format), independent blocks,
              compression level 0, content size stored (Kafka's reader skips it)
zstd      4   one zstd frame, level 3, content size stored
========  ==  =================================================================

Readers accept more than writers emit, as Kafka's do: any number of gzip members, lz4 or
zstd frames, zstd frames without a content size (what Kafka's Java client writes), and raw
snappy without xerial framing. Damaged input raises CorruptRecordError naming the codec.

Decompression is bounded: a small CRC-valid batch can declare a few records and inflate
without bound (a zip bomb), so ``decompress`` takes a hard output limit — from
``records_size_limit``: what the batch may legally hold — and stops at it, raising
CorruptRecordError naming the batch's offset, the codec and the limit. Each codec is read
through its bounded API: zlib's ``decompressobj`` with ``max_length`` (gzip), the declared
length every snappy block starts with (checked before the block is decompressed; the
library holds the block to it), ``LZ4FrameDecompressor`` with ``max_length``, and for
zstd the content size a frame declares (checked first; libzstd holds the frame to it) or,
when a frame declares none, a bounded ``stream_reader`` pass before the frame is
decompressed.

Pure functions; the zstd (de)compressor contexts are cached per thread, so any thread may
call them without a lock. The snappy, lz4 and zstd libraries are imported by the first
call that needs each (a local import is a dict lookup after that): a process that never
sees their codec does not carry them (perf/README.md, "Client RSS and GC").
"""
from __future__ import annotations

import gzip
import io
import struct
import threading
import zlib

from crc32c import crc32c

from segments.errors import CorruptRecordError, UnsupportedCompressionTypeError
from segments.record import batch_descriptor as d

#: Kafka's codec names (``compression.type``), by attribute id.
CODEC_NAMES = {
    d.CODEC_NONE: "none",
    d.CODEC_GZIP: "gzip",
    d.CODEC_SNAPPY: "snappy",
    d.CODEC_LZ4: "lz4",
    d.CODEC_ZSTD: "zstd",
}
_CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}

GZIP_LEVEL = 9
ZSTD_LEVEL = 3
#: Uncompressed bytes per xerial snappy block (xerial's and Kafka's default).
SNAPPY_BLOCK_SIZE = 32 * 1024
#: xerial header: magic ``\x82SNAPPY\x00``, int32 version, int32 minimum compatible version.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_BLOCK_LENGTH = struct.Struct(">i")

#: The most bytes the records of one batch may decompress to, whatever the batch declares:
#: twice Kafka's default buffer.memory (32 MiB), which bounds any producer batch unless a
#: producer was given more; a batch that inflates past it is treated as corrupt.
MAX_RECORDS_BYTES = 64 * 1024 * 1024


def codec_id(compression_type):
    """The attribute id (0-4) for a codec id or Kafka name; None means 'none'.

    Raises UnsupportedCompressionTypeError naming anything else.
    """
    if compression_type is None:
        return d.CODEC_NONE
    if type(compression_type) is int and compression_type in CODEC_NAMES:
        return compression_type
    if isinstance(compression_type, str) and compression_type.lower() in _CODEC_IDS:
        return _CODEC_IDS[compression_type.lower()]
    raise UnsupportedCompressionTypeError(
        f"compression type {compression_type!r} is not one of Kafka's: "
        + ", ".join(f"{codec} ({name!r})" for codec, name in CODEC_NAMES.items()))


# -- compress ---------------------------------------------------------------------------------

def _gzip_compress(data):
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=GZIP_LEVEL, mtime=0) as member:
        member.write(data)
    return out.getvalue()


def _snappy_compress(data):
    import cramjam
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), SNAPPY_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start:start + SNAPPY_BLOCK_SIZE])
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _lz4_compress(data):
    import lz4.frame
    return lz4.frame.compress(data, block_linked=False)


_per_thread = threading.local()


def _zstd_compressor():
    import zstandard
    compressor = getattr(_per_thread, "zstd_compressor", None)
    if compressor is None:
        compressor = _per_thread.zstd_compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return compressor


def _zstd_decompressor():
    import zstandard
    decompressor = getattr(_per_thread, "zstd_decompressor", None)
    if decompressor is None:
        decompressor = _per_thread.zstd_decompressor = zstandard.ZstdDecompressor()
    return decompressor


def _zstd_compress(data):
    return _zstd_compressor().compress(data)


_COMPRESS = {
    d.CODEC_GZIP: _gzip_compress,
    d.CODEC_SNAPPY: _snappy_compress,
    d.CODEC_LZ4: _lz4_compress,
    d.CODEC_ZSTD: _zstd_compress,
}


def compress(codec, data):
    """``data`` (bytes-like) compressed with codec id ``codec`` (1-4), as bytes."""
    try:
        return _COMPRESS[codec](data)
    except KeyError:
        raise UnsupportedCompressionTypeError(
            f"cannot compress with codec {codec!r}: expected one of {sorted(_COMPRESS)}") from None


# -- decompress -------------------------------------------------------------------------------

def records_size_limit(record_count, max_record_bytes=None, cap=None):
    """The most bytes the decompressed records of a batch may take: each of its
    ``record_count`` records at most ``max_record_bytes`` when the caller knows a bound
    (the broker: max.message.bytes, as a record larger than that cannot be produced
    uncompressed), and at most ``cap`` in all (``MAX_RECORDS_BYTES`` by default)."""
    cap = MAX_RECORDS_BYTES if cap is None else cap
    if max_record_bytes is None:
        return cap
    return min(cap, max(record_count, 1) * max_record_bytes)


#: Output asked of the lz4 decompressor per call (it allocates what it is allowed).
_LZ4_STEP = 256 * 1024


class _LimitExceeded(Exception):
    """Raised by a codec below when the output would pass the limit."""


def _gzip_decompress(data, limit):
    parts = []
    total = 0
    rest = bytes(data)
    while rest:
        member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        parts.append(member.decompress(rest, limit - total + 1))
        total += len(parts[-1])
        if total > limit:
            raise _LimitExceeded
        if not member.eof:
            raise CorruptRecordError("gzip: the data ends inside a member")
        rest = member.unused_data.lstrip(b"\x00")  # gzip.decompress skips zero padding
    return b"".join(parts)


def _snappy_raw(block, total, limit):
    """One raw snappy block, after checking the length it declares keeps ``total`` within
    ``limit`` (the library fails a block whose output differs from its declared length)."""
    import cramjam
    if total + cramjam.snappy.decompress_raw_len(block) > limit:
        raise _LimitExceeded
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data, limit):
    data = bytes(data)
    if not data.startswith(XERIAL_MAGIC) or len(data) <= len(XERIAL_HEADER):
        return _snappy_raw(data, 0, limit)
    parts = []
    total = 0
    pos = len(XERIAL_HEADER)
    end = len(data)
    while pos < end:
        if end - pos < _BLOCK_LENGTH.size:
            raise CorruptRecordError(
                f"snappy: xerial block length at {pos} needs 4 bytes, found {end - pos}")
        (length,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += _BLOCK_LENGTH.size
        if length < 0 or length > end - pos:
            raise CorruptRecordError(
                f"snappy: xerial block of {length} bytes at {pos}, {end - pos} bytes left")
        parts.append(_snappy_raw(data[pos:pos + length], total, limit))
        total += len(parts[-1])
        pos += length
    return b"".join(parts)


def _lz4_decompress(data, limit):
    import lz4.frame
    parts = []
    total = 0
    rest = bytes(data)
    while rest:
        frame = lz4.frame.LZ4FrameDecompressor()
        while True:
            # max_length is allocated up front: ask for a step at a time, not the limit.
            step = min(limit - total + 1, _LZ4_STEP)
            parts.append(frame.decompress(rest, max_length=step))
            rest = b""
            total += len(parts[-1])
            if total > limit:
                raise _LimitExceeded
            if frame.eof:
                break
            if frame.needs_input:
                raise CorruptRecordError("lz4: the data ends inside a frame")
        rest = frame.unused_data or b""
    return b"".join(parts)


def _zstd_decompress(data, limit):
    import zstandard
    decompressor = _zstd_decompressor()
    parts = []
    total = 0
    rest = bytes(data)
    while rest:
        declared = zstandard.frame_content_size(rest)  # -1: not declared
        if declared > limit - total:
            raise _LimitExceeded
        if declared < 0:
            _zstd_check_frame_size(decompressor, rest, limit - total)
        frame = decompressor.decompressobj()
        parts.append(frame.decompress(rest))
        total += len(parts[-1])
        if not frame.eof:
            raise CorruptRecordError("zstd: the data ends inside a frame")
        rest = frame.unused_data
    return b"".join(parts)


def _zstd_check_frame_size(decompressor, data, limit):
    """Raise _LimitExceeded if the first frame of ``data`` inflates past ``limit`` bytes
    (streamed, holding at most ``limit`` + 1 bytes)."""
    reader = decompressor.stream_reader(data, read_across_frames=False)
    size = 0
    while size <= limit:
        chunk = reader.read(limit + 1 - size)
        if not chunk:
            return
        size += len(chunk)
    raise _LimitExceeded


_DECOMPRESS = {
    d.CODEC_GZIP: _gzip_decompress,
    d.CODEC_SNAPPY: _snappy_decompress,
    d.CODEC_LZ4: _lz4_decompress,
    d.CODEC_ZSTD: _zstd_decompress,
}
#: What the libraries raise on damaged input.
def _decompression_errors():
    """What the codec libraries raise for damaged input (evaluated only when an exception
    reaches ``decompress``'s last clause: the libraries are loaded by then)."""
    import cramjam
    import zstandard
    return (OSError, EOFError, zlib.error, RuntimeError, ValueError,
            cramjam.DecompressionError, zstandard.ZstdError)


def decompress(codec, data, limit, base_offset):
    """``data`` — the records of the batch at ``base_offset`` — decompressed with codec id
    ``codec`` (1-4), as bytes of at most ``limit`` (``records_size_limit``).

    Raises CorruptRecordError naming the batch's offset and the codec when the data does
    not decompress or would inflate past ``limit`` (then naming the limit too; at most
    about ``limit`` bytes are ever held), and UnsupportedCompressionTypeError for an
    unknown codec id.
    """
    try:
        function = _DECOMPRESS[codec]
    except KeyError:
        raise UnsupportedCompressionTypeError(
            f"batch at offset {base_offset} uses compression codec {codec}: expected one of "
            f"{sorted(_DECOMPRESS)}") from None
    try:
        return function(data, limit)
    except _LimitExceeded:
        raise CorruptRecordError(
            f"batch at offset {base_offset}: {CODEC_NAMES[codec]}: the {len(data)} bytes of "
            f"compressed records inflate past the limit of {limit} bytes") from None
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"batch at offset {base_offset}: {exc.args[0]}") from None
    except _decompression_errors() as exc:
        raise CorruptRecordError(
            f"batch at offset {base_offset}: {CODEC_NAMES[codec]}: compressed records do not "
            f"decompress: {exc}") from exc


# -- recompress (a topic's compression.type) --------------------------------------------------

def recompress_batch(header, codec, max_record_bytes=None):
    """The batch whose ``header`` (a ``BatchHeader`` over a whole, validated batch) is
    given, with its records stored in codec id ``codec`` instead, as a new bytearray: the
    records themselves (their deltas, keys, values, headers) and every header field but
    attributes' codec bits, batchLength and the CRC stay as they are — what a Kafka broker
    stores for a topic whose compression.type differs from the producer's codec."""
    start = header.position + d.RECORDS_OFFSET
    end = header.position + header.size_in_bytes
    with memoryview(header.buf) as view:
        records = bytes(view[start:end])
        out = bytearray(view[header.position:start])
    source = header.compression_type
    if source != d.CODEC_NONE:
        records = decompress(source, records,
                             records_size_limit(header.record_count, max_record_bytes),
                             header.base_offset)
    out += records if codec == d.CODEC_NONE else compress(codec, records)
    attributes = (header.attributes & ~d.COMPRESSION_CODEC_MASK) | codec
    d.INT32.pack_into(out, d.BATCH_LENGTH_OFFSET, len(out) - d.LOG_OVERHEAD)
    d.INT16.pack_into(out, d.ATTRIBUTES_OFFSET, attributes)
    d.UINT32.pack_into(out, d.CRC_OFFSET, crc32c(memoryview(out)[d.ATTRIBUTES_OFFSET:]))
    return out
