"""Training-serving skew and drift: the inputs in a serving's inference log against the dataset the model was
trained on (the model's lineage names it; `prepare_table` wrote its `stats.json` and the fitted
`transform.json`, or a feature view wrote it as a training dataset version, whose `features` vector the
manifest names).

Every answered request counts, however it came: v1 `instances` rows (lists, or TF Serving's named-feature
objects), v1 `inputs` columns, and KServe v2 tensors (JSON or binary: the log holds a binary request's tensors
as JSON, and the rows the model got); one tensor of [rows, features] or one named tensor per feature.

Drift. Per model feature (the transform's `features`, in order): a number's train histogram is put into the
feature's space (standardized edges) and the served values are counted in the same bins, plus one below and
one above the training range: PSI, Kolmogorov-Smirnov and Jensen-Shannon; it drifts when PSI or KS is over its
threshold (0.2 and 0.15). A categorical feature is compared on its exact categories: the train split's count of
each (the statistics' top values when they hold them all, else counted in the split's Parquet files) against
the served count of each, plus an `unknown` bucket; categories training never saw are named with their counts
(from the raw values, where the log holds them); PSI over the categories (with the unknown bucket) flags drift,
and the chi-square test of the served counts against the train shares is reported beside it.

Preprocessing (`preprocessing_check`): where the log holds both what the client sent and what the model got
(the serving has a transformer), the training dataset's own fitted transform is applied to what was sent and
compared with what the model got, feature by feature; where it holds the model's inputs alone, standardized
values are read both ways against the training range. Besides: rows as wide as the transform's features,
category indices the transform knows (or -1), one-hot columns of 0 and 1. The report is JSON, returned and
written to `Serving/<name>/monitor.json` for the web view.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from hopsml import config, layout
from hopsml.clock import utc_now
from hopsml.data import dataset as ds
from hopsml.data.tables.transform import Transform
from hopsml.fs import Storage
from hopsml.model import registry
from hopsml.serving import definition as defs
from hopsml.serving.analysis.preprocessing_check import check as preprocessing_check
from hopsml.serving.analysis.preprocessing_check import fitted_transform
from hopsml.serving.definition import ServingError
from hopsml.serving.instance import inference_log

log = logging.getLogger(__name__)

PSI_THRESHOLD = 0.2
KS_THRESHOLD = 0.15
MIN_ROWS = 30          # fewer logged rows are reported, with a warning that they say little
_EPS = 1e-4            # a bin's smallest share in PSI, so an empty bin does not make it infinite
UNKNOWN = "unknown"          # the category bucket of what training never saw


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


def _category_counts(entry: Mapping[str, Any], column: str, categories: Sequence[str], counter: Any) -> list[int]:
    """The train split's count of each category: the statistics' top values when they hold every category
    (`distinct` of them), else `counter(column, size)`, which counts the split's rows."""
    top = {str(v): int(n) for v, n in entry.get("top", [])}
    if entry.get("distinct") is not None and len(top) >= int(entry["distinct"]):
        return [top.get(c, 0) for c in categories]
    return list(counter(column, len(categories)))


