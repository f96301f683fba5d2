"""Chrome trace event JSON (what Perfetto and chrome://tracing open): one rank's recorder as events, and the
checks every trace hopsml writes passes (`problems`).

Each rank is a process (pid = rank) named "rank N"; its threads are lanes. A collective op is an "X" (complete)
event named by its kind, with its bytes, path and split as args, and a nested "waiting for peers" event for the
time from this rank's arrival until every peer's header was in (the rest is moving data). Times are
microseconds of the reference clock (the driver's wall clock, each rank's offset applied)."""

from __future__ import annotations

from typing import Any

from hopsml.timeline.recorder import COLLECTIVE, Recorder

WAITING = "waiting for peers"
PHASES = {"X", "M", "C", "i", "B", "E"}


def path_of(recorder: Recorder, kind: str, nbytes: int) -> str:
    """How an op moved its data: 'shm' or 'tcp' (inline in the header exchange), or the large path."""
    paths = recorder.paths
    if kind == "broadcast" and nbytes > int(paths.get("small_bytes", 0)):
        return str(paths.get("broadcast", "chain"))
    if nbytes <= int(paths.get("small_bytes", 0)):
        return str(paths.get("small", ""))
    return str(paths.get("large", ""))


def _us(recorder: Recorder, ns: int) -> float:
    return round(recorder.to_reference_ns(ns) / 1000.0, 3)


def events(recorder: Recorder) -> list[dict[str, Any]]:
    """The recorder's spans, ops and counters as trace events (pid = rank)."""
    pid = recorder.rank
    lanes: dict[int, int] = {}

    def lane(ident: int) -> int:
        return lanes.setdefault(ident, len(lanes))

    out: list[dict[str, Any]] = []
    for kind, seq, start, peers, end, nbytes, ident in list(recorder.ops):
        tid = lane(ident)
        peers = min(max(peers, start), end)
        args = {"seq": seq, "bytes": nbytes, "path": path_of(recorder, kind, nbytes),
                "wait_us": round((peers - start) / 1000, 3), "move_us": round((end - peers) / 1000, 3)}
        ts = _us(recorder, start)
        out.append({"ph": "X", "name": kind, "cat": COLLECTIVE, "pid": pid, "tid": tid, "ts": ts,
                    "dur": max(0.0, round((end - start) / 1000, 3)), "args": args})
        if peers > start:
            out.append({"ph": "X", "name": WAITING, "cat": COLLECTIVE, "pid": pid, "tid": tid, "ts": ts,
                        "dur": round((peers - start) / 1000, 3)})
    for category, name, start, end, ident, extra in list(recorder.spans):
        event: dict[str, Any] = {"ph": "X", "name": name, "cat": category, "pid": pid, "tid": lane(ident),
                                 "ts": _us(recorder, start), "dur": max(0.0, round((end - start) / 1000, 3))}
        if extra:
            event["args"] = {k: v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
                             for k, v in extra.items()}
        out.append(event)
    for name, at, values in list(recorder.counters):
        out.append({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": _us(recorder, at), "args": values})
    out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0, "args": {"name": f"rank {pid}"}})
    out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0, "args": {"sort_index": pid}})
    for tid in lanes.values():
        label = "training" if tid == 0 else f"thread {tid}"
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0, "args": {"name": label}})
    return out


def rank_metadata(recorder: Recorder) -> dict[str, Any]:
    """What a rank's part says about itself: clock offset and its error bound, what it dropped."""
    return {"rank": recorder.rank, "size": recorder.size, "clock_offset_ns": recorder.offset_ns,
            "clock_error_ns": recorder.offset_error_ns, "dropped": recorder.dropped,
            "ops": len(recorder.ops), "spans": len(recorder.spans), "paths": dict(recorder.paths)}


def rank_trace(recorder: Recorder) -> dict[str, Any]:
    """One rank's part: its events and metadata (the merge makes one trace of all parts)."""
    return {"traceEvents": events(recorder), "displayTimeUnit": "ms",
            "metadata": {"hopsml_timeline": 1, "ranks": [rank_metadata(recorder)]}}


def problems(trace: object) -> list[str]:
    """What makes `trace` break the Chrome trace event format as hopsml writes it; [] when it is fine."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["the trace is not an object with a traceEvents list"]
    found = []
    for i, event in enumerate(trace["traceEvents"]):
        missing = [key for key in ("ph", "ts", "pid", "tid", "name") if key not in event]
        if missing:
            found.append(f"event {i} lacks {', '.join(missing)}")
            continue
        if event["ph"] not in PHASES:
            found.append(f"event {i} has phase {event['ph']!r}")
        if not isinstance(event["ts"], (int, float)):
            found.append(f"event {i} has a ts that is not a number")
        if event["ph"] == "X" and not (isinstance(event.get("dur"), (int, float)) and event["dur"] >= 0):
            found.append(f"event {i} ('X') has no dur >= 0")
    return found
