"""TFRecord files, byte-compatible with TensorFlow, without it.

A TFRecord file is a sequence of records, each framed as TensorFlow frames it::

    uint64 length (LE) | uint32 masked crc32c(length bytes) | data | uint32 masked crc32c(data)

The writer hands whole batches of records to the kernel with one ``writev`` (no copy of the
payloads in Python); the reader pulls large blocks and slices records out of them. Gzip and zlib
compressed files are the streams TensorFlow writes with ``compression_type='GZIP'`` / ``'ZLIB'``.
What the records hold (tf.train.Example, TensorBoard events) is encoded elsewhere in this package.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterator
from typing import IO, Any, BinaryIO, Union

import crc32c as _crc32c

from hopsml.errors import HopsmlError, SettingsError

__all__ = [
    "CorruptRecordError",
    "TFRecordWriter",
    "TruncatedRecordError",
    "masked_crc32c",
    "read_records",
    "shard_name",
]

logger = logging.getLogger(__name__)

PathOrFile = Union[str, "os.PathLike[str]", BinaryIO, IO[bytes]]

_HEADER = struct.Struct("<QI")   # length, masked crc of the length bytes
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF

_COMPRESSIONS = {None: None, "": None, "none": None, "gzip": "gzip", "zlib": "zlib"}
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}

_SMALL_RECORD = 64 * 1024        # smaller records are copied into a staging block
_WRITE_BUFFER = 4 * 1024 * 1024  # bytes gathered before one writev
_MAX_IOV = 512                   # well under the IOV_MAX of every Linux (1024)
_READ_BLOCK = 1024 * 1024        # bytes pulled from the file per read


class CorruptRecordError(HopsmlError, ValueError):
    """A TFRecord file fails its checksums; the message names the file and byte offset."""

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


class TruncatedRecordError(CorruptRecordError):
    """A TFRecord file ends inside a record, usually because its writer did not finish."""


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """Return TensorFlow's masked CRC-32C of ``data`` (rotated right by 15 bits, plus a delta)."""
    crc = _crc32c.crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & _U32) + _MASK_DELTA) & _U32


def _masked(crcs: Any) -> Any:
    """:func:`masked_crc32c`'s mask of many CRCs at once (a uint32 numpy array)."""
    import numpy as np

    crcs = crcs.astype(np.uint32)
    return (((crcs >> np.uint32(15)) | (crcs << np.uint32(17))) + np.uint32(_MASK_DELTA)).astype("<u4")


def shard_name(index: int, count: int, compression: str | None = None) -> str:
    """Return the file name of shard ``index`` of ``count``, e.g. ``part-00003-of-00010.tfrecord``.

    >>> shard_name(3, 10)
    'part-00003-of-00010.tfrecord'
    >>> shard_name(0, 2, "gzip")
    'part-00000-of-00002.tfrecord.gz'
    """
    if count < 1 or not 0 <= index < count:
        raise SettingsError(f"shard index {index} is outside 0..{count - 1}; "
                            "pass 0 <= index < count and count >= 1")
    suffix = {None: "", "gzip": ".gz", "zlib": ".zz"}[_compression(compression)]
    return f"part-{index:05d}-of-{count:05d}.tfrecord{suffix}"


def _compression(compression: str | None) -> str | None:
    key = compression.lower() if isinstance(compression, str) else compression
    if key not in _COMPRESSIONS:
        raise SettingsError(f"compression={compression!r} is not supported; "
                            "use None, 'gzip' or 'zlib'")
    return _COMPRESSIONS[key]


def _describe(path_or_file: object) -> str:
    if isinstance(path_or_file, (str, os.PathLike)):
        return os.fspath(path_or_file)
    return str(getattr(path_or_file, "name", None) or repr(path_or_file))