def _references(stats: Mapping[str, Any], transform: Mapping[str, Any], split: str,
                counter: object = None) -> list[dict[str, Any]]:
    """One reference per model feature: its kind, the train histogram in the feature's space (a category's
    exact counts), and what the preprocessing checks need. `counter(column, size)` counts a categorical
    column's categories in the split's rows when the statistics do not hold them all."""
    columns = {c["name"]: c for c in stats.get("columns", [])}
    out: list[dict[str, Any]] = []
    numeric = transform.get("numeric", {})
    categorical = transform.get("categorical", {})
    one_hot_of = {f"{n}_{i}": (n, i) for n, spec in categorical.items() if spec.get("one_hot")
                  for i in range(len(spec.get("categories", [])))}
    counted: dict[str, list[int]] = {}
    for feature in transform.get("features", []):
        if feature in numeric:
            spec = numeric[feature]
            entry = columns.get(feature, {}).get("splits", {}).get(split, {})
            histogram = entry.get("histogram")
            mean, std = float(spec.get("mean", 0.0)), float(spec.get("std", 1.0)) or 1.0
            standardized = bool(spec.get("standardized"))
            ref: dict[str, Any] = {"name": feature, "kind": "numeric", "source": feature, "edges": None,
                                   "standardized": standardized, "mean": mean, "std": std,
                                   "range": (entry["min"], entry["max"]) if entry.get("min") is not None
                                   and entry.get("max") is not None else None}
            if histogram:
                raw = [float(e) for e in histogram["edges"]]
                ref.update(edges=[(e - mean) / std for e in raw] if standardized else raw, raw_edges=raw,
                           counts=[int(c) for c in histogram["counts"]])
            out.append(ref)
        elif feature in categorical or feature in one_hot_of:
            column, index = one_hot_of.get(feature, (feature, None))
            categories = [str(c) for c in categorical[column].get("categories", [])]
            if column not in counted:
                entry = columns.get(column, {}).get("splits", {}).get(split, {})
                counted[column] = _category_counts(entry, column, categories, counter)
            counts = counted[column]
            if index is None:
                out.append({"name": feature, "kind": "category", "source": column, "categories": categories,
                            "counts": counts})
            else:
                hot = counts[index]
                out.append({"name": feature, "kind": "one-hot", "source": column, "column": column,
                            "category": categories[index], "categories": ["0", "1"],
                            "counts": [sum(counts) - hot, hot]})
        else:
            out.append({"name": feature, "kind": "unknown", "source": None})
    return out


def _split_counter(dataset: str, split: str, transform: Mapping[str, Any], settings: config.Settings) -> Any:
    """counter(column, size) for `_references`: a categorical column's category counts in the split's rows (its
    index column, or its one-hot columns), read with the dataset reader."""
    from hopsml.data.readers import reader

    def count(column: str, size: int) -> list[int]:
        one_hot = bool(transform.get("categorical", {}).get(column, {}).get("one_hot"))
        fields = [f"{column}_{i}" for i in range(size)] if one_hot else [column]
        totals = np.zeros(size, dtype=np.int64)
        for batch in reader(dataset, split=split, fields=fields, shuffle=False, settings=settings):
            if one_hot:
                totals += np.asarray([int(np.asarray(batch[f]).sum()) for f in fields], dtype=np.int64)
            else:
                index = np.asarray(batch[column]).astype(np.int64)
                totals += np.bincount(index[(index >= 0) & (index < size)], minlength=size)[:size]
        return [int(n) for n in totals]

    return count


# --- what serving got --------------------------------------------------------------------------------
def _flat(data: object) -> list[Any]:
    """A v2 tensor's data, flat in row-major order (it may come nested)."""
    if not isinstance(data, list):
        return [data]
    out: list[Any] = []
    stack: list[Any] = [iter(data)]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list):
            stack.append(iter(item))
        else:
            out.append(item)
    return out


_END = object()


def _in_order(named: Mapping[str, Any], names: Sequence[str], aliases: Mapping[str, str],
              partial: bool = False) -> list[Any]:
    """Named columns (or one row's named values) in the order of `names`, when they name them all (by field
    or by the header's own word in `aliases`); with `partial`, when they name any (None for the others, which
    then count as missing); else in their own order."""
    keyed = {aliases.get(str(k), str(k)): v for k, v in named.items()}
    if names and (all(n in keyed for n in names) or (partial and any(n in keyed for n in names))):
        return [keyed.get(n) for n in names]
    return list(named.values())


