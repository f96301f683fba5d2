"""What the web view shows, read from the project root through Storage: projects, the experiment
table as `hopsml experiments list` sees it (LOST and BROKEN included), one run with its metrics,
logs and files, the trials of a search, models (datasets: `datasets.py`).
No Flask here: plain data for the templates, so it is testable on its own."""

from __future__ import annotations

import json
import logging
import math
import posixpath
from dataclasses import dataclass
from typing import Any

from hopsml import layout
from hopsml.data import dataset as ds
from hopsml.data import fingerprint
from hopsml.errors import HopsmlError, InvalidNameError, StorageError
from hopsml.fs import Storage
from hopsml.runs import rerun
from hopsml.tracking import environment, lineage
from hopsml.tracking import record as records
from hopsml.tracking.metrics import read_metrics
from hopsml.ui.charts import _num, fmt

log = logging.getLogger(__name__)

TAIL_BYTES = 64 << 10        # of a log shown at first; the page then follows it from there
PROGRAM_BYTES = 4 << 20      # largest versioned notebook or script rendered
PREVIEW_BYTES = 256 << 10    # of a text file a page shows (conda.yml): the rest is a link to the file
METRICS_BYTES = 16 << 20     # of metrics.jsonl a page reads: the newest, when the file is larger
CHART_POINTS = 2000          # per metric on a chart: a longer series is thinned evenly, its last point kept
MAX_LOGS = 50                # logs a run page follows (a search has one per trial)
MAX_CHART_POINTS = 300       # per line of a system chart: a long run's samples are thinned to this, peaks kept
# The system metrics a run samples (hopsml.timeline.system), in the order the timeline page charts them.
SYSTEM_METRICS = {"cpu_pct": "CPU % (of one core)", "rss_mib": "memory, resident (MiB)",
                  "net_sent_mib": "network sent (MiB)", "net_recv_mib": "network received (MiB)",
                  "gpu_util_pct": "GPU utilisation %", "gpu_mem_mib": "GPU memory in use (MiB)"}


class NotFound(HopsmlError, LookupError):
    """A page asked for something that is not in the root (or a path that would leave it)."""


def safe_join(base: str, rel: str) -> str:
    """`base/rel` for a '/'-separated `rel` that stays inside `base`, else NotFound.

    >>> safe_join("Projects/p/Experiments/a_1", "logs/worker_0.log")
    'Projects/p/Experiments/a_1/logs/worker_0.log'
    >>> safe_join("Projects/p", "../q/x")
    Traceback (most recent call last):
    ...
    hopsml.ui.views.NotFound: no file '../q/x' here
    """
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") or "\\" in p or "\x00" in p for p in parts):
        raise NotFound(f"no file {rel!r} here")
    return layout.join(base, *parts)


def check_inside(storage: Storage, rel: str) -> str:
    """`rel` itself, after checking that on a local root it does not lead out of the root through a
    symbolic link; NotFound if it does."""
    if not storage.contains(rel):
        raise NotFound(f"no file {posixpath.basename(rel)!r} here")
    return rel


def project_names(storage: Storage) -> list[str]:
    """Folders under Projects/ with a name hopsml accepts."""
    names = []
    for rel in storage.ls(layout.PROJECTS):
        name = posixpath.basename(rel)
        if not name.startswith(".") and storage.isdir(rel):
            names.append(name)
    return names


def check_project(storage: Storage, project: str) -> str:
    try:
        path = layout.project_dir(project)
    except InvalidNameError as exc:
        raise NotFound(str(exc)) from None
    if not storage.isdir(path):
        raise NotFound(f"no project {project!r} under {storage.uri()}")
    return project


def projects(storage: Storage) -> list[dict[str, Any]]:
    """Each project with how many experiments, datasets and models it holds."""
    out = []
    for name in project_names(storage):
        try:
            out.append({"name": name,
                        "experiments": sum(1 for p in storage.ls(layout.experiments_dir(name))
                                           if not posixpath.basename(p).startswith(".")),
                        "datasets": len(ds.list_names(storage, name)),
                        "models": sum(1 for p in storage.ls(layout.models_dir(name))
                                      if not posixpath.basename(p).startswith((".", "_")))})
        except InvalidNameError:
            continue
    return out


