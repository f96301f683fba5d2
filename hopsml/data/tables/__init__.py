"""CSV tables -> a dataset: typed, cleaned, split, transformed, as plain Parquet and TFRecord shards.

Steps, all in Spark: read every field as text (PERMISSIVE, so a row with the wrong number of
fields is caught with its raw line), trim, turn ``na_values`` into missing, type the columns
(given, or inferred from the text as written: a column is ``long`` only when its numbers are
written without a decimal point or exponent, so pandas' ``127.0`` makes it ``double``; ``boolean``
when every value is true/false; numeric when most values parse), reject rows whose cells do not
parse as their column's type, split train/test by a hash of the row and the seed (reproducible,
independent of partitioning), apply the missing-value policy, fit the transform on the train
split only (category indices by frequency, means and standard deviations) and apply it to both
splits. Rejected rows are kept in ``_rejected`` with their reason; nothing is silently dropped:
``read = written + rejected + dropped``, where dropped counts rows removed by ``missing='drop'``
(or rows without a label).

The package: options, csv (reading), parsing and inference (types), typed (the typed pass), transform
(shared with the feature store), writers (the shard tasks), job (the Spark job's steps), local and row_hash (a
small table without Spark), prepare (prepare_table, which picks between them).
"""

from hopsml.data.tables.options import DEFAULT_NA_VALUES, SAMPLE_ROWS, TableOptions, field_names, sanitize
from hopsml.data.tables.prepare import prepare_table
from hopsml.data.tables.transform import Transform

__all__ = ["DEFAULT_NA_VALUES", "SAMPLE_ROWS", "TableOptions", "Transform", "field_names", "prepare_table", "sanitize"]