def _tensor_rows(tensors: list[Any], names: Sequence[str], aliases: Mapping[str, str]) -> list[list[Any]]:
    """The rows of KServe v2 input tensors: one tensor's rows ([rows, features] or [rows]), or several tensors
    (one per feature, [rows] or [rows, 1]) side by side, in the order of `names` when they name them."""
    columns: dict[str, list[list[Any]]] = {}
    for i, tensor in enumerate(tensors):
        if not isinstance(tensor, dict) or not isinstance(tensor.get("shape"), list):
            return []
        values, shape = _flat(tensor.get("data")), tensor["shape"]
        count = int(shape[0]) if shape and isinstance(shape[0], int) else 1
        width = len(values) // count if count else 0
        if count <= 0 or width * count != len(values):
            return []
        columns[str(tensor.get("name", f"input-{i}"))] = [values[r * width:(r + 1) * width] for r in range(count)]
    if len(columns) == 1:
        return next(iter(columns.values()))
    ordered = _in_order(columns, names, aliases)
    if len({len(c) for c in ordered}) != 1:
        return []
    return [[v for column in parts for v in column] for parts in zip(*ordered)]


def _rows_of(text: str | None, names: Sequence[str] = (), aliases: Mapping[str, str] | None = None
             ) -> list[list[Any]]:
    """The feature rows of one logged request: v1 'instances' rows, v1 'inputs' columns, or v2 input tensors;
    [] if it has none. Named features (TF Serving's {"name": value} rows, named columns or one v2 tensor per
    feature) are put in the order of `names`; `aliases` maps other words for them (a CSV header's) to those."""
    if not text:
        return []
    try:
        body = json.loads(text)
    except ValueError:
        return []
    aliases = aliases or {}
    if not isinstance(body, dict):
        return []
    if "instances" in body:
        rows = body["instances"]
    elif "inputs" in body:
        rows = body["inputs"]
        if isinstance(rows, list) and rows and all(isinstance(t, dict) and "datatype" in t for t in rows):
            return _tensor_rows(rows, names, aliases)
        if isinstance(rows, dict):
            columns = _in_order(rows, names, aliases)
            if len(columns) == 1:
                rows = columns[0]
            elif all(isinstance(c, list) for c in columns) and len({len(c) for c in columns}) == 1:
                rows = [list(r) for r in zip(*columns)]
            else:
                return []
    else:
        return []
    if not isinstance(rows, list):
        return []
    return [_in_order(r, names, aliases, partial=True) if isinstance(r, dict) else r if isinstance(r, list) else [r]
            for r in rows if isinstance(r, (list, dict, int, float, str))]


def _numbers(rows: list[list[Any]], column: int) -> np.ndarray:
    values = [r[column] for r in rows if column < len(r) and isinstance(r[column], (int, float))
              and not isinstance(r[column], bool)]
    return np.asarray(values, dtype=np.float64)


# --- the features ------------------------------------------------------------------------------------
def _chi_square(expected: Sequence[float], served: Sequence[float]) -> tuple[float, float | None]:
    """Pearson's chi-square of served counts against the train shares (each at least `_EPS`), and its p-value
    (None without scipy)."""
    observed = np.asarray(served, dtype=np.float64)
    shares = np.maximum(_shares(expected), _EPS)
    wanted = shares / shares.sum() * observed.sum()
    statistic = float(np.sum((observed - wanted) ** 2 / wanted))
    try:
        from scipy.stats import chi2
    except ImportError:
        return statistic, None
    return statistic, float(chi2.sf(statistic, max(len(observed) - 1, 1)))


def _categories_served(ref: Mapping[str, Any], values: Sequence[Any], sent: Sequence[Any]) -> tuple[Counter[str], int]:
    """Served count of each category name: the value the client sent where the log holds it (so a category
    training never saw is named), else the category of the index the model got; and the rows whose index is
    -1 with no sent value to name them."""
    named: Counter[str] = Counter()
    unnamed = 0
    categories = ref["categories"]
    for value, raw in zip(values, sent):
        if raw is not None:
            named[str(raw)] += 1
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value == round(value) \
                and 0 <= value < len(categories):
            named[categories[int(value)]] += 1
        elif value == -1:
            unnamed += 1
    return named, unnamed


