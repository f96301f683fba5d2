"""Training-serving skew and drift: the inputs in a serving's inference log against the statistics of the
dataset the model was trained on (the model's lineage names it; `prepare_table` wrote its `stats.json` and
the fitted `transform.json`, or a feature view wrote it as a training dataset version, whose `features`
vector the manifest names).

Per model feature (the transform's `features`, in order), the train split's histogram is put into the
feature's space (a standardized column's edges become (edge - mean) / std; a category's counts become its
index's) and the served values are counted in the same bins, plus one bin below and one above the training
range (and one for unknown categories). From the two histograms: PSI, the Kolmogorov-Smirnov statistic of
the binned distributions and the Jensen-Shannon distance (base 2, 0..1). A feature drifts when PSI or KS is
over its threshold (0.2 and 0.15: PSI 0.2 is the usual "significant shift").

The preprocessing check asks whether serving did what training did: rows with as many values as the
transform makes features; category indices that are whole numbers the transform knows (or -1, unknown);
one-hot columns of 0 and 1; and, for a standardized column, values that fit the standardized training
histogram better than the raw one (if raw values fit better, the serving sends untransformed inputs: its
transformer does not apply the fitted transform). The report is JSON, returned and written to
`Serving/<name>/monitor.json` for the web view.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np

from hopsml import config, layout
from hopsml.data import dataset as ds
from hopsml.fs import Storage
from hopsml.model import registry
from hopsml.serving import definition as defs
from hopsml.serving import inference_log
from hopsml.serving.definition import ServingError

log = logging.getLogger(__name__)

PSI_THRESHOLD = 0.2
KS_THRESHOLD = 0.15
MIN_ROWS = 30          # fewer logged rows are reported, with a warning that they say little
_EPS = 1e-4            # a bin's smallest share in PSI, so an empty bin does not make it infinite
_DENSITY_FLOOR = 1e-6  # the density of a value outside the training range, so one such value is not -inf
UNTRANSFORMED_SHARE = 0.05  # this share of served rows likelier raw than standardized is a preprocessing problem


# --- the scores --------------------------------------------------------------------------------------
def _shares(counts: Sequence[float]) -> np.ndarray:
    array = np.asarray(counts, dtype=np.float64)
    total = array.sum()
    return array / total if total > 0 else np.zeros_like(array)


def psi(expected: Sequence[float], actual: Sequence[float]) -> float:
    """Population stability index of two histograms over the same bins (counts or shares).

    >>> psi([50, 50], [50, 50])
    0.0
    >>> round(psi([90, 10], [10, 90]), 3)
    3.516
    """
    p = np.maximum(_shares(expected), _EPS)
    q = np.maximum(_shares(actual), _EPS)
    return float(np.sum((q - p) * np.log(q / p)))


def ks(expected: Sequence[float], actual: Sequence[float]) -> float:
    """Kolmogorov-Smirnov statistic of two binned distributions: the largest gap of their CDFs.

    >>> ks([1, 1, 0, 0], [0, 0, 1, 1])
    1.0
    """
    return float(np.max(np.abs(np.cumsum(_shares(expected)) - np.cumsum(_shares(actual))), initial=0.0))


def js(expected: Sequence[float], actual: Sequence[float]) -> float:
    """Jensen-Shannon distance (base 2: 0 for the same, 1 for disjoint distributions).

    >>> js([1, 0], [0, 1])
    1.0
    """
    p, q = _shares(expected), _shares(actual)
    m = (p + q) / 2

    def kl(a: np.ndarray) -> float:
        kept = a > 0
        return float(np.sum(a[kept] * np.log2(a[kept] / m[kept])))

    return math.sqrt(max((kl(p) + kl(q)) / 2, 0.0))


def _as_written(values: np.ndarray) -> np.ndarray:
    """Values rounded to 7 significant digits: a float32 feature (or one standardized and mapped back) is
    then the very number the CSV held, so it falls in the bin the statistics counted it in, also on an edge."""
    magnitude = np.floor(np.log10(np.where(values == 0, 1.0, np.abs(values))))
    scale = 10.0 ** (6 - magnitude)
    return np.where(np.isfinite(values), np.round(values * scale) / scale, values)


def _on_edges(values: np.ndarray, edges: Sequence[float], tolerance: np.ndarray) -> np.ndarray:
    """Values within ``tolerance`` of a bin edge put on it: a CSV value on an edge (the column's minimum, say)
    comes back from a standardized float32 feature a little off it, on either side, and more than seven
    significant digits of it can hold when the feature is far larger than the value."""
    edges_array = np.asarray(edges, dtype=np.float64)
    right = np.clip(np.searchsorted(edges_array, values), 1, len(edges_array) - 1)
    left_edge, right_edge = edges_array[right - 1], edges_array[right]
    nearest = np.where(np.abs(values - left_edge) <= np.abs(values - right_edge), left_edge, right_edge)
    return np.where(np.abs(values - nearest) <= tolerance, nearest, values)


def _binned(values: np.ndarray, edges: Sequence[float]) -> list[int]:
    """Counts of `values` in [below, each bin, above], bucketed as the dataset statistics bucket them:
    floor((x - first edge) / width), the last bin holding its right edge."""
    low, high = float(edges[0]), float(edges[-1])
    bins = len(edges) - 1
    inside = values[(values >= low) & (values <= high)]
    index = np.minimum(np.floor((inside - low) / ((high - low) / bins)), bins - 1).astype(np.int64)
    inner = np.bincount(index, minlength=bins)
    return [int((values < low).sum()), *[int(c) for c in inner], int((values > high).sum())]


# --- what training saw -------------------------------------------------------------------------------
def _dataset_of(mv: registry.ModelVersion, given: str | None, storage: Storage, project: str) -> str:
    """The dataset the model was trained on: given, else from the run that made it, else the training dataset
    its hsml record names (a feature view's, when it was written out)."""
    if given is not None:
        return given
    tables = [d for d in mv.datasets if d.get("kind") in (None, "table", "training_dataset")]
    hsml = layout.join(layout.model_dir(project, mv.name, mv.version), layout.HSML_RECORD)
    if not tables and storage.exists(hsml):
        record = storage.read_json(hsml)
        view, version = record.get("feature_view") or {}, record.get("training_dataset_version")
        if view and version:
            path = layout.join(layout.training_datasets_dir(project, view["name"], view["version"]), str(version),
                               layout.TRAINING_DATASET_RECORD)
            written = storage.read_json(path).get("dataset") if storage.exists(path) else None
            if written:
                return str(written)
    if not tables:
        named = ", ".join(str(d.get("name")) for d in mv.datasets) or "none"
        raise ServingError(f"model {mv.name} version {mv.version} names no table dataset it was trained on (its "
                           f"lineage: {named}); pass the training dataset: monitor(name, dataset='<dataset>'), or "
                           "export the model from a run that read the dataset with hopsml's readers")
    return str(tables[0]["name"])


def _vector_of(manifest: Mapping[str, Any], stats: Mapping[str, Any], split: str) -> dict[str, Any]:
    """A feature view's training dataset described as a fitted transform: its `features` vector holds the
    numeric columns the manifest names, already transformed by the view's functions, so served values are
    compared with them as they are (nothing standardized here)."""
    names = list(manifest.get("options", {}).get("features") or [])
    if not names:
        raise ServingError(f"training dataset {manifest.get('name')!r} does not name the columns of its features "
                           "vector (written before hopsml recorded them); create the training dataset again")
    columns = {c["name"]: c for c in stats.get("columns", [])}
    numeric = {}
    for name in names:
        seen = columns.get(name, {}).get("splits", {}).get(split, {})
        numeric[name] = {"mean": seen.get("mean", 0.0), "std": seen.get("std", 1.0), "standardized": False}
    return {"features": names, "numeric": numeric, "categorical": {}}


def _references(stats: Mapping[str, Any], transform: Mapping[str, Any], split: str) -> list[dict[str, Any]]:
    """One reference per model feature: its kind, the train histogram in the feature's space, and what the
    preprocessing check needs."""
    columns = {c["name"]: c for c in stats.get("columns", [])}
    out: list[dict[str, Any]] = []
    numeric = transform.get("numeric", {})
    categorical = transform.get("categorical", {})
    one_hot_of = {f"{n}_{i}": (n, i) for n, spec in categorical.items() if spec.get("one_hot")
                  for i in range(len(spec.get("categories", [])))}
    for feature in transform.get("features", []):
        if feature in numeric:
            spec = numeric[feature]
            entry = columns.get(feature, {}).get("splits", {}).get(split, {})
            histogram = entry.get("histogram")
            if not histogram:
                out.append({"name": feature, "kind": "numeric", "edges": None})
                continue
            raw = [float(e) for e in histogram["edges"]]
            mean, std = float(spec.get("mean", 0.0)), float(spec.get("std", 1.0)) or 1.0
            standardized = bool(spec.get("standardized"))
            edges = [(e - mean) / std for e in raw] if standardized else raw
            out.append({"name": feature, "kind": "numeric", "edges": edges, "raw_edges": raw,
                        "counts": [int(c) for c in histogram["counts"]], "standardized": standardized,
                        "mean": mean, "std": std})
        elif feature in categorical or feature in one_hot_of:
            column, index = one_hot_of.get(feature, (feature, None))
            categories = [str(c) for c in categorical[column].get("categories", [])]
            entry = columns.get(column, {}).get("splits", {}).get(split, {})
            top = {str(v): int(n) for v, n in entry.get("top", [])}
            rest = max(int(entry.get("count") or 0) - sum(top.values()), 0)
            unseen = [c for c in categories if c not in top]   # beyond the top values: the rest, evenly
            counts = [float(top.get(c, rest / len(unseen) if unseen else 0.0)) for c in categories]
            if index is None:
                out.append({"name": feature, "kind": "category", "categories": categories, "counts": counts})
            else:
                hot = counts[index]
                out.append({"name": feature, "kind": "one-hot", "column": column, "category": categories[index],
                            "categories": ["0", "1"], "counts": [sum(counts) - hot, hot]})
        else:
            out.append({"name": feature, "kind": "unknown"})
    return out


# --- what serving got --------------------------------------------------------------------------------
def _rows_of(text: str | None, names: Sequence[str] = ()) -> list[list[Any]]:
    """The feature rows of one logged request ('instances' rows or 'inputs' columns); [] if it has none. A row
    of named features (TF Serving's {"name": value} form) is put in the order of `names`, the training
    features."""
    if not text:
        return []
    try:
        body = json.loads(text)
    except ValueError:
        return []
    if isinstance(body, dict) and "instances" in body:
        rows = body["instances"]
    elif isinstance(body, dict) and "inputs" in body:
        rows = body["inputs"]
        if isinstance(rows, dict):
            columns = list(rows.values())
            rows = columns[0] if len(columns) == 1 else [list(r) for r in zip(*columns)]
    else:
        return []
    if not isinstance(rows, list):
        return []
    return [[r.get(n) for n in names] if isinstance(r, dict) else r if isinstance(r, list) else [r]
            for r in rows if isinstance(r, (list, dict, int, float))]


def _numbers(rows: list[list[Any]], column: int) -> np.ndarray:
    values = [r[column] for r in rows if column < len(r) and isinstance(r[column], (int, float))
              and not isinstance(r[column], bool)]
    return np.asarray(values, dtype=np.float64)


def _feature_report(ref: Mapping[str, Any], values: np.ndarray, psi_threshold: float,
                    ks_threshold: float) -> dict[str, Any]:
    out: dict[str, Any] = {"name": ref["name"], "kind": ref["kind"], "rows": int(values.size)}
    problems: list[str] = []
    if ref["kind"] == "numeric" and ref.get("edges"):
        edges = ref["edges"]
        # counted in the raw column's bins, as the statistics were: a standardized feature is mapped back
        raw = values * ref["std"] + ref["mean"] if ref.get("standardized") else values
        # a float32 feature misses the column's number by up to |value| * 2^-24 (times std once mapped back)
        tolerance = np.abs(values) * (ref["std"] if ref.get("standardized") else 1.0) * 2.0 ** -21
        served = _binned(_on_edges(_as_written(raw), ref["raw_edges"], tolerance), ref["raw_edges"])
        expected = [0, *ref["counts"], 0]
        out["histogram"] = {"edges": edges, "train": ref["counts"], "serving": served[1:-1],
                            "below": served[0], "above": served[-1]}
        if values.size:
            out["serving_mean"] = float(values.mean())
            out["in_training_range"] = 1.0 - (served[0] + served[-1]) / values.size
            if ref.get("standardized"):
                fits_raw = psi(expected, _binned(_as_written(values), ref["raw_edges"]))
                fits_transformed = psi(expected, served)
                if fits_raw < fits_transformed and fits_raw < psi_threshold:
                    problems.append(f"the values look untransformed: they fit the raw training histogram (PSI "
                                    f"{fits_raw:.3f}) better than the standardized one (PSI {fits_transformed:.3f});"
                                    f" serving must apply (x - {ref['mean']:.6g}) / {ref['std']:.6g} as training did")
    elif ref["kind"] in ("category", "one-hot"):
        size = len(ref["categories"])
        whole = values.size == 0 or bool(np.all(values == np.round(values)))
        if ref["kind"] == "one-hot":
            bad = values[(values != 0) & (values != 1)]
            if bad.size:
                problems.append(f"{bad.size} values are not 0 or 1 (e.g. {bad[0]:g}): the one-hot column of "
                                f"{ref['column']}={ref['category']!r} needs 0 or 1")
            served = [int((values == 0).sum()), int((values == 1).sum())]
            expected = list(ref["counts"])
        else:
            bad = values[(values != np.round(values)) | (values < -1) | (values >= size)]
            if bad.size or not whole:
                problems.append(f"{bad.size} values are not category indices (e.g. {bad[0]:g}): the transform "
                                f"indexes {size} categories as 0..{size - 1}, -1 for one it never saw")
            index = np.round(values).astype(np.int64)
            served = [int((index == i).sum()) for i in range(size)] + [int((index == -1).sum())]
            expected = [*ref["counts"], 0]
        out["histogram"] = {"categories": [*ref["categories"], *(["unknown"] if ref["kind"] == "category" else [])],
                            "train": expected, "serving": served}
    else:
        out["note"] = "no training statistics for this feature"
        out["preprocessing"] = {"ok": True, "problems": []}
        out["drift"] = False
        return out
    if values.size == 0:
        out.update(psi=None, ks=None, js=None, drift=False, note="no served values")
    else:
        out.update(psi=psi(expected, served), ks=ks(expected, served), js=js(expected, served))
        out["drift"] = bool(out["psi"] > psi_threshold or out["ks"] > ks_threshold)
    out["preprocessing"] = {"ok": not problems, "problems": problems}
    return out


def _density(values: np.ndarray, edges: Sequence[float], counts: Sequence[float]) -> np.ndarray:
    """The training histogram's density at each value (0 outside its range, beyond float32's precision)."""
    low, high = float(edges[0]), float(edges[-1])
    bins = len(edges) - 1
    width = (high - low) / bins or 1.0
    shares = _shares(counts) / width
    tolerance = (high - low + np.abs(values)) * 2.0 ** -21
    inside = (values >= low - tolerance) & (values <= high + tolerance)
    index = np.clip(np.floor((values - low) / width), 0, bins - 1).astype(np.int64)
    return np.where(inside, shares[index], 0.0)


def _untransformed_rows(references: Sequence[Mapping[str, Any]], rows: list[list[Any]]) -> int:
    """How many served rows are likelier under the raw training values than under the standardized ones,
    summed over the standardized features: clients that skip the transform, even when others do not (a
    mixture a per-feature comparison misses)."""
    standardized = [(i, ref) for i, ref in enumerate(references) if ref.get("standardized") and ref.get("edges")]
    usable = [r for r in rows if all(i < len(r) and isinstance(r[i], (int, float)) for i, _ in standardized)]
    if not standardized or not usable:
        return 0
    matrix = np.asarray([[float(r[i]) for i, _ in standardized] for r in usable], dtype=np.float64)
    as_raw = np.zeros(len(usable))
    as_standardized = np.zeros(len(usable))
    for column, (_, ref) in enumerate(standardized):
        as_raw += np.log(_density(matrix[:, column], ref["raw_edges"], ref["counts"]) + _DENSITY_FLOOR)
        as_standardized += np.log(_density(matrix[:, column], ref["edges"], ref["counts"]) + _DENSITY_FLOOR)
    return int((as_raw > as_standardized).sum())


# --- the report --------------------------------------------------------------------------------------
def monitor(serving_name: str, dataset: str | None = None, *, split: str = "train",
            psi_threshold: float = PSI_THRESHOLD, ks_threshold: float = KS_THRESHOLD, write: bool = True,
            version: int | None = None, since: datetime | None = None,
            settings: config.Settings | None = None) -> dict[str, Any]:
    """Compare the serving's logged inputs with the training dataset's statistics: drift per feature (PSI,
    KS, Jensen-Shannon), flags over the thresholds, and the training-serving preprocessing check. Returns the
    report and (with `write`) keeps it as `Serving/<name>/monitor.json`. `dataset` overrides the lineage;
    `version` looks at one model version's requests (a canary's) against its own training data, `since` at
    the requests logged from then on."""
    settings = settings or config.load()
    storage, project = Storage(settings.root), settings.project
    d = defs.read(storage, project, serving_name)
    from hopsml.serving.lifecycle import inference_log_path

    if not d.logs_inferences:
        raise ServingError(f"serving {serving_name!r} logs no inferences (inference_logging="
                           f"{d.inference_logging!r}, topic_name={d.topic_name!r}), so there is nothing to compare; "
                           f"turn it on: create_or_update({serving_name!r}, ..., inference_logging='ALL')")
    served = d.model_version if version is None else int(version)
    mv = registry.get_model(d.model_name, served, settings=settings)
    name = _dataset_of(mv, dataset, storage, project)
    ddir, manifest = ds.open_dataset(storage, project, name)
    if manifest.get("kind") == "training_dataset" and storage.exists(ddir.stats_json):
        stats = storage.read_json(ddir.stats_json)
        transform = _vector_of(manifest, stats, split)
    elif manifest.get("kind") == "table" and storage.exists(ddir.transform) and storage.exists(ddir.stats_json):
        stats, transform = storage.read_json(ddir.stats_json), storage.read_json(ddir.transform)
    else:
        raise ServingError(f"dataset {name!r} is not a table dataset with statistics and a fitted transform, nor a "
                           f"feature view's training dataset (kind {manifest.get('kind')!r}); monitoring compares "
                           "the features prepare_table or a feature view makes")
    if split not in stats.get("splits", []):
        raise ServingError(f"dataset {name!r} has no split {split!r} in its statistics; it has "
                           f"{', '.join(stats.get('splits', []))}")
    folder = inference_log_path(settings, project, serving_name)
    table = inference_log.read(folder, ["time", "model_version", "status", "inputs"])
    keep = [s == 200 and bool(t) and (version is None or v == served) and (since is None or w >= since)
            for s, t, v, w in zip(table.column("status").to_pylist(), table.column("inputs").to_pylist(),
                                  table.column("model_version").to_pylist(), table.column("time").to_pylist())]
    answered = [t for t, k in zip(table.column("inputs").to_pylist(), keep) if k]
    references = _references(stats, transform, split)
    width = len(references)
    names = [ref["name"] for ref in references]
    rows = [row for text in answered for row in _rows_of(text, names)]
    widths = sorted({len(r) for r in rows})
    problems: list[str] = []
    if rows and widths != [width]:
        problems.append(f"served rows have {', '.join(map(str, widths))} values; the training transform makes "
                        f"{width} features ({', '.join(transform.get('features', []))})")
    features = [_feature_report(ref, _numbers(rows, i), psi_threshold, ks_threshold)
                for i, ref in enumerate(references)]
    for feature in features:
        problems += [f"{feature['name']}: {p}" for p in feature["preprocessing"]["problems"]]
    untransformed = _untransformed_rows(references, rows)
    if untransformed and untransformed >= UNTRANSFORMED_SHARE * len(rows):
        problems.append(f"untransformed rows: {untransformed} of {len(rows)} served rows fit the raw training "
                        "values better than the standardized ones (over all standardized features): some clients "
                        "send inputs without the fitted transform")
    warnings = []
    if len(rows) < MIN_ROWS:
        warnings.append(f"only {len(rows)} served rows are logged (of {MIN_ROWS} or more for scores that mean "
                        "much); records reach the log every inference_log_roll_seconds and at stop")
    drifted = [f["name"] for f in features if f.get("drift")]
    report: dict[str, Any] = {
        "serving": serving_name, "model": {"name": d.model_name, "version": served},
        "dataset": {"name": name, "split": split, "rows": stats.get("rows", {}).get(split)},
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"), "inference_log": folder,
        "requests": len(answered), "rows": len(rows),
        "thresholds": {"psi": psi_threshold, "ks": ks_threshold},
        "drifted": drifted,
        "preprocessing": {"ok": not problems, "problems": problems},
        "warnings": warnings, "features": features, "traffic": inference_log.summary(folder),
    }
    if write:
        storage.write_json(layout.ServingDir.of(project, serving_name).monitor_report, report)
    for problem in problems:
        log.warning("serving %s: training-serving skew: %s", serving_name, problem)
    if drifted:
        log.warning("serving %s: drift in %s", serving_name, ", ".join(drifted))
    return report


def last_report(serving_name: str, settings: config.Settings | None = None) -> dict[str, Any] | None:
    """The report the last `monitor` wrote, None when there is none."""
    settings = settings or config.load()
    storage = Storage(settings.root)
    rel = layout.ServingDir.of(settings.project, serving_name).monitor_report
    return storage.read_json(rel) if storage.exists(rel) else None


def report_text(report: Mapping[str, Any]) -> str:
    """The report as the CLI prints it: one line per feature, then the flags."""
    lines = [f"serving {report['serving']} (model {report['model']['name']}:{report['model']['version']}) vs "
             f"dataset {report['dataset']['name']} [{report['dataset']['split']}]: {report['rows']} served rows "
             f"in {report['requests']} requests"]
    lines.append(f"{'feature':<24} {'kind':<9} {'PSI':>8} {'KS':>7} {'JS':>7}  flags")
    for f in report["features"]:
        flags = (["DRIFT"] if f.get("drift") else []) + (["PREPROCESSING"] if not f["preprocessing"]["ok"] else [])

        def num(value: Any) -> str:
            return "-" if value is None else f"{value:.3f}"

        lines.append(f"{f['name']:<24} {f['kind']:<9} {num(f.get('psi')):>8} {num(f.get('ks')):>7} "
                     f"{num(f.get('js')):>7}  {' '.join(flags)}")
    lines.append(f"drift (PSI > {report['thresholds']['psi']} or KS > {report['thresholds']['ks']}): "
                 f"{', '.join(report['drifted']) or 'none'}")
    problems = report["preprocessing"]["problems"]
    lines.append("preprocessing: " + ("matches training" if not problems else "MISMATCH"))
    lines += [f"  {p}" for p in problems]
    lines += [f"warning: {w}" for w in report.get("warnings", [])]
    return "\n".join(lines)