class TFRecordWriter:
    """Write records to a TFRecord file (a local path or an open binary stream).

    Records are gathered into batches of about 4 MiB and handed to the file together. A stream
    passed in stays open on :meth:`close`; a path is opened here and closed on :meth:`close`.

    >>> import io
    >>> buffer = io.BytesIO()
    >>> with TFRecordWriter(buffer) as writer:
    ...     writer.write(b"hello")
    >>> list(read_records(io.BytesIO(buffer.getvalue())))
    [b'hello']
    """

    def __init__(self, path_or_file: PathOrFile, compression: str | None = None, *,
                 compression_level: int = 6) -> None:
        self._compression = _compression(compression)
        self.name = _describe(path_or_file)
        if isinstance(path_or_file, (str, os.PathLike)):
            self._file: Any = open(path_or_file, "wb", buffering=0)
            self._owns_file = True
        else:
            self._file = path_or_file
            self._owns_file = False
        # Only a file opened here is written through its descriptor: a stream passed in may
        # hold buffered bytes of its own that must come first.
        self._fd: int | None = (self._file.fileno()
                                if self._owns_file and hasattr(os, "writev") else None)
        self._compressor = (zlib.compressobj(compression_level, zlib.DEFLATED,
                                             _WBITS[self._compression])
                            if self._compression else None)
        self._pending: list[Any] = []   # bytes-like pieces, in file order
        self._pending_bytes = 0
        self._staging = bytearray()     # small records, copied together
        self._closed = False
        self.records_written = 0
        self.bytes_written = 0          # uncompressed

    def write(self, record: bytes | bytearray | memoryview) -> None:
        """Append one record; a bytes object is kept by reference until the next flush."""
        if self._closed:
            raise ValueError(f"TFRecordWriter for {self.name} is closed")
        if type(record) is not bytes:
            record = bytes(record)  # the caller may change its buffer after we return
        length = len(record)
        length_bytes = _LENGTH.pack(length)
        header = _HEADER.pack(length, masked_crc32c(length_bytes))
        footer = _CRC.pack(masked_crc32c(record))
        if length < _SMALL_RECORD:
            self._staging += header
            self._staging += record
            self._staging += footer
            if len(self._staging) >= _SMALL_RECORD:
                self._stage_out()
        else:
            self._stage_out()
            self._pending += (header, record, footer)
        self._pending_bytes += length + 16
        self.records_written += 1
        self.bytes_written += length + 16
        if self._pending_bytes >= _WRITE_BUFFER or len(self._pending) >= _MAX_IOV:
            self._flush_pending()

    def write_batch(self, data: Any, offsets: Any) -> None:
        """Append the records ``data[offsets[i]:offsets[i + 1]]`` (a uint8 numpy array and its
        ``n + 1`` offsets, as :func:`hopsml.formats.example.encode_examples` gives them): the same
        bytes as ``write`` of each, framed with numpy instead of a Python call per record."""
        import numpy as np

        if self._closed:
            raise ValueError(f"TFRecordWriter for {self.name} is closed")
        offsets = np.asarray(offsets, dtype=np.int64)
        count = offsets.size - 1
        if count <= 0:
            return
        data = np.ascontiguousarray(np.asarray(data, dtype=np.uint8)[offsets[0]:offsets[-1]])
        offsets = offsets - offsets[0]
        lengths = np.diff(offsets)
        view = memoryview(data)
        checksum = _crc32c.crc32c
        pairs = zip(offsets[:-1].tolist(), offsets[1:].tolist())
        data_crcs = _masked(np.fromiter((checksum(view[start:end]) for start, end in pairs), dtype=np.uint32,
                                        count=count))
        distinct, which = np.unique(lengths, return_inverse=True)
        length_crcs = np.array([masked_crc32c(_LENGTH.pack(int(n))) for n in distinct], dtype="<u4")[which]
        header = np.empty(count, dtype=[("length", "<u8"), ("crc", "<u4")])
        header["length"], header["crc"] = lengths, length_crcs
        widest = int(lengths.max())
        if (widest + 16) * count > 2 * (data.size + 16 * count):   # lengths far apart: place each byte
            framed = np.empty(data.size + 16 * count, dtype=np.uint8)
            starts = offsets[:-1] + 16 * np.arange(count, dtype=np.int64)   # where each framed record begins
            framed[(starts[:, None] + np.arange(12)).ravel()] = header.view(np.uint8)
            framed[(starts + 12 + lengths)[:, None] + np.arange(4)] = data_crcs.view(np.uint8).reshape(count, 4)
            record_of_byte = np.repeat(np.arange(count, dtype=np.int64), lengths)
            framed[np.arange(data.size, dtype=np.int64) + 16 * record_of_byte + 12] = data
        else:   # one row per record: header, the data (padded to the longest), the data's crc
            rows = np.empty((count, widest + 16), dtype=np.uint8)
            rows[:, :12] = header.view(np.uint8).reshape(count, 12)
            crcs = data_crcs.view(np.uint8).reshape(count, 4)
            if int(lengths.min()) == widest:   # records of one length (a table's rows): plain 2-D copies
                rows[:, 12:12 + widest] = data.reshape(count, widest)
                rows[:, 12 + widest:] = crcs
                framed = rows.reshape(-1)
            else:
                rows[:, 12:][np.arange(widest + 4) < lengths[:, None]] = data
                rows[np.arange(count)[:, None], 12 + lengths[:, None] + np.arange(4)] = crcs
                framed = rows[np.arange(widest + 16) < (lengths + 16)[:, None]]
        self._stage_out()
        self._pending.append(framed)
        self._pending_bytes += framed.size
        self.records_written += count
        self.bytes_written += framed.size
        if self._pending_bytes >= _WRITE_BUFFER or len(self._pending) >= _MAX_IOV:
            self._flush_pending()

    def _stage_out(self) -> None:
        if self._staging:
            self._pending.append(self._staging)
            self._staging = bytearray()

    def _flush_pending(self) -> None:
        self._stage_out()
        pieces, self._pending, self._pending_bytes = self._pending, [], 0
        if not pieces:
            return
        if self._compressor is not None:
            compress = self._compressor.compress
            pieces = [out for out in map(compress, pieces) if out]
        if self._fd is not None:
            _writev_all(self._fd, pieces)
        else:
            for piece in pieces:
                self._file.write(piece)

    def flush(self) -> None:
        """Push every record written so far to the file (a full flush point for compression)."""
        self._flush_pending()
        if self._compressor is not None:
            self._write_raw(self._compressor.flush(zlib.Z_SYNC_FLUSH))
        if hasattr(self._file, "flush"):
            self._file.flush()

    def _write_raw(self, data: bytes) -> None:
        if not data:
            return
        if self._fd is not None:
            _writev_all(self._fd, [data])
        else:
            self._file.write(data)

    def close(self) -> None:
        """Flush, end the compressed stream, and close the file if this writer opened it."""
        if self._closed:
            return
        self._closed = True
        try:
            self._flush_pending()
            if self._compressor is not None:
                self._write_raw(self._compressor.flush(zlib.Z_FINISH))
            if not self._owns_file and hasattr(self._file, "flush"):
                self._file.flush()
        finally:
            if self._owns_file:
                self._file.close()

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _writev_all(fd: int, pieces: list[Any]) -> None:
    """Write every piece, in order, with as few system calls as the kernel allows."""
    views = [memoryview(piece) for piece in pieces]
    first = 0
    while first < len(views):
        written = os.writev(fd, views[first:first + _MAX_IOV])
        while first < len(views) and written >= len(views[first]):
            written -= len(views[first])
            first += 1
        if written:  # a partial write ended inside this piece
            views[first] = views[first][written:]


