"""The header every rank sends before each collective, and the check that all ranks asked for the same thing.

Every collective starts with an exchange in which each rank sends every other rank a small header
(collective, op, root, sequence number, a description of the data, its size). Each rank then holds all
headers and runs the same check, so a mismatch raises the same CollectiveError on every rank before
any data is combined, and the communicator stays usable afterwards.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from hopsml.errors import CollectiveError

OPS = ("sum", "mean", "min", "max")
KINDS = ("allreduce", "allreduce_many", "broadcast", "allgather", "barrier")

_MAGIC = b"HMLH"
# magic, kind, op, error flag, root, sequence number, data bytes, inline payload bytes, description bytes
_FIXED = struct.Struct("!4sBBBxiQQQI")
_MAX_DESC_BYTES = 1 << 16


@dataclass(frozen=True)
class Header:
    """What one rank is about to do; `inline` payload bytes follow the header on the wire."""

    kind: str
    seq: int
    desc: str
    op: str = ""
    root: int = -1
    nbytes: int = 0
    inline: int = 0
    error: bool = False

    def pack(self) -> bytes:
        desc = self.desc.encode("utf-8")[:_MAX_DESC_BYTES]
        return _FIXED.pack(_MAGIC, KINDS.index(self.kind), OPS.index(self.op) + 1 if self.op in OPS else 0,
                           int(self.error), self.root, self.seq, self.nbytes, self.inline, len(desc)) + desc

    @classmethod
    def unpack_fixed(cls, fixed: bytes | bytearray) -> tuple[Header, int] | None:
        """Parse the fixed part: the header without its description, and the description's length;
        None if the bytes are not a header."""
        magic, kind, op, error, root, seq, nbytes, inline, desc_len = _FIXED.unpack(fixed)
        if magic != _MAGIC or kind >= len(KINDS) or op > len(OPS) or desc_len > _MAX_DESC_BYTES:
            return None
        return cls(KINDS[kind], seq, "", OPS[op - 1] if op else "", root, nbytes, inline, bool(error)), desc_len

    @staticmethod
    def message_rest(fixed: bytes | bytearray | memoryview, merged_inline: int) -> int:
        """How many bytes of its message follow a header's fixed part: the description, and the inline payload
        when it is at most `merged_inline` bytes (then it travels in the same message); 0 for bytes that are no
        header (the caller's parse then refuses them). Builds no Header: it runs for every message."""
        magic, _, _, _, _, _, _, inline, desc_len = _FIXED.unpack(fixed)
        if magic != _MAGIC:
            return 0
        return desc_len + (inline if inline <= merged_inline else 0)


FIXED_SIZE = _FIXED.size


def describe_array(kind_prefix: str, dtype_name: str, shape: tuple[int, ...]) -> str:
    """'float32[3, 4]', with a prefix for device arrays, e.g. 'cuda/nccl float32[3, 4]'."""
    text = f"{dtype_name}[{', '.join(map(str, shape))}]"
    return f"{kind_prefix} {text}" if kind_prefix else text


def _group(values: Sequence[object]) -> str:
    """'ranks 0, 2: a; rank 1: b' (values in order of first appearance)."""
    by_value: dict[object, list[int]] = {}
    for rank, value in enumerate(values):
        by_value.setdefault(value, []).append(rank)
    parts = []
    for value, ranks in by_value.items():
        who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
        parts.append(f"{who}: {value}")
    return "; ".join(parts)


def check_headers(headers: list[Header], *, same_nbytes: bool = True) -> None:
    """Raise the same CollectiveError on every rank if the ranks' headers disagree."""
    first = headers[0]
    if not first.error and all(h is first for h in headers):  # every peer sent exactly this rank's header bytes
        return
    failed = [(rank, h) for rank, h in enumerate(headers) if h.error]
    if failed:
        reasons = "; ".join(f"rank {rank}: {h.desc}" for rank, h in failed)
        raise CollectiveError(f"{first.kind} #{first.seq} could not run because of invalid input ({reasons}); "
                              "fix the call on those ranks")
    calls = [f"{h.kind} #{h.seq}" for h in headers]
    if any(call != calls[0] for call in calls):
        raise CollectiveError(f"the ranks made different collective calls: {_group(calls)}; every rank must "
                              "make the same collective calls in the same order")
    fields = [("op", lambda h: repr(h.op)), ("root", lambda h: h.root), ("data", lambda h: h.desc)]
    if same_nbytes:
        fields.append(("number of bytes", lambda h: h.nbytes))
    for name, get in fields:
        values = [get(h) for h in headers]
        if any(v != values[0] for v in values):
            raise CollectiveError(
                f"the ranks disagree on the {name} of {first.kind} #{first.seq}: {_group(values)}; every rank "
                "must pass the same op and root, and arrays of the same dtype and shape")