def short_time(stamp: str | None) -> str:
    return stamp[:19].replace("T", " ") if stamp else ""


def experiment_rows(storage: Storage, project: str, lost_after_s: float) -> list[dict[str, Any]]:
    """The experiment table, newest first, as `hopsml experiments list` decides states."""
    rows: list[dict[str, Any]] = []
    for rec in records.scan_records(storage, project):
        if isinstance(rec, records.BrokenRecord):
            rows.append({"id": rec.id, "name": "", "type": "", "state": rec.state, "problem": rec.reason,
                         "user": "", "start": "", "finished": "", "duration": None, "metric": None,
                         "metric_key": None, "hyperparameters": ""})
            continue
        state, reason = records.shown_state(storage, project, rec, lost_after_s)
        rows.append({"id": rec.id, "name": rec.name, "type": rec.type, "state": state, "problem": reason,
                     "user": rec.user, "start": short_time(rec.start), "finished": short_time(rec.finished),
                     "duration": rec.duration, "metric": _num(rec.metric),
                     "metric_key": rec.metric_key or rec.optimization_key,
                     "hyperparameters": json.dumps(rec.hyperparameters, default=str) if rec.hyperparameters else ""})
    return rows


@dataclass
class FileEntry:
    rel: str
    size: int


def list_files(storage: Storage, folder: str) -> list[FileEntry]:
    """Every file below `folder`, relative to it, sorted."""
    base = storage.path(folder)
    return sorted((FileEntry(posixpath.relpath(i.path, base), int(i.size or 0)) for i in storage.walk(folder)
                   if i.is_file), key=lambda f: f.rel)


def read_tail(storage: Storage, rel: str, offset: int | None = None, limit: int = TAIL_BYTES) -> tuple[str, int]:
    """(text, end offset) of a growing file: from `offset`, or its last `limit` bytes when None.
    A file that does not exist (yet) reads as empty."""
    info = storage.info(check_inside(storage, rel))
    if not info.is_file:
        return "", 0
    size = int(info.size or 0)
    start = max(size - limit, 0) if offset is None else min(max(offset, 0), size)
    start = max(start, size - (4 << 20))  # never more than a few MB per request
    if start >= size:
        return "", size
    try:
        with storage.open_input(rel, seekable=True) as stream:
            stream.seek(start)
            data = stream.read(size - start)
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot read {storage.uri(rel)}: {exc}") from exc
    return data.decode("utf-8", errors="replace"), start + len(data)


def metric_series(storage: Storage, rel: str) -> dict[str, list[tuple[float, float]]]:
    """metrics.jsonl as {name: [(step, value), ...]}, at most CHART_POINTS per name, from the newest
    METRICS_BYTES of the file; empty when there is none."""
    if not storage.exists(rel) or not storage.contains(rel):
        return {}
    size = int(storage.info(rel).size or 0)
    start = max(0, size - METRICS_BYTES)
    with storage.open_input(check_inside(storage, rel), seekable=True) as stream:
        stream.seek(start)
        data = stream.read(METRICS_BYTES)
    text = data.decode("utf-8", errors="replace")
    if start > 0:   # a line cut by the window's start is not a metric
        text = text.split("\n", 1)[1] if "\n" in text else ""
    series: dict[str, list[tuple[float, float]]] = {}
    for index, row in enumerate(read_metrics(text)):
        if not isinstance(row, dict) or "name" not in row:
            continue
        value = _num(row.get("value"))
        step = _num(row.get("step"))
        if value is not None:
            series.setdefault(str(row["name"]), []).append((step if step is not None else index, value))
    return {name: thinned(points, CHART_POINTS) for name, points in series.items()}


