"""An execution's logs as they are written: the app's stdout and stderr come through a pipe, and each line reaches
its log file with the job's secret values and every secret shape (hopsml.redact) hidden. Spark prints some
settings as it starts (`:: resolving dependencies` names the repositories, with a password in their URL), and an
app may print what it was given; the log is read by whoever reads the project, and the web view shows it.

Lines are redacted whole, so a secret is never cut in two by a read; a line still open after `IDLE_FLUSH_S` (a
prompt, a progress bar) or longer than `MAX_LINE` is written as it is, redacted.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Iterable

from hopsml.redact import redact_bytes

IDLE_FLUSH_S = 0.5
MAX_LINE = 1 << 16


class Pump:
    """Copy what is read from `fd` to the end of the file `path`, redacted line by line, until every writer of the
    pipe is gone; then close `fd`."""

    def __init__(self, fd: int, path: str, known: Iterable[str]) -> None:
        self.fd = fd
        self.known = [value for value in known if value]
        self.out = open(path, "ab")
        self.thread = threading.Thread(target=self._run, name=f"hopsml-log-{os.path.basename(path)}", daemon=True)
        self.thread.start()

    def _write(self, data: bytes) -> None:
        if data:
            self.out.write(redact_bytes(data, self.known))
            self.out.flush()

    def _run(self) -> None:
        pending = b""
        try:
            while True:
                readable, _, _ = select.select([self.fd], [], [], IDLE_FLUSH_S)
                if not readable:
                    self._write(pending)
                    pending = b""
                    continue
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    break
                pending += chunk
                cut = pending.rfind(b"\n") + 1
                if cut:
                    self._write(pending[:cut])
                    pending = pending[cut:]
                if len(pending) > MAX_LINE:
                    self._write(pending)
                    pending = b""
        except OSError:
            pass
        finally:
            try:
                self._write(pending)
            finally:
                self.out.close()
                os.close(self.fd)

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
