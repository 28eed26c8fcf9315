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

Readers accept more than writers emit, as Kafka's do: any number of gzip members or zstd
frames, zstd frames without a content size (what Kafka's Java client writes), and raw
snappy without xerial framing. Damaged input raises CorruptRecordError naming the codec.

Pure functions; the zstd (de)compressor contexts are cached per thread, so any thread may
call them without a lock.
"""
from __future__ import annotations

import gzip
import io
import struct
import threading
import zlib

import cramjam
import lz4.frame
import zstandard

from segments import batch_descriptor as d
from segments.errors import CorruptRecordError, UnsupportedCompressionTypeError

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
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), SNAPPY_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start:start + SNAPPY_BLOCK_SIZE])
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _lz4_compress(data):
    return lz4.frame.compress(data, block_linked=False)


_per_thread = threading.local()


def _zstd_compressor():
    compressor = getattr(_per_thread, "zstd_compressor", None)
    if compressor is None:
        compressor = _per_thread.zstd_compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return compressor


def _zstd_decompressor():
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

def _snappy_decompress(data):
    data = bytes(data)
    if not data.startswith(XERIAL_MAGIC) or len(data) <= len(XERIAL_HEADER):
        return bytes(cramjam.snappy.decompress_raw(data))
    parts = []
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
        parts.append(cramjam.snappy.decompress_raw(data[pos:pos + length]))
        pos += length
    return b"".join(parts)


def _zstd_decompress(data):
    decompressor = _zstd_decompressor()
    parts = []
    rest = bytes(data)
    while rest:
        frame = decompressor.decompressobj()
        parts.append(frame.decompress(rest))
        if not frame.eof:
            raise CorruptRecordError("zstd: the data ends inside a frame")
        rest = frame.unused_data
    return b"".join(parts)


_DECOMPRESS = {
    d.CODEC_GZIP: gzip.decompress,
    d.CODEC_SNAPPY: _snappy_decompress,
    d.CODEC_LZ4: lz4.frame.decompress,
    d.CODEC_ZSTD: _zstd_decompress,
}
#: What the libraries raise on damaged input.
_DECOMPRESSION_ERRORS = (
    OSError, EOFError, zlib.error, RuntimeError, ValueError, cramjam.DecompressionError,
    zstandard.ZstdError)


def decompress(codec, data):
    """``data`` decompressed with codec id ``codec`` (1-4), as bytes.

    Raises CorruptRecordError (naming the codec) when the data does not decompress, and
    UnsupportedCompressionTypeError for an unknown codec id.
    """
    try:
        function = _DECOMPRESS[codec]
    except KeyError:
        raise UnsupportedCompressionTypeError(
            f"batch uses compression codec {codec}: expected one of "
            f"{sorted(_DECOMPRESS)}") from None
    try:
        return function(data)
    except CorruptRecordError:
        raise
    except _DECOMPRESSION_ERRORS as exc:
        raise CorruptRecordError(
            f"{CODEC_NAMES[codec]}: compressed records do not decompress: {exc}") from exc