def thinned(points: list[Any], most: int) -> list[Any]:
    """At most `most` of `points`, evenly spaced, the first and the last kept.

    >>> thinned(list(range(10)), 4), thinned([1, 2], 4)
    ([0, 3, 6, 9], [1, 2])
    """
    if len(points) <= most:
        return points
    last = len(points) - 1
    return [points[round(i * last / (most - 1))] for i in range(most)]


def preview(storage: Storage, rel: str) -> dict[str, Any]:
    """The first PREVIEW_BYTES of a text file, and whether there is more (the page links the whole file)."""
    with storage.open_input(check_inside(storage, rel)) as stream:
        data = stream.read(PREVIEW_BYTES + 1)
    return {"text": data[:PREVIEW_BYTES].decode("utf-8", errors="replace"), "cut": len(data) > PREVIEW_BYTES}


def _is_log(rel: str) -> bool:
    """The run's output.log, a rank's logs/worker_<n>.log, or a trial's <trial>/output.log."""
    parts = rel.split("/")
    return (rel == layout.OUTPUT_LOG or (len(parts) == 2 and parts[0] == layout.LOGS and rel.endswith(".log"))
            or (len(parts) == 2 and parts[1] == layout.OUTPUT_LOG))


def experiment_dir(project: str, exp_id: str) -> layout.ExperimentDir:
    try:
        return layout.ExperimentDir.from_id(project, exp_id)
    except InvalidNameError as exc:
        raise NotFound(str(exc)) from None


def thin_points(points: list[tuple[float, float]], limit: int = MAX_CHART_POINTS) -> list[tuple[float, float]]:
    """At most about `limit` points: the largest of each run of consecutive points, so that no peak is lost.

    >>> thin_points([(0, 1.0), (1, 5.0), (2, 2.0), (3, 3.0)], limit=2)
    [(1, 5.0), (3, 3.0)]
    """
    if len(points) <= limit:
        return points
    size = math.ceil(len(points) / limit)
    return [max(points[i:i + size], key=lambda point: point[1]) for i in range(0, len(points), size)]


def system_charts(storage: Storage, run_dir: layout.RunDir) -> list[dict[str, Any]]:
    """The system metrics the run sampled (timeline/system.json), one chart each: a line per rank over the seconds
    since the run's trace began (every chart over the same seconds), named with the rank's peak, and the peak of all
    ranks; [] without samples."""
    try:
        ranks = json.loads(storage.read_bytes(run_dir.timeline_system)).get("ranks") or {}
    except (HopsmlError, OSError, ValueError, AttributeError):
        return []  # no samples (timeline off, an older run) or a file cut short: the page shows the rest
    found: list[str] = []
    for columns in ranks.values():
        found += [key for key in columns if key != "t_s" and key not in found]
    times = [t for columns in ranks.values() for t in map(_num, columns.get("t_s") or []) if t is not None]
    if not times:
        return []
    span = (min(times), max(times))
    charts = []
    for key in sorted(found, key=lambda k: (list(SYSTEM_METRICS).index(k) if k in SYSTEM_METRICS else 99, k)):
        series: dict[str, list[tuple[float, float]]] = {}
        peaks: dict[str, float] = {}
        for rank in sorted(ranks, key=lambda r: int(r) if str(r).isdigit() else 0):
            columns = ranks[rank]
            points = [(t, v) for t, v in ((_num(t), _num(v)) for t, v in zip(columns.get("t_s") or [],
                                                                              columns.get(key) or []))
                      if t is not None and v is not None]
            if points:
                peaks[rank] = max(v for _, v in points)
                series[f"rank {rank} (peak {fmt(peaks[rank])})"] = thin_points(points)
        if series:
            top = max(peaks, key=lambda r: peaks[r])
            title = f"{SYSTEM_METRICS.get(key, key)}: peak {fmt(peaks[top])}" + (f" on rank {top}" if len(peaks) > 1
                                                                                  else "")
            charts.append({"key": key, "title": title, "series": series, "x_range": span})
    return charts


