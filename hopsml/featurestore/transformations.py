"""Transformation functions, as the hopsworks SDK has them: the built-ins (`min_max_scaler`, `standard_scaler`,
`robust_scaler`, `label_encoder`, `one_hot_encoder`) and user functions made with `@udf`, bound to features by a
call (`min_max_scaler("amount")`), fitted on a training split and applied the same way to training, batch and
(later) serving data.

The built-ins compute with the table prep's own primitives (`hopsml.data.tables.transform`: the scaling and
the category indices its shards hold), so a feature view and `prepare_table` give the same numbers. Their
fitted statistics are stored with the training dataset version that fitted them. Output columns are named
as Hopsworks names them: `<function>_<feature>_` (one output), `<function>_<feature>_<i>` (several).
"""

from __future__ import annotations

import base64
import importlib
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hopsml import layout
from hopsml.data.tables import transform as primitives
from hopsml.errors import FeatureStoreError
from hopsml.featurestore.seams import ProjectStore

if TYPE_CHECKING:
    import pandas as pd

BUILTINS = ("min_max_scaler", "standard_scaler", "robust_scaler", "label_encoder", "one_hot_encoder")
_NUMERIC = {"min_max_scaler", "standard_scaler", "robust_scaler"}

# What a @udf says it returns, as hsfs takes it: a Python type or its name (float, "float"), or a list of them for a
# function that returns several columns.
ReturnType = type | str | Sequence[type | str]