def _feature_report(ref: Mapping[str, Any], values: np.ndarray, psi_threshold: float, ks_threshold: float,
                    got: Sequence[Any] = (), sent: Sequence[Any] = ()) -> dict[str, Any]:
    """One feature's drift and its own preprocessing problems. `values`: its served numbers; `got` and `sent`
    (categories): per row, the value the model got and the value the client sent (None where not logged)."""
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
    elif ref["kind"] == "one-hot":
        bad = values[(values != 0) & (values != 1)]
        if bad.size:
            problems.append(f"{bad.size} values are not 0 or 1 (e.g. {bad[0]:g}): the one-hot column of "
                            f"{ref['column']}={ref['category']!r} needs 0 or 1")
        served = [int((values == 0).sum()), int((values == 1).sum())]
        expected = list(ref["counts"])
        out["histogram"] = {"categories": ref["categories"], "train": expected, "serving": served}
    elif ref["kind"] == "category":
        categories, size = ref["categories"], len(ref["categories"])
        bad = values[(values != np.round(values)) | (values < -1) | (values >= size)]
        if bad.size:
            problems.append(f"{bad.size} values are not category indices (e.g. {bad[0]:g}): the transform "
                            f"indexes {size} categories as 0..{size - 1}, -1 for one it never saw")
        named, unnamed = _categories_served(ref, got, sent)
        known = set(categories)
        unseen = dict(sorted(((c, n) for c, n in named.items() if c not in known), key=lambda cn: (-cn[1], cn[0])))
        served = [named.get(c, 0) for c in categories] + [sum(unseen.values()) + unnamed]
        expected = [*ref["counts"], 0]
        out["rows"] = sum(served)
        out["histogram"] = {"categories": [*categories, UNKNOWN], "train": expected, "serving": served}
        out["unseen"] = unseen
        if unnamed:
            out["unknown_unnamed"] = unnamed   # index -1 with no sent value logged to name it
    else:
        out["note"] = "no training statistics for this feature"
        out["preprocessing"] = {"ok": True, "problems": []}
        out["drift"] = False
        return out
    if not sum(served):
        out.update(psi=None, ks=None, js=None, drift=False, note="no served values")
    else:
        out.update(psi=psi(expected, served), js=js(expected, served))
        if ref["kind"] == "category":   # categories have no order for KS: chi-square instead
            out["ks"] = None
            out["chi_square"], out["p_value"] = _chi_square(expected, served)
            out["drift"] = bool(out["psi"] > psi_threshold)
        else:
            out["ks"] = ks(expected, served)
            out["drift"] = bool(out["psi"] > psi_threshold or out["ks"] > ks_threshold)
    out["preprocessing"] = {"ok": not problems, "problems": problems}
    return out


# --- the report --------------------------------------------------------------------------------------
def _training(storage: Storage, project: str, name: str, split: str, settings: config.Settings
              ) -> tuple[dict[str, Any], dict[str, Any], Transform | None, list[dict[str, Any]]]:
    """(statistics, transform.json, the fitted Transform or None for a feature view's vector, references)."""
    ddir, manifest = ds.open_dataset(storage, project, name)
    fitted: Transform | None = None
    if manifest.get("kind") == "training_dataset" and storage.exists(ddir.stats_json):
        stats = storage.read_json(ddir.stats_json)
        transform = _vector_of(manifest, stats, split)
    elif manifest.get("kind") == "table" and storage.exists(ddir.transform) and storage.exists(ddir.stats_json):
        stats, transform = storage.read_json(ddir.stats_json), storage.read_json(ddir.transform)
        fitted = fitted_transform(transform)
    else:
        raise ServingError(f"dataset {name!r} is not a table dataset with statistics and a fitted transform, nor a "
                           f"feature view's training dataset (kind {manifest.get('kind')!r}); monitoring compares "
                           "the features prepare_table or a feature view makes")
    if split not in stats.get("splits", []):
        raise ServingError(f"dataset {name!r} has no split {split!r} in its statistics; it has "
                           f"{', '.join(stats.get('splits', []))}")
    references = _references(stats, transform, split, _split_counter(name, split, transform, settings))
    return stats, transform, fitted, references


