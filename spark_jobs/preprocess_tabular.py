"""spark-submit entry point: a CSV table -> a hopsml dataset with train/test splits.

    spark-submit spark_jobs/preprocess_tabular.py SRC DATASET --label COLUMN [--no-header]
        [--columns a,b,c] [--na-values ?] [--missing drop|fill] [--categorical a,b] [--one-hot]
        [--standardize] [--test-fraction 0.2] [--seed 0] [--shards N] [--overwrite]

Same options as `hopsml prep tabular`; the work is done by hopsml.data.tables.prepare_table.
"""

import sys

from hopsml.data.commands import job_main

if __name__ == "__main__":
    sys.exit(job_main("tabular"))