@dataclass(frozen=True)
class TransformationFunction:
    """A function over features, with the statistics it was fitted on (see the module docstring)."""

    name: str
    features: tuple[str, ...] = ()
    fn: Callable[..., Any] | None = None      # a user function; None for a built-in
    return_type: ReturnType = float
    drop: tuple[str, ...] = ()                # input features the output replaces
    statistics: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    home: tuple[ProjectStore, int | None] | None = field(default=None, compare=False, repr=False)   # fs.create_...

    def __call__(self, *features: str) -> TransformationFunction:
        """This function bound to `features` (its inputs, in order)."""
        if not features:
            raise FeatureStoreError(f"{self.name}() takes the feature(s) it transforms, e.g. {self.name}('amount')")
        return replace(self, features=tuple(f.lower() for f in features),
                       drop=tuple(f.lower() for f in features) if self.drop == ("*",) else self.drop)

    def alias(self, *names: str) -> TransformationFunction:
        """Name the output columns yourself."""
        return replace(self, aliases=tuple(names))

    @property
    def needs_statistics(self) -> bool:
        return self.fn is None or "statistics" in inspect.signature(self.fn).parameters

    @property
    def output_column_names(self) -> list[str]:
        if self.aliases:
            return list(self.aliases)
        base = f"{self.name}_{'_'.join(self.features)}_"
        if self.name == "one_hot_encoder":
            categories = self._categories()
            return [f"{base}{i}" for i in range(len(categories))]
        if isinstance(self.return_type, (list, tuple)) and len(self.return_type) > 1:
            return [f"{base}{i}" for i in range(len(self.return_type))]
        return [base]

    @property
    def hopsworks_udf(self) -> TransformationFunction:
        """hsfs 4's view of a view's function (`tf.hopsworks_udf.function_name`, ...): the function itself."""
        return self

    @property
    def function_name(self) -> str:
        return self.name

    @property
    def transformation_features(self) -> list[str]:
        return list(self.features)

    @property
    def transformation_statistics(self) -> TransformationStatistics:
        """The fitted statistics as hsfs 4 gives them: `.feature.max` by the function's argument name (the
        built-ins' argument is `feature`), each with hsfs's attribute names; `["amount"]` is the recorded dict of
        feature `amount`."""
        return TransformationStatistics(dict(zip(self._arguments(), self.features)), self.statistics)

    def _arguments(self) -> list[str]:
        """The function's argument names, in the order of its features (hsfs keys statistics by these)."""
        if self.fn is None:
            return ["feature"]
        params = [p for p in inspect.signature(self.fn).parameters if p != "statistics"]
        return params[:len(self.features)] + list(self.features[len(params):])

    def _categories(self) -> list[Any]:
        values = self.statistics.get(self.features[0], {}).get("unique_values") if self.features else None
        if values is None:
            raise FeatureStoreError(f"{self.name}({', '.join(self.features)}) is not fitted yet: its outputs come "
                                    "from the training split's categories")
        return list(values)

    def fit(self, frame: pd.DataFrame) -> TransformationFunction:
        """Fitted on `frame` (the training split): the statistics of each input feature."""
        if not self.needs_statistics:
            return self
        missing = [f for f in self.features if f not in frame.columns]
        if missing:
            raise FeatureStoreError(f"{self.name} transforms {missing[0]!r}, which the feature view does not "
                                    f"select (it has {', '.join(frame.columns)})")
        return replace(self, statistics={f: describe(frame[f]) for f in self.features})

    def apply(self, frame: pd.DataFrame) -> pd.DataFrame:
        """`frame` with this function's output columns (and without the inputs it drops)."""
        import pandas as pd

        if self.needs_statistics and not self.statistics:
            raise FeatureStoreError(f"{self.name}({', '.join(self.features)}) needs statistics: fit it on a training "
                                    "split first (train_test_split, training_data or init_batch_scoring)")
        inputs = [frame[f] for f in self.features]
        outputs = self._run(inputs)
        names = self.output_column_names
        if isinstance(outputs, pd.DataFrame):
            if len(outputs.columns) != len(names):
                raise FeatureStoreError(f"{self.name} returned {len(outputs.columns)} columns, its outputs are named "
                                        f"{names}")
            columns = dict(zip(names, (outputs[c].to_numpy() for c in outputs.columns)))
        else:
            columns = {names[0]: pd.Series(outputs).to_numpy()}
        out = frame.drop(columns=[f for f in self.drop if f in frame.columns])
        return out.assign(**columns)

    def _run(self, inputs: list[pd.Series]) -> Any:
        if self.fn is not None:
            kwargs = {}
            if "statistics" in inspect.signature(self.fn).parameters:
                kwargs["statistics"] = self.transformation_statistics
            return self.fn(*inputs, **kwargs)
        return _builtin(self.name, inputs[0], self.statistics[self.features[0]])

    def to_dict(self) -> dict[str, Any]:
        """What a training dataset version stores of it (a user function by module and name, or pickled)."""
        record: dict[str, Any] = {"name": self.name, "features": list(self.features), "drop": list(self.drop),
                                  "statistics": {name: dict(values) for name, values in self.statistics.items()},
                                  "aliases": list(self.aliases),
                                  "output_column_names": self.output_column_names if self.statistics or
                                  not self.needs_statistics else []}
        if self.fn is not None:
            record["function"] = _reference(self.fn)
            record["return_type"] = getattr(self.return_type, "__name__", str(self.return_type))
        return record

    # --- kept in the feature store by name (hsfs' fs.create_transformation_function(udf).save()) ---------------
    def saved_in(self, store: ProjectStore, version: int | None = None) -> TransformationFunction:
        """This function as `fs.create_transformation_function` gives it: `save()` keeps it in `store`."""
        return replace(self, home=(store, version))

    def _home(self) -> tuple[ProjectStore, str, int | None]:
        if self.home is None:
            raise FeatureStoreError(f"transformation function {self.name!r} belongs to no feature store: make it "
                                    "with fs.create_transformation_function(fn) first")
        store, version = self.home
        return store, layout.join(layout.feature_store_dir(store.project), layout.TRANSFORMATION_FUNCTIONS), version

    def save(self) -> TransformationFunction:
        """Keep the function (its code found again by module and name) under its name and the next version (or
        the one given), so that `fs.get_transformation_function(name, version)` returns it."""
        if self.fn is None:
            raise FeatureStoreError(f"{self.name} is a built-in: fs.get_transformation_function({self.name!r}) "
                                    "finds it without saving")
        store, folder, version = self._home()
        if version is None:
            taken = [int(e.name[len(self.name) + 1:-5]) for e in store.storage.walk(folder, recursive=False)
                     if e.name.startswith(self.name + "_") and e.name[len(self.name) + 1:-5].isdigit()] \
                if store.storage.exists(folder) else []
            version = max(taken, default=0) + 1
        record = {"name": self.name, "version": int(version),
                  "function": {**self.to_dict(), "params": list(getattr(self, "params", ()))}}
        store.storage.write_json(layout.join(folder, f"{self.name}_{int(version)}.json"), record)
        object.__setattr__(self, "home", (store, int(version)))
        return self

    def delete(self) -> None:
        """Remove the saved function from its feature store."""
        store, folder, version = self._home()
        if version is None:
            raise FeatureStoreError(f"transformation function {self.name!r} is not saved")
        store.storage.delete(layout.join(folder, f"{self.name}_{int(version)}.json"))

    @property
    def version(self) -> int | None:
        """The saved version (None for a function not saved in a feature store)."""
        return None if self.home is None else self.home[1]

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> TransformationFunction:
        """A transformation function again from its record (a built-in by name, a @udf by its module); an unknown name
        is an error."""
        fn = _resolve(record["function"]) if record.get("function") else None
        if fn is None and record["name"] not in BUILTINS:
            raise FeatureStoreError(f"unknown transformation function {record['name']!r}")
        if record.get("params") and not record.get("features"):   # a saved @udf, not yet bound to features
            return _Unbound(record["name"], (), fn, float, tuple(record.get("drop", ())), {},
                            tuple(record.get("aliases") or ()), params=tuple(record["params"]))
        return cls(record["name"], tuple(record.get("features", ())), fn, float, tuple(record.get("drop", ())),
                   dict(record.get("statistics") or {}), tuple(record.get("aliases") or ()))