def _in_memory_training(entry: Mapping[str, Any], name: str, split: str, settings: config.Settings
                        ) -> tuple[dict[str, Any], dict[str, Any], None, list[dict[str, Any]]]:
    """`_training` for a feature view's training dataset version taken in memory (featurestore/in_memory.py)."""
    from hopsml.featurestore import in_memory
    from hopsml.featurestore.store import FeatureStore

    stats, features = in_memory.training_reference(FeatureStore(settings), entry)
    if not stats or not features:
        raise ServingError(f"training dataset {name!r} (feature view {entry.get('view')} version "
                           f"{entry.get('view_version')}, training dataset version "
                           f"{entry.get('training_dataset_version')}) was taken in memory before hopsml kept its "
                           "statistics; train on a new split")
    if split not in stats.get("splits", []):
        raise ServingError(f"training dataset {name!r} has no split {split!r}; it has "
                           f"{', '.join(stats.get('splits', []))}")
    transform = _vector_of({"name": name, "options": {"features": features}}, stats, split)
    return stats, transform, None, _references(stats, transform, split)


def monitor(serving_name: str, dataset: str | None = None, *, split: str = "train",
            psi_threshold: float = PSI_THRESHOLD, ks_threshold: float = KS_THRESHOLD, write: bool = True,
            version: int | None = None, since: datetime | None = None,
            settings: config.Settings | None = None) -> dict[str, Any]:
    """Compare the serving's logged inputs with the training dataset: drift per feature (PSI, KS or
    chi-square, Jensen-Shannon), flags over the thresholds, categories training never saw, and the
    training-serving preprocessing check. Returns the report and (with `write`) keeps it as
    `Serving/<name>/monitor.json`. `dataset` overrides the lineage; `version` looks at one model version's
    requests (a canary's) against its own training data, `since` at the requests logged from then on."""
    settings = settings or config.load()
    storage, project = Storage(settings.root), settings.project
    d = defs.read(storage, project, serving_name)
    if not d.logs_inferences:
        raise ServingError(f"serving {serving_name!r} logs no inferences (inference_logging="
                           f"{d.inference_logging!r}, topic_name={d.topic_name!r}), so there is nothing to compare; "
                           f"turn it on: create_or_update({serving_name!r}, ..., inference_logging='ALL')")
    served = d.model_version if version is None else int(version)
    mv = registry.get_model(d.model_name, served, settings=settings)
    name = _dataset_of(mv, dataset, storage, project)
    in_memory = next((d for d in mv.datasets if d.get("name") == name and d.get("in_memory")), None)
    if in_memory is not None:   # a split the run took in memory: its statistics are in the view's record
        stats, transform, fitted, references = _in_memory_training(in_memory, name, split, settings)
    else:
        stats, transform, fitted, references = _training(storage, project, name, split, settings)
    folder = inference_log.inference_log_path(settings, project, serving_name)
    table = inference_log.read(folder, ["time", "model_name", "model_version", "status", "request", "inputs"])
    keep = [s == 200 and bool(t) and m == d.model_name and (version is None or v == served) and
            (since is None or w >= since)    # a server of several models logs the others' requests too
            for s, t, m, v, w in zip(table.column("status").to_pylist(), table.column("inputs").to_pylist(),
                                     table.column("model_name").to_pylist(), table.column("model_version").to_pylist(),
                                     table.column("time").to_pylist())]
    answered = [(r, t) for r, t, k in zip(table.column("request").to_pylist(), table.column("inputs").to_pylist(),
                                          keep) if k]
    width = len(references)
    names = [ref["name"] for ref in references]
    # with a transformer the log holds what clients sent (request) beside what the model got (inputs)
    sources = list(fitted.features) if fitted is not None and d.transformer else []
    aliases = {c.get("source_name", c["name"]): c["name"] for c in transform.get("columns", [])}
    rows: list[list[Any]] = []
    sent: list[list[Any] | None] = []
    for request, inputs in answered:
        got = _rows_of(inputs, names)
        raw = _rows_of(request, sources, aliases) if sources else []
        paired = len(raw) == len(got) and all(len(r) == len(sources) for r in raw)
        rows += got
        sent += raw if paired else [None] * len(got)
    widths = sorted({len(r) for r in rows})
    problems: list[str] = []
    if rows and widths != [width]:
        problems.append(f"served rows have {', '.join(map(str, widths))} values; the training transform makes "
                        f"{width} features ({', '.join(transform.get('features', []))})")
    features = []
    for k, ref in enumerate(references):
        position = sources.index(ref["source"]) if ref.get("source") in sources else -1
        column_sent = [s[position] if s is not None and position >= 0 else None for s in sent]
        features.append(_feature_report(ref, _numbers(rows, k), psi_threshold, ks_threshold,
                                        [r[k] if k < len(r) else None for r in rows], column_sent))
    for feature in features:
        problems += [f"{feature['name']}: {p}" for p in feature["preprocessing"]["problems"]]
    check = preprocessing_check(references, fitted, transform, rows, sent, width)
    for feature in features:
        found = check["features"].get(feature["name"])
        if found:
            feature["preprocessing"] = {"ok": False, "problems": [*feature["preprocessing"]["problems"],
                                                                  found["problem"]]}
    problems += check.pop("problems")
    warnings = []
    if len(rows) < MIN_ROWS:
        warnings.append(f"only {len(rows)} served rows are logged (of {MIN_ROWS} or more for scores that mean "
                        "much); records reach the log every InferenceLog.roll_seconds and at stop")
    drifted = [f["name"] for f in features if f.get("drift")]
    unseen = {f["name"]: f["unseen"] for f in features if f.get("unseen")}
    report: dict[str, Any] = {
        "serving": serving_name, "model": {"name": d.model_name, "version": served},
        "dataset": {"name": name, "split": split, "rows": stats.get("rows", {}).get(split)},
        "generated": utc_now(), "inference_log": folder,
        "requests": len(answered), "rows": len(rows),
        "thresholds": {"psi": psi_threshold, "ks": ks_threshold},
        "drifted": drifted, "unseen": unseen,
        "preprocessing": {"ok": not problems, "problems": problems, **check},
        "warnings": warnings, "features": features, "traffic": inference_log.summary(folder),
    }
    if write:
        storage.write_json(layout.ServingDir.of(project, serving_name).monitor_report, report)
    for problem in problems:
        log.warning("serving %s: training-serving skew: %s", serving_name, problem)
    if drifted:
        log.warning("serving %s: drift in %s", serving_name, ", ".join(drifted))
    for feature_name, counts in unseen.items():
        log.warning("serving %s: %s: categories training never saw: %s", serving_name, feature_name,
                    ", ".join(f"{c!r} ({n})" for c, n in counts.items()))
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
        flags += ["UNSEEN"] if f.get("unseen") else []

        def num(value: object) -> str:
            return "-" if value is None else f"{value:.3f}"

        lines.append(f"{f['name']:<24} {f['kind']:<9} {num(f.get('psi')):>8} {num(f.get('ks')):>7} "
                     f"{num(f.get('js')):>7}  {' '.join(flags)}")
    lines.append(f"drift (PSI > {report['thresholds']['psi']} or KS > {report['thresholds']['ks']}): "
                 f"{', '.join(report['drifted']) or 'none'}")
    for feature, counts in (report.get("unseen") or {}).items():
        lines.append(f"unseen categories of {feature}: " + ", ".join(f"{c!r} ({n})" for c, n in counts.items()))
    problems = report["preprocessing"]["problems"]
    lines.append("preprocessing: " + ("matches training" if not problems else "MISMATCH"))
    lines += [f"  {p}" for p in problems]
    lines += [f"warning: {w}" for w in report.get("warnings", [])]
    return "\n".join(lines)