def load_record(storage: Storage, project: str, exp_id: str) -> records.ExperimentRecord | records.BrokenRecord:
    """The record of a run, or a BrokenRecord saying why it cannot be read; NotFound when there is no run."""
    experiment_dir(project, exp_id)
    try:
        return records.read_record(storage, project, exp_id)
    except records.BrokenRecordError as exc:
        return records.BrokenRecord(exp_id, exc.reason)
    except HopsmlError as exc:  # ExperimentNotFoundError
        raise NotFound(str(exc)) from None


def run_view(storage: Storage, project: str, exp_id: str, lost_after_s: float) -> dict[str, Any]:
    """Everything the run page shows."""
    exp = experiment_dir(project, exp_id)
    rec = load_record(storage, project, exp_id)
    files = list_files(storage, exp.path)
    view: dict[str, Any] = {"id": exp_id, "dir": exp, "files": files, "uri": storage.uri(exp.path),
                            "tensorboard": storage.uri(exp.tensorboard)}
    if isinstance(rec, records.BrokenRecord):
        view.update(broken=rec.reason, state=rec.state, rec=None)
        return view
    state, reason = records.shown_state(storage, project, rec, lost_after_s)
    data = rec.to_dict()
    view.update(rec=rec, state=state, lost=reason,
                extra={k: v for k, v in rec.extra.items() if k not in ("trials",)},
                metrics=metric_series(storage, exp.metrics),
                logs=[f.rel for f in files if _is_log(f.rel)][:MAX_LOGS],
                record_json=json.dumps(data, indent=2, default=str))
    names = {f.rel for f in files}
    view["environment"] = preview(storage, exp.environment) if layout.ENVIRONMENT in names else None
    cut = any(f.rel == posixpath.basename(exp.metrics) and f.size > METRICS_BYTES for f in files)
    view["metrics_cut_mib"] = METRICS_BYTES >> 20 if cut else 0   # the charts show the newest that many MiB
    view["python_environment"] = environment.described(storage, project, rec)
    view["program"] = None
    for suffix in (".ipynb", ".py"):
        rel = layout.PROGRAM_STEM + suffix
        entry = next((f for f in files if f.rel == rel), None)
        if entry is not None:
            with storage.open_input(check_inside(storage, exp.program(suffix))) as stream:
                text = stream.read(PROGRAM_BYTES).decode("utf-8", errors="replace")
            view["program"] = {"kind": suffix, "text": text, "rel": rel}
            break
    view["search"] = search_view(storage, exp, rec) if layout.SUMMARY in names else None
    view["datasets"] = []
    if layout.DATASETS_USED in names:
        try:
            used = storage.read_json(exp.datasets_used)
            used = used.get("datasets") if isinstance(used, dict) else used
            view["datasets"] = [d for d in used if isinstance(d, dict)] if isinstance(used, list) else []
        except (StorageError, ValueError):
            view["datasets"] = []
    for entry in view["datasets"]:   # fingerprints as a person compares them: the first characters
        entry["short"] = fingerprint.short(entry.get("fingerprint")) if entry.get("fingerprint") else None
        split_prints = entry.get(lineage.SPLIT_FINGERPRINTS)
        entry["split_short"] = {split: fingerprint.short(fp.get("fingerprint")) for split, fp in split_prints.items()
                                if isinstance(fp, dict)} if isinstance(split_prints, dict) else {}
    view["reruns"] = rerun.reruns_of(storage, project, exp_id)
    return view


def shown(value: object, indent: int | None = None) -> str:
    """A recorded value as a page shows it: a string as it is (no quotes), anything else as JSON with
    its characters unescaped (the template escapes the text for HTML; tojson would write '&' as \\u0026).

    >>> shown("grid"), shown("a=1&b=2"), shown({"lr": [0.1, 1]}), shown(None)
    ('grid', 'a=1&b=2', '{"lr": [0.1, 1]}', 'null')
    """
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=indent, ensure_ascii=False, default=str)