class FeatureStatistics:
    """One feature's fitted statistics under hsfs's names (`FeatureTransformationStatistics`): `feature_name`,
    `count`, `num_non_null_values`, `num_null_values`, `completeness`, `min`, `max`, `sum`, `mean`, `stddev`,
    `percentiles`, `unique_values`, `approx_num_distinct_values`; None where not fitted or not numeric."""

    def __init__(self, feature_name: str, record: Mapping[str, Any]) -> None:
        present, missing = record.get("count"), record.get("missing")
        self.feature_name = feature_name
        self.num_non_null_values, self.num_null_values = present, missing
        self.count = None if present is None else present + (missing or 0)
        self.completeness = present / self.count if present is not None and self.count else None
        self.min, self.max, self.mean = record.get("min"), record.get("max"), record.get("mean")
        self.stddev, self.percentiles = record.get("stddev"), record.get("percentiles")
        self.sum = self.mean * present if self.mean is not None and present is not None else None
        self.unique_values = record.get("unique_values")
        self.approx_num_distinct_values = None if self.unique_values is None else len(self.unique_values)

    def __repr__(self) -> str:
        return f"FeatureStatistics({self.feature_name!r}, min={self.min}, max={self.max}, mean={self.mean})"


class TransformationStatistics:
    """A function's statistics as hsfs's `TransformationStatistics`: one attribute per argument of the function
    (`statistics.feature.max` in the built-ins, `statistics.amount.mean` in `def f(amount, statistics=...)`),
    whatever feature it is bound to. `stats["<feature>"]` is hopsml's recorded dict of that feature."""

    def __init__(self, arguments: Mapping[str, str], statistics: Mapping[str, Mapping[str, Any]]) -> None:
        self._arguments = dict(arguments)
        self._statistics = {name: dict(values) for name, values in statistics.items()}
        for argument, feature in self._arguments.items():
            setattr(self, argument, FeatureStatistics(feature, self._statistics.get(feature, {})))

    def __getattr__(self, name: str) -> FeatureStatistics:
        # a feature's own name works too where it differs from the argument's (only reached when no argument has it)
        if not name.startswith("_") and name in self.__dict__.get("_statistics", {}):
            return FeatureStatistics(name, self._statistics[name])
        raise AttributeError(f"no statistics for {name!r}: the function's arguments are "
                             f"{', '.join(self.__dict__.get('_arguments', {})) or 'none'}")

    def __getitem__(self, feature: str) -> dict[str, Any]:
        return self._statistics[feature]

    def __contains__(self, feature: object) -> bool:
        return feature in self._statistics

    def __repr__(self) -> str:
        return f"TransformationStatistics({', '.join(f'{a}={f!r}' for a, f in self._arguments.items())})"


def apply_all(frame: pd.DataFrame, functions: Sequence[TransformationFunction]) -> pd.DataFrame:
    """`frame` through each function in turn (training data, batch data and feature vectors alike)."""
    for function in functions:
        frame = function.apply(frame)
    return frame


def describe(values: pd.Series) -> dict[str, Any]:
    """The statistics a transformation may read of one feature: min, max, mean, stddev, the 100 percentiles
    (numbers) and the sorted unique values (any type)."""
    import numpy as np
    import pandas as pd

    present = values.dropna()
    out: dict[str, Any] = {"count": int(present.size), "missing": int(values.size - present.size)}
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        numbers = present.to_numpy(dtype=np.float64)
        if numbers.size:
            out.update(min=float(numbers.min()), max=float(numbers.max()), mean=float(numbers.mean()),
                       stddev=float(numbers.std()),
                       percentiles=[float(p) for p in np.percentile(numbers, np.arange(100))])
    uniques = present.unique()
    if uniques.size <= 100_000:
        out["unique_values"] = sorted((v.item() if hasattr(v, "item") else v) for v in uniques)
    return out


