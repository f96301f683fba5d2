"""The processes a test made: this process and every live one below it, found from the parent ids in
/proc. Tests that look for leftovers look only here, so another job running on the machine (a notebook,
another test run) is none of their business."""

from __future__ import annotations

import os
from pathlib import Path


def processes_of_this_test() -> set[int]:
    """This process and every live process below it (the forkserver, the ranks, anything they started), from
    the parent ids in /proc: another job's processes on the machine are none of the test's business."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        # "pid (command) state ppid ...": the command may hold spaces and parentheses, so split after the last ")"
        parent = int(text.rpartition(")")[2].split()[1])
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def processes_mapping_segments() -> list[int]:
    """The processes of this test (see processes_of_this_test) that map a segment of hopsml's."""
    found = []
    for pid in sorted(processes_of_this_test()):
        try:
            if "memfd:hopsml-collective" in Path(f"/proc/{pid}/maps").read_text():
                found.append(pid)
        except OSError:  # gone meanwhile
            continue
    return found
