"""How a CSV becomes a dataset (TableOptions), the column names it gets, and the names of the working columns."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hopsml.errors import SettingsError

if TYPE_CHECKING:
    pass


SPLITS = ("train", "test")


MISSING_POLICIES = ("drop", "fill")


NUMERIC_TYPES = {"double": "double", "float": "double", "int": "long", "long": "long", "integer": "long",
                 "bool": "boolean", "boolean": "boolean"}


CATEGORICAL_TYPES = ("string", "category", "categorical", "str")


INTEGRAL_TYPES = ("long", "boolean")   # written as int64 (a boolean as 0/1)


# The texts pandas' read_csv takes for missing by default, and '?' (UCI's files): what pandas'
# to_csv, R's write.csv ("NA") and spreadsheets write for an empty cell.
DEFAULT_NA_VALUES = ("?", "nan", "NaN", "-nan", "-NaN", "NA", "N/A", "n/a", "NULL", "null", "None", "<NA>",
                     "#N/A", "#NA", "#N/A N/A", "-1.#IND", "-1.#QNAN", "1.#IND", "1.#QNAN")


CORRUPT = "_corrupt_record"


WIDE_COLUMNS = 64   # up to this many columns the inference counts are one wide aggregate


SAMPLE_ROWS = 10_000   # the first rows, whose text the types are guessed from (then checked on every row)


REASON = "_reason"   # why a row is rejected; NULL for a row that is not


FIELDS = "_fields"   # a rejected row's fields as read


SPLIT = "_split"


SHARD = "_shard"


ROW_HASH = "row_hash_column"


SAMPLED = "_sampled"   # the row is in the median sample


USABLE = "_usable"     # the row is written (not rejected, nor dropped for a missing value)


UNKNOWN = -1  # index of a category the train split never saw


def sanitize(name: str) -> str:
    """A column name that is a Python identifier (petastorm builds namedtuples from them).

    >>> sanitize("education-num"), sanitize(" hours per week "), sanitize("2nd")
    ('education_num', 'hours_per_week', 'c_2nd')
    """
    text = re.sub(r"\W+", "_", name.strip()).strip("_") or "column"
    return "c_" + text if text[0].isdigit() else text


@dataclass(frozen=True)
class TableOptions:
    """How a CSV becomes a dataset; validates itself."""

    label: str
    header: bool = True
    columns: tuple[str, ...] | None = None
    schema: Mapping[str, str] | None = None
    na_values: tuple[str, ...] = DEFAULT_NA_VALUES
    missing: str = "drop"
    categorical: tuple[str, ...] | None = None
    exclude: tuple[str, ...] | None = None
    one_hot: bool = False
    standardize: bool = False
    test_fraction: float = 0.2
    seed: int = 0
    shards: int | None = None
    delimiter: str = ","
    skip_rows: int = 0
    strict: bool = False
    overwrite: bool = False
    compression: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.missing not in MISSING_POLICIES:
            raise SettingsError(f"missing={self.missing!r}: use 'drop' (remove rows with a missing "
                                "value) or 'fill' (train mean / most frequent category)")
        if not 0.0 <= float(self.test_fraction) < 1.0:
            raise SettingsError(f"test_fraction={self.test_fraction!r} must be in [0, 1)")
        if isinstance(self.skip_rows, bool) or not isinstance(self.skip_rows, int) or self.skip_rows < 0:
            raise SettingsError(f"skip_rows={self.skip_rows!r} must be a whole number of lines, 0 or more")
        if self.shards is not None and int(self.shards) < 1:
            raise SettingsError(f"shards={self.shards!r} must be at least 1")
        for name, kind in (self.schema or {}).items():
            if kind.lower() not in NUMERIC_TYPES and kind.lower() not in CATEGORICAL_TYPES:
                raise SettingsError(f"schema type {kind!r} of column {name!r}: use one of "
                                    f"{', '.join(sorted(NUMERIC_TYPES))} or 'string'")


def field_names(raw_names: Sequence[str]) -> list[str]:
    """The dataset's field names of the header names: identifiers, a nameless column (R's row
    names, pandas' index) named by its position.

    >>> field_names(["", "sepal length (cm)", "od280/od315", "größe"])
    ['column_0', 'sepal_length_cm', 'od280_od315', 'größe']
    """
    return [sanitize(n) if n.strip() else f"column_{i}" for i, n in enumerate(raw_names)]