def _builtin(name: str, values: pd.Series, stats: Mapping[str, Any]) -> Any:
    """A built-in transformation, with the table prep's primitives."""
    import pandas as pd
    import pyarrow as pa

    column = pa.array(values, from_pandas=True)
    if name in _NUMERIC:
        if "mean" not in stats:
            raise FeatureStoreError(f"{name} needs numbers; its training values were not numeric")
        center, spread = {"min_max_scaler": (stats["min"], stats["max"] - stats["min"]),
                          "standard_scaler": (stats["mean"], stats["stddev"]),
                          "robust_scaler": (stats["percentiles"][49],
                                            stats["percentiles"][74] - stats["percentiles"][24])}[name]
        return pd.Series(primitives.scaled(column, center, spread).to_numpy(zero_copy_only=False), index=values.index)
    categories = list(stats.get("unique_values") or [])
    if pa.types.is_null(column.type) and categories:   # only missing values (one vector's): typed as the categories
        column = column.cast(pa.array(categories).type)
    index = primitives.category_index(column, categories, missing=None)
    if name == "label_encoder":
        return pd.Series(index.to_pandas(), index=values.index)
    hot = primitives.one_hot(index, len(categories))
    return pd.DataFrame({str(c): hot[i].to_numpy(zero_copy_only=False).astype(bool)
                         for i, c in enumerate(categories)}, index=values.index)


def udf(return_type: ReturnType, drop: str | Sequence[str] | None = None, mode: str = "default"
        ) -> Callable[[Callable[..., Any]], TransformationFunction]:
    """Make `fn` a transformation function (`@udf(float)`); `drop` names the inputs its output replaces."""
    if mode not in ("default", "pandas", "python"):
        raise FeatureStoreError(f"udf mode {mode!r}: 'default', 'pandas' or 'python'")

    def wrap(fn: Callable[..., Any]) -> TransformationFunction:
        dropped = (drop,) if isinstance(drop, str) else tuple(drop or ())
        params = [p for p in inspect.signature(fn).parameters if p != "statistics"]
        # drop names the function's parameters; once bound, those become the features in their place
        return _Unbound(fn.__name__, (), fn, return_type, dropped, {}, (), params=tuple(params))

    return wrap


@dataclass(frozen=True)
class _Unbound(TransformationFunction):
    """A user function before its features are given: `drop` names its parameters."""

    params: tuple[str, ...] = ()

    def __call__(self, *features: str) -> TransformationFunction:
        bound = tuple(f.lower() for f in features)
        if len(bound) != len(self.params):
            raise FeatureStoreError(f"{self.name} takes {len(self.params)} features ({', '.join(self.params)}), "
                                    f"got {len(bound)}")
        by_param = dict(zip(self.params, bound))
        return TransformationFunction(self.name, bound, self.fn, self.return_type,
                                      tuple(by_param.get(d, d) for d in self.drop), {}, self.aliases)


def _reference(fn: Callable[..., Any]) -> dict[str, str]:
    module = getattr(fn, "__module__", None)
    if module and module != "__main__" and "<locals>" not in fn.__qualname__:
        return {"module": module, "qualname": fn.__qualname__}
    from pyspark import cloudpickle

    return {"pickled": base64.b64encode(cloudpickle.dumps(fn)).decode("ascii")}


def _resolve(reference: Mapping[str, str]) -> Callable[..., Any]:
    if "pickled" in reference:
        import pickle

        return pickle.loads(base64.b64decode(reference["pickled"]))
    target: Any = importlib.import_module(reference["module"])
    for part in reference["qualname"].split("."):
        target = getattr(target, part)
    return getattr(target, "fn", target) if isinstance(target, TransformationFunction) else target


def _make_builtin(name: str) -> TransformationFunction:
    return TransformationFunction(name, drop=("*",))


min_max_scaler = _make_builtin("min_max_scaler")
standard_scaler = _make_builtin("standard_scaler")
robust_scaler = _make_builtin("robust_scaler")
label_encoder = _make_builtin("label_encoder")
one_hot_encoder = _make_builtin("one_hot_encoder")


