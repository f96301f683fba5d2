"""The training-serving preprocessing check of a serving's logged rows (see `monitor`, which reports it):
did serving do to the inputs what training did?

Where the log holds both what a client sent and what the model got (the serving has a transformer), the
training dataset's own fitted transform (`hopsml.data.tables.Transform`, the code that wrote the training rows,
rebuilt from `transform.json`: not a re-fit) is applied to the sent values and compared with the model's inputs
per feature, within float32's precision (also of the sent numbers, for a transformer working in float32): the
rows that differ, and each differing feature with an example.

Where only the model's inputs are logged, each standardized value is read both ways against the train split's
range of its column: it reads as raw when it lies in the range of the column before the transform while its
standardized reading (x * std + mean) lies outside it, and as standardized the other way round; a row with a
raw reading and no standardized one was sent untransformed. This asks only the fitted transform and the training
range, not a fit of histograms (which this replaced); a column whose raw and standardized ranges overlap so much
that both readings fit cannot tell, and says nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hopsml.data.tables.transform import Transform

UNTRANSFORMED_SHARE = 0.05  # this share of served rows read as untransformed is a preprocessing problem
# what the model got matches the transform of what was sent within these (a float32 feature vector holds 24 bits)
RTOL, ATOL = 1e-5, 1e-6
_LABEL = "__served_label__"   # the transform reads a label column; served rows have none


def fitted_transform(transform: Mapping[str, Any]) -> Transform:
    """The `Transform` that wrote the table dataset's rows, rebuilt from its `transform.json`, to apply to served
    values (without a label: the transform is given a column of nulls for it)."""
    label = (transform.get("label") or {}).get("column")
    types = {c["name"]: c.get("type") for c in transform.get("columns", [])}
    numeric, categorical = transform.get("numeric", {}), transform.get("categorical", {})
    sources = [name for name in types if name != label and (name in numeric or name in categorical)]
    dtypes: dict[str, str] = {}
    for feature in transform.get("features", []):
        dtypes[feature] = "float64" if feature in numeric else "int32" if feature in categorical else "float32"
    dtypes.update({"label": "float64", "features": "float32"})
    fills = {name: (int(round(value)) if types.get(name) in ("long", "boolean") and name in numeric else value)
             for name, value in ((transform.get("missing") or {}).get("fill") or {}).items() if name in sources}
    return Transform(features=sources, label=_LABEL, label_kind="double",
                     one_hot=any(spec.get("one_hot") for spec in categorical.values()),
                     scale={n: (float(spec["mean"]), float(spec["std"])) if spec.get("standardized") else None
                            for n, spec in numeric.items()},
                     categories={n: [str(c) for c in spec.get("categories", [])] for n, spec in categorical.items()},
                     dtypes=dtypes, fills=fills)


def number(value: object) -> float:
    """A served value as a float: NaN for what is not a number (a string, a list, None)."""
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, (int, float)) else math.nan


def as_matrix(rows: Sequence[Sequence[Any]], width: int) -> np.ndarray:
    """Rows as floats (NaN for what is not a number, or missing)."""
    out = np.full((len(rows), width), np.nan)
    for i, row in enumerate(rows):
        for j, value in enumerate(row[:width]):
            out[i, j] = number(value)
    return out


def _applied(fitted: Transform, transform: Mapping[str, Any], sent: Sequence[Sequence[Any]],
             single: bool = False) -> np.ndarray:
    """The fitted transform of the sent rows (the training columns in order), as the model's features: a
    [rows, features] matrix, NaN where the transform leaves a value missing. With `single`, the sent numbers
    are first rounded to float32, as a transformer working in float32 has them."""
    import pyarrow as pa

    numeric = transform.get("numeric", {})
    columns: dict[str, Any] = {}
    for j, name in enumerate(fitted.features):
        values = [row[j] if j < len(row) else None for row in sent]
        if name in numeric:
            numbers = np.asarray([number(v) if v is not None else np.nan for v in values], dtype=np.float64)
            if single:
                numbers = numbers.astype(np.float32).astype(np.float64)
            columns[name] = pa.array(numbers, pa.float64(), from_pandas=True)
        else:
            columns[name] = pa.array([None if v is None else str(v) for v in values], pa.string())
    columns[_LABEL] = pa.nulls(len(sent), pa.float64())
    table = fitted(pa.RecordBatch.from_pydict(columns))
    features = transform.get("features", [])
    out = np.full((len(sent), len(features)), np.nan)
    for k, feature in enumerate(features):
        out[:, k] = np.asarray(table.column(feature).to_numpy(zero_copy_only=False), dtype=np.float64)
    return out


def _how(ref: Mapping[str, Any]) -> str:
    """What the fitted transform does to a feature, for messages."""
    if ref["kind"] == "numeric":
        return (f"(x - {ref['mean']:.6g}) / {ref['std']:.6g}" if ref.get("standardized") else "x as a number")
    if ref["kind"] == "one-hot":
        return f"1 where {ref['column']} is {ref['category']!r}, else 0"
    return "the train split's index of the category (-1 for one it never saw)"


def _shown(value: object) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.6g}"
    return repr(value)


def _transform_check(references: Sequence[Mapping[str, Any]], fitted: Transform, transform: Mapping[str, Any],
                     sent: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """Apply the training dataset's fitted transform to what clients sent and compare it with what the model
    got, feature by feature: the rows that differ, and per differing feature how many with an example."""
    width = len(references)
    expected = _applied(fitted, transform, sent)
    expected32 = _applied(fitted, transform, sent, single=True)
    served = as_matrix(got, width)
    comparable = np.isfinite(expected)
    close = (np.isclose(served, expected, rtol=RTOL, atol=ATOL)
             | np.isclose(served, expected32, rtol=RTOL, atol=ATOL))
    differs = comparable & ~close
    sources = list(fitted.features)
    features: dict[str, dict[str, Any]] = {}
    for k, ref in enumerate(references):
        count = int(differs[:, k].sum())
        if not count:
            continue
        row = int(np.argmax(differs[:, k]))
        source = ref.get("source")
        position = sources.index(source) if source in sources else -1
        sent_value = sent[row][position] if 0 <= position < len(sent[row]) else None
        got_value = got[row][k] if k < len(got[row]) else None
        features[ref["name"]] = {
            "rows": count, "sent": sent_value, "got": got_value, "expected": float(expected[row, k]),
            "problem": f"feature {ref['name']!r}: served {_shown(sent_value)} became {_shown(got_value)} (the "
                       f"transform gives {expected[row, k]:.6g}) in {count} of {len(got)} rows: the serving's "
                       f"transformer does not apply the fitted transform ({_how(ref)})"}
    return {"method": "transform", "rows": len(got), "rows_differing": int(differs.any(axis=1).sum()),
            "features": features}


def _range_check(references: Sequence[Mapping[str, Any]], rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """For model inputs alone (no transformer): the rows whose standardized features read as values before
    the transform. A value reads as raw when it lies in the column's train range ([min, max] before the
    transform) while its standardized reading (x * std + mean) does not, and as standardized the other way
    round; a row with a raw reading and no standardized one was sent untransformed."""
    checked = [(k, ref) for k, ref in enumerate(references)
               if ref["kind"] == "numeric" and ref.get("standardized") and ref.get("range")]
    out: dict[str, Any] = {"method": "ranges", "rows": len(rows), "rows_differing": 0, "features": {}}
    if not checked or not rows:
        return out
    matrix = as_matrix(rows, len(references))
    as_raw = np.zeros((len(rows), len(checked)), dtype=bool)
    as_standardized = np.zeros_like(as_raw)
    for c, (k, ref) in enumerate(checked):
        low, high = (float(v) for v in ref["range"])
        slack = (abs(low) + abs(high)) * 2.0 ** -20 + 1e-12   # a float32 value on the edge, mapped back
        values, back = matrix[:, k], matrix[:, k] * ref["std"] + ref["mean"]
        inside = (values >= low - slack) & (values <= high + slack)
        back_inside = (back >= low - slack) & (back <= high + slack)
        as_raw[:, c], as_standardized[:, c] = inside & ~back_inside, back_inside & ~inside
    untransformed = as_raw.any(axis=1) & ~as_standardized.any(axis=1)
    out["rows_differing"] = int(untransformed.sum())
    for c, (k, ref) in enumerate(checked):
        hits = untransformed & as_raw[:, c]
        if not hits.any():
            continue
        row = int(np.argmax(hits))
        value = float(matrix[row, k])
        low, high = ref["range"]
        out["features"][ref["name"]] = {
            "rows": int(hits.sum()), "got": value, "as_standardized": value * ref["std"] + ref["mean"],
            "problem": f"feature {ref['name']!r}: {int(hits.sum())} of {len(rows)} served rows read as untransformed,"
                       f" e.g. {value:.6g}: inside the column's training range before the transform ({low:.6g}.."
                       f"{high:.6g}), while as a standardized value it means {value * ref['std'] + ref['mean']:.6g},"
                       f" outside it; serving must apply {_how(ref)} as training did"}
    return out



def check(references: Sequence[Mapping[str, Any]], fitted: Transform | None, transform: Mapping[str, Any],
                   rows: Sequence[Sequence[Any]], sent: Sequence[Sequence[Any] | None], width: int
                   ) -> dict[str, Any]:
    """The preprocessing check of the rows (see the module text): the fitted transform of what was sent against
    what the model got where the log holds both, the range reading of the other rows; with the problems."""
    whole = [i for i, r in enumerate(rows) if len(r) == width]
    paired = [i for i in whole if sent[i] is not None]
    alone = [i for i in whole if sent[i] is None]
    out: dict[str, Any] = {"rows_checked": 0, "rows_differing": 0, "share_differing": None, "method": [],
                           "features": {}, "problems": []}
    parts = []
    if paired and fitted is not None:
        parts.append(_transform_check(references, fitted, transform, [sent[i] or [] for i in paired],
                                      [rows[i] for i in paired]))
    if alone:
        parts.append(_range_check(references, [rows[i] for i in alone]))
    for part in parts:
        out["method"].append(part["method"])
        out["rows_checked"] += part["rows"]
        out["rows_differing"] += part["rows_differing"]
        for feature, found in part["features"].items():
            out["features"].setdefault(feature, found)
        differing, checked = part["rows_differing"], part["rows"]
        if part["method"] == "transform" and differing:
            out["problems"].append(f"the fitted transform of what clients sent differs from what the model got in "
                                   f"{differing} of {checked} rows ({differing / checked:.1%})")
            out["problems"] += [found["problem"] for found in part["features"].values()]
        elif part["method"] == "ranges" and differing and differing >= UNTRANSFORMED_SHARE * checked:
            out["problems"].append(f"untransformed rows: {differing} of {checked} served rows hold values as they "
                                   "were before the fitted transform (read as standardized, they fall outside the "
                                   "training range): some clients send inputs without the fitted transform")
            out["problems"] += [found["problem"] for found in part["features"].values()]
    if out["rows_checked"]:
        out["share_differing"] = out["rows_differing"] / out["rows_checked"]
    return out


