"""Temporary folders owned by a process: named `<prefix><pid>-...`, so that a later process can remove
what a killed one left (a rank's child folder, a run's staging folder) and never touch a living one's."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time

log = logging.getLogger(__name__)


def pid_alive(pid: int) -> bool:
    """Whether process `pid` still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def sweep(prefix: str, owner: str, idle_s: float = 0.0, tmp: str | None = None) -> list[str]:
    """Remove the folders `<prefix><pid>-...` in `tmp` whose process is gone and that nothing touched for
    `idle_s`; returns them. `owner` names what the folder belonged to, for the log line."""
    tmp = tmp or tempfile.gettempdir()
    try:
        names = os.listdir(tmp)
    except OSError:
        return []
    removed: list[str] = []
    now = time.time()
    for name in names:
        pid_text = name[len(prefix):].split("-", 1)[0]
        if not name.startswith(prefix) or not pid_text.isdigit() or pid_alive(int(pid_text)):
            continue
        path = os.path.join(tmp, name)
        try:
            if idle_s and now - os.stat(path).st_mtime <= idle_s:
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
        log.info("removed the folder %s of %s whose process %s is gone", path, owner, pid_text)
    return removed