def builtins() -> list[TransformationFunction]:
    return [min_max_scaler, standard_scaler, robust_scaler, label_encoder, one_hot_encoder]


# --- feature vectors at serving time: the built-ins over plain Python values ---------------------------------
# A vector's column as pandas types it (vectors.shaped): "int" (int64), "int32", "float" (float64, None for
# missing), "bool", "object" (booleans and None), "str" (text and None) or "none" (only None).
_NUMBERS = ("int", "int32", "float", "bool", "object", "none")


@dataclass(frozen=True)
class RowStep:
    """A fitted built-in over one column of plain Python values: the values and kinds `apply` gives on a pandas
    frame, value for value. `run` answers None where only the pandas path knows the answer (it then runs)."""

    function: TransformationFunction
    names: tuple[str, ...]                  # its output columns
    center: float = 0.0
    spread: float = 1.0
    categories: Mapping[Any, int] = field(default_factory=dict)
    category_type: type | None = None       # the one Python type of the categories (None: there are none)

    def run(self, values: list[Any], kind: str) -> list[tuple[list[Any], str]] | None:
        """(output values, their kind) per output column, for the input column `values` of `kind`."""
        name = self.function.name
        if name in _NUMERIC:
            if kind not in _NUMBERS:
                return None
            return [([_scaled(v, self.center, self.spread) for v in values], "float")]
        found = self.categories
        if found and not _matches(kind, self.category_type):
            return None
        index = [None if v is None else found.get(v, -1) for v in values]
        if name == "label_encoder":
            if None in index:   # a missing value: pandas makes the column float
                return [([None if i is None else float(i) for i in index], "float")]
            return [(index, "int32")]
        return [([i == at for i in index], "bool") for at in range(len(found))]


def row_steps(functions: Sequence[TransformationFunction]) -> list[RowStep] | None:
    """`functions` as steps over plain values, or None when one of them is not a fitted built-in of one feature
    (a user function takes pandas Series): then vectors are transformed on pandas."""
    steps = []
    for function in functions:
        step = _row_step(function)
        if step is None:
            return None
        steps.append(step)
    return steps


def _row_step(function: TransformationFunction) -> RowStep | None:
    """The step of one function, with what `_builtin` reads of its statistics; None where `apply` would fail."""
    if function.fn is not None or function.name not in BUILTINS or len(function.features) != 1:
        return None
    stats = function.statistics.get(function.features[0])
    if not stats:
        return None
    try:
        names = tuple(function.output_column_names)
    except FeatureStoreError:
        return None
    if not names:
        return None
    if function.name in _NUMERIC:
        try:
            if "mean" not in stats:
                return None
            if function.name == "min_max_scaler":
                center, spread = stats["min"], stats["max"] - stats["min"]
            elif function.name == "standard_scaler":
                center, spread = stats["mean"], stats["stddev"]
            else:
                center, spread = stats["percentiles"][49], stats["percentiles"][74] - stats["percentiles"][24]
        except (KeyError, IndexError, TypeError):
            return None
        if not isinstance(center, float) or not isinstance(spread, float):
            return None
        return RowStep(function, names[:1], center=center, spread=spread)
    categories = list(stats.get("unique_values") or [])
    kinds = {type(c) for c in categories}
    if len(kinds) > 1 or kinds - {str, int, bool} or len({str(c) for c in categories}) != len(categories):
        return None
    if function.name == "one_hot_encoder" and len(names) != len(categories):
        return None
    found: dict[Any, int] = {}
    for at, category in enumerate(categories):
        found.setdefault(category, at)
    return RowStep(function, names if function.name == "one_hot_encoder" else names[:1], categories=found,
                   category_type=kinds.pop() if kinds else None)


def _matches(kind: str, category_type: type | None) -> bool:
    """Whether Arrow matches a column of this kind against the categories as a dict lookup does."""
    if kind == "none":
        return True
    if category_type is str:
        return kind == "str"
    if category_type is int:
        return kind == "int"
    return category_type is bool and kind in ("bool", "object")


def _scaled(value: float | None, center: float, spread: float) -> float | None:
    """`primitives.scaled` of one value: (x - center) / spread in doubles (IEEE's division by zero too), NaN as
    missing."""
    if value is None:
        return None
    x = float(value) - center
    if spread == 0.0:
        out = math.nan if x == 0.0 or x != x else math.copysign(math.inf, x) * math.copysign(1.0, spread)
    else:
        out = x / spread
    return None if out != out else out