class _Source:
    """Sequential exact-size reads from a stream, through a decompressor when compressed."""

    def __init__(self, path_or_file: PathOrFile, compression: str | None) -> None:
        self.name = _describe(path_or_file)
        if isinstance(path_or_file, (str, os.PathLike)):
            self._file: Any = open(path_or_file, "rb", buffering=_READ_BLOCK)
            self._owns_file = True
        else:
            self._file = path_or_file
            self._owns_file = False
        self._wbits = _WBITS[compression] if compression else 0
        self._decompressor = zlib.decompressobj(self._wbits) if compression else None
        self._inflated = b""    # decompressed bytes not handed out yet
        self.truncated = False  # the compressed stream ended before its end marker

    def read(self, size: int) -> bytes:
        """Return ``size`` bytes, fewer only at the end of the data."""
        if self._decompressor is None:
            data = self._file.read(size)
            if len(data) == size or not data:
                return data
            parts, got = [data], len(data)
            while got < size:  # streams may return short reads before their end
                more = self._file.read(size - got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
            return b"".join(parts)
        if len(self._inflated) >= size:
            data, self._inflated = self._inflated[:size], self._inflated[size:]
            return data
        parts, got = [], 0
        while got < size:
            if not self._inflated:
                self._inflated = self._inflate()
                if not self._inflated:
                    break
            take = self._inflated[:size - got]
            self._inflated = self._inflated[len(take):]
            parts.append(take)
            got += len(take)
        return b"".join(parts)

    def _inflate(self) -> bytes:
        """Return the next non-empty block of decompressed bytes, or b"" at the end."""
        while not self.truncated:
            decompressor = self._decompressor
            if decompressor is None:   # read() reads an uncompressed file itself
                return b""
            if decompressor.eof:
                # another gzip member may follow, as `cat a.gz b.gz` produces
                rest = decompressor.unused_data or self._file.read(_READ_BLOCK)
                if not rest:
                    return b""
                decompressor = self._decompressor = zlib.decompressobj(self._wbits)
                chunk = rest
            else:
                chunk = self._file.read(_READ_BLOCK)
                if not chunk:
                    self.truncated = True
                    return decompressor.flush()
            out = decompressor.decompress(chunk)
            if out:
                return out
        return b""

    def close(self) -> None:
        if self._owns_file:
            self._file.close()


def read_records(path_or_file: PathOrFile, compression: str | None = None, *,
                 verify: bool = True) -> Iterator[bytes]:
    """Yield each record of a TFRecord file as bytes.

    The length checksum is always checked (a damaged length must not make the reader allocate
    gigabytes); ``verify=False`` skips only the data checksum. A damaged or truncated file raises
    :class:`CorruptRecordError` / :class:`TruncatedRecordError` naming the file and the byte
    offset of the record (in the uncompressed stream for compressed files).
    """
    compression = _compression(compression)
    if compression is None and isinstance(path_or_file, (str, os.PathLike)):
        yield from _read_plain_file(path_or_file, verify)
        return
    source = _Source(path_or_file, compression)
    try:
        yield from _read_stream(source, verify)
    finally:
        source.close()


def _read_plain_file(path: str | os.PathLike[str], verify: bool) -> Iterator[bytes]:
    """Read an uncompressed local file: large reads into one buffer, records sliced out of it."""
    name = os.fspath(path)
    unpack_header = _HEADER.unpack_from
    unpack_crc = _CRC.unpack_from
    with open(path, "rb", buffering=0) as file:
        buffer = bytearray(_READ_BLOCK)
        view = memoryview(buffer)
        start = end = 0      # unread bytes are buffer[start:end]
        offset = 0           # file offset of buffer[start]
        while True:
            if end - start < 12:
                start, end = _refill(file, view, start, end, 12)
                if start == end:
                    return
                if end < 12:
                    raise _truncated(name, offset, 12, end, "file")
            length, length_crc = unpack_header(buffer, start)
            if masked_crc32c(view[start:start + 8]) != length_crc:
                raise _corrupt(name, offset, "length")
            need = length + 16
            if end - start < need:
                if need > len(buffer):  # a record larger than the buffer: grow it once
                    size = os.fstat(file.fileno()).st_size
                    if offset + need > size:  # do not allocate for a record that is not there
                        raise _truncated(name, offset, need, size - offset, "file")
                    grown = bytearray(need + _READ_BLOCK)
                    grown[:end - start] = view[start:end]
                    buffer, view = grown, memoryview(grown)
                    start, end = 0, end - start
                start, end = _refill(file, view, start, end, need)
                if end < need:
                    raise _truncated(name, offset, need, end, "file")
            data_start = start + 12
            record = bytes(view[data_start:data_start + length])
            if verify and masked_crc32c(record) != unpack_crc(buffer, data_start + length)[0]:
                raise _corrupt(name, offset, "data")
            start += need
            offset += need
            yield record


def _refill(file: Any, view: memoryview, start: int, end: int, want: int) -> tuple[int, int]:
    """Move the unread bytes to the front of the buffer and read until ``want`` are there."""
    remaining = end - start
    if start:
        view[:remaining] = view[start:end]
    end = remaining
    while end < want:
        got = file.readinto(view[end:])
        if not got:
            break
        end += got
    return 0, end


def _read_stream(source: _Source, verify: bool) -> Iterator[bytes]:
    """Read records from any stream with ``read`` (compressed files, remote files)."""
    name = source.name
    offset = 0
    read = source.read
    while True:
        try:
            header = read(12)
            if not header:
                if source.truncated:
                    raise _truncated(name, offset, 12, 0, "compressed stream")
                return
            if len(header) < 12:
                raise _truncated(name, offset, 12, len(header), "file")
            length, length_crc = _HEADER.unpack(header)
            if masked_crc32c(header[:8]) != length_crc:
                raise _corrupt(name, offset, "length")
            body = read(length + 4)
        except zlib.error as error:
            raise CorruptRecordError(
                f"TFRecord file {name} is corrupt: its compressed stream cannot be decompressed "
                f"after uncompressed byte offset {offset} ({error}); check the compression "
                "argument, else rewrite the shard from its source data.",
                path=name, offset=offset) from None
        if len(body) < length + 4:
            raise _truncated(name, offset, length + 16, 12 + len(body), "file")
        record = body[:length]
        if verify and masked_crc32c(record) != _CRC.unpack_from(body, length)[0]:
            raise _corrupt(name, offset, "data")
        offset += length + 16
        yield record


def _corrupt(name: str, offset: int, part: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"TFRecord file {name} is corrupt: the {part} checksum of the record at byte offset "
        f"{offset} does not match; the file was damaged after writing or is not a TFRecord "
        "file. Rewrite the shard from its source data.", path=name, offset=offset)


def _truncated(name: str, offset: int, needed: int, found: int, part: str) -> TruncatedRecordError:
    return TruncatedRecordError(
        f"TFRecord file {name} is truncated: the record at byte offset {offset} needs {needed} "
        f"bytes but only {found} remain in the {part}; the writer probably did not finish. "
        "Rewrite the shard from its source data.", path=name, offset=offset)