def short_value(value: object) -> str:
    """A parameter value for display: floats with 4 significant digits (random search samples them at full
    precision), anything else as it is.

    >>> short_value(0.012345678901), short_value(0.5), short_value(3), short_value("adam")
    ('0.01235', '0.5', '3', 'adam')
    """
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}"
    return str(value)


def trial_labels(rows: list[dict[str, Any]]) -> None:
    """Give each trial row a short `label` ('lr=0.01235&dropout=0.4'): its parameters with floats rounded,
    in its folder name's order; the trial's number is added where two labels would be the same."""
    for row in rows:
        params = row["params"]
        row["label"] = "&".join(f"{k}={short_value(v)}" for k, v in params.items()) if params else row["name"]
    seen: dict[str, int] = {}
    for row in rows:
        seen[row["label"]] = seen.get(row["label"], 0) + 1
    for row in rows:
        if seen[row["label"]] > 1:
            row["label"] = f"{row['label']} (#{row['index']})"


def search_view(storage: Storage, exp: layout.ExperimentDir, rec: records.ExperimentRecord) -> dict[str, Any]:
    """The trials of a search, best first, with each trial's metric curve."""
    try:
        trials = storage.read_json(exp.summary)["trials"]
        if not isinstance(trials, list):
            raise TypeError("'trials' is not a list")
    except (StorageError, ValueError, KeyError, TypeError) as exc:
        return {"error": f"{layout.SUMMARY} cannot be read ({type(exc).__name__}: {exc})", "trials": []}
    direction = (rec.direction or "max").lower()
    sign = -1 if direction == "max" else 1
    rows: list[dict[str, Any]] = []
    for trial in trials:
        if not isinstance(trial, dict):
            continue
        folder = str(trial.get("dir") or "")
        name = posixpath.basename(folder)
        inside = folder.startswith(exp.path + "/") and name not in ("", ".", "..")
        rows.append({"name": name, "params": trial.get("params") or {}, "state": trial.get("state"),
                     "index": trial.get("index"),  # the trial's number as its log names it
                     "metric": _num(trial.get("metric")), "duration": trial.get("duration"),
                     "error": trial.get("error"), "label": name,
                     # successive halving: the rung reached, its budget, why it stopped, each rung's run
                     "rung": trial.get("rung"), "budget": trial.get("budget"), "note": trial.get("note"),
                     "rungs": trial.get("rungs") if isinstance(trial.get("rungs"), list) else [],
                     "placements": trial.get("placements") if isinstance(trial.get("placements"), list) else [],
                     "series": metric_series(storage, layout.join(exp.path, name, layout.METRICS)) if inside else {}})
    rows.sort(key=lambda t: (t["metric"] is None, sign * (t["metric"] or 0)))
    trial_labels(rows)
    params = []
    for row in rows:
        params += [k for k in row["params"] if k not in params]
    curves: dict[str, dict[str, Any]] = {}
    for row in rows:
        for name, points in row["series"].items():
            curve = curves.setdefault(name, {"series": {}, "dashed": []})
            curve["series"][row["label"]] = points
            if row["state"] == records.State.EARLY_STOPPED.value:
                curve["dashed"].append(row["label"])
    key = rec.optimization_key or rec.metric_key or "metric"
    log_scale = rec.extra.get("log_scale")
    return {"trials": rows, "params": params, "key": key, "direction": direction, "error": None,
            "curves": curves, "log_scale": [str(p) for p in log_scale] if isinstance(log_scale, list) else [],
            "rungs": rung_table(rows, rec.extra.get("budgets")), "budget_name": rec.extra.get("budget"),
            "ablation": [r for r in rec.extra.get("ablation") or [] if isinstance(r, dict)],
            "gantt": slot_gantt(rows)}


GANTT_WIDTH = 640   # pixels of the time axis of the slots chart


