"""prepare_table reads a project file by any path form hdfs accepts (a hops notebook writes
`prepare_table("Resources/iris.csv", ...)` or hdfs:///Projects/<p>/...), as the same rows a local path gives."""

from __future__ import annotations

import pytest

from hopsml import hdfs
from hopsml.data import prepare_table, samples


@pytest.mark.parametrize("form", ["Resources/iris.csv", "/Projects/test/Resources/iris.csv",
                                  "hdfs:///Projects/test/Resources/iris.csv"])
def test_prepare_reads_a_project_file_by_each_path_form(spark, root, form):
    hdfs.mkdir("Resources")
    samples.write_table(hdfs.abs_path("Resources/iris.csv"), bad_rows=False)
    summary = prepare_table(form, "flowers", label="species", overwrite=True, spark=spark)
    assert summary.written == 150
