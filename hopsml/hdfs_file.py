"""The stream `hdfs.open_file` returns: usable with and without `with`; a write lands on close().

Writes go to a file aside and replace the target when the stream is closed; leaving a `with` block
by an exception discards them, on the binary, buffered and text layers alike.
"""

from __future__ import annotations

import io
from contextlib import ExitStack
from types import TracebackType
from typing import IO, Any, cast


class HdfsFile(io.RawIOBase):
    """The raw stream under what `open_file` returns; closing it commits a write.

    Writes go to a file aside and replace the target on close(); leaving a `with` block by an
    exception discards them. In binary write mode a str is written as UTF-8, as pydoop's files allowed.
    """

    def __init__(self, stack: ExitStack, stream: IO[bytes], name: str, mode: str) -> None:
        super().__init__()
        self._stack, self._stream, self.name, self._mode = stack, stream, name, mode
        self._failure: tuple[Any, Any, Any] | None = None

    @property
    def mode(self) -> str:
        return self._mode

    def readable(self) -> bool:
        return self._mode == "rb"

    def writable(self) -> bool:
        return self._mode != "rb"

    def seekable(self) -> bool:
        return self.readable()

    def read(self, size: int | None = -1) -> bytes:
        self._check_open()
        stream: Any = self._stream   # pyarrow's files read everything on None, not on -1
        return stream.read(None if size is None or size < 0 else size)

    def readall(self) -> bytes:
        return self.read()

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        return self._stream.seek(offset, whence)

    def tell(self) -> int:
        self._check_open()
        return self._stream.tell()

    def write(self, data: Any) -> int:
        self._check_open()
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._stream.write(data)
        return len(data)

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError(f"I/O operation on closed file {self.name}")

    def discard_on_close(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                         tb: TracebackType | None) -> None:
        """Make the next close() drop a pending write (the block that wrote it failed)."""
        self._failure = (exc_type, exc, tb)

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._failure is None:
                self._stack.close()
            else:
                self._stack.__exit__(*self._failure)
        finally:
            super().close()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:
            self.discard_on_close(exc_type, exc, tb)
        self.close()


class _Buffered:
    """Mixin for the buffered and text layers: a failing `with` block discards the write too."""

    raw_file: HdfsFile

    def close(self) -> None:
        super().close()  # type: ignore[misc]  # io.BufferedReader's or io.TextIOWrapper's, after this mixin

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:
            self.raw_file.discard_on_close(exc_type, exc, tb)
        self.close()


class _BufferedReader(_Buffered, io.BufferedReader):
    pass


class _TextFile(_Buffered, io.TextIOWrapper):
    pass


def wrap(raw: HdfsFile, text: bool, encoding: str = "utf-8") -> IO[Any]:
    """What the user gets: a buffered reader for binary reads, the raw stream for binary writes, else text."""
    layer: Any
    if not text:
        if not raw.readable():
            return cast(IO[Any], raw)   # a RawIOBase: the file interface, though not IO by name
        layer = _BufferedReader(raw)
    else:
        layer = _TextFile(_BufferedReader(raw) if raw.readable() else io.BufferedWriter(raw), encoding=encoding)
    layer.raw_file = raw
    return layer