def slot_gantt(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Which trial ran on which executor slot when: one lane per slot (per host: the slot its task had, else
    the first lane free at its start, as the host's cores took the tasks), one bar per job, idle time left
    blank; with the share of the lanes' time that jobs held. None when no trial recorded where it ran."""
    jobs = []
    for row in rows:
        for placed in row["placements"]:
            if not isinstance(placed, dict):
                continue
            start, end = _num(placed.get("start")), _num(placed.get("end"))
            if start is None or end is None or end < start:
                continue
            slot = placed.get("slot")
            jobs.append({"start": start, "end": end, "host": str(placed.get("host") or "executor"),
                         "slot": slot if isinstance(slot, int) else None, "label": row["label"],
                         "index": row["index"], "state": row["state"]})
    if not jobs:
        return None
    jobs.sort(key=lambda j: (j["start"], j["end"]))
    first, last = jobs[0]["start"], max(j["end"] for j in jobs)
    span = max(last - first, 1e-3)
    lanes: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for job in jobs:
        slot = job["slot"]
        if slot is None:   # the first lane of its host that was free when it started
            taken = sorted(k[1] for k in lanes if k[0] == job["host"])
            slot = next((k for k in taken if lanes[(job["host"], k)][-1]["end"] <= job["start"]),
                        (taken[-1] + 1) if taken else 0)
        lanes.setdefault((job["host"], slot), []).append(job)
    scale = GANTT_WIDTH / span
    drawn = []
    for (host, slot), bars in sorted(lanes.items()):
        drawn.append({"name": f"{host} slot {slot}", "bars": [
            {"x": round((b["start"] - first) * scale, 1), "w": round(max((b["end"] - b["start"]) * scale, 1.0), 1),
             "label": b["label"], "index": b["index"], "state": b["state"],
             "start": round(b["start"] - first, 2), "end": round(b["end"] - first, 2)} for b in bars]})
    busy = sum(j["end"] - j["start"] for j in jobs) / (len(lanes) * span)
    ticks = [{"x": round(GANTT_WIDTH * k / 4, 1), "t": round(span * k / 4, 1)} for k in range(5)]
    return {"lanes": drawn, "seconds": round(span, 2), "busy": round(busy, 3), "width": GANTT_WIDTH, "ticks": ticks}


def rung_table(rows: list[dict[str, Any]], budgets: object) -> list[dict[str, Any]]:
    """Per rung of a successive-halving search: its budget, the trials that ran it, those promoted from it;
    empty for other searches."""
    if not isinstance(budgets, list):
        return []
    table = []
    for rung, budget in enumerate(budgets):
        ran = [r for r in rows for entry in r["rungs"] if isinstance(entry, dict) and entry.get("rung") == rung]
        promoted = [r["label"] for r in ran if isinstance(r["rung"], int) and r["rung"] > rung]
        table.append({"rung": rung, "budget": budget, "trials": len(ran), "promoted": promoted})
    return table


# --- models ----------------------------------------------------------------------------------------
def model_rows(storage: Storage, project: str) -> list[dict[str, Any]]:
    """Every finished version of every model, newest version first within a model."""
    from hopsml.model import registry

    out = []
    for rel in storage.ls(layout.models_dir(project)):
        name = posixpath.basename(rel)
        if name.startswith((".", "_")) or not storage.isdir(rel):
            continue
        try:
            numbers = registry._version_numbers(storage, project, name)
        except InvalidNameError:
            continue
        for number in reversed(numbers):
            try:
                mv = registry.read_version(storage, project, name, number)
            except records.BrokenRecordError as exc:
                out.append({"name": name, "version": number, "problem": f"{records.BROKEN}: {exc.reason}"})
                continue
            out.append({"name": name, "version": number, "metrics": mv.metrics or {},
                        "description": mv.description, "created": short_time(mv.created),
                        "user": mv.user, "experiment": mv.experiment,
                        "datasets": mv.datasets or [], "files": mv.files or []})
    return out
