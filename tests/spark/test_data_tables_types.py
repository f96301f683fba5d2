"""Columns are typed as their text is written, and a failure names the column, a value and the type."""

import json
import os

import pyarrow.parquet as pq
import pytest
from table_helpers import dataset_folder, project_settings

from hopsml.data import dataset as ds
from hopsml.data.tables import prepare_table


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    return project_settings(tmp_path_factory, "types")


def _columns(settings, name):
    with open(dataset_folder(settings, name, "transform.json")) as handle:
        return {c["name"]: c["type"] for c in json.load(handle)["columns"]}


def _values(settings, name, column):
    folders = [dataset_folder(settings, name, "parquet", split) for split in ("train", "test")]
    return sorted(v for folder in folders if os.path.isdir(folder)    # a tiny table may have no test rows
                  for v in pq.read_table(folder).column(column).to_pylist())


def test_numbers_parse_as_their_text_says(spark, settings, tmp_path):
    csv = tmp_path / "numbers.csv"
    csv.write_text('whole,dotted,tiny,trailing,spaced,y\n'
                   '1,127.0,1e-05,-3.,"  42 ",0\n'
                   '2,128.0,2.5E+3,4.,7,1\n'
                   '-3,0.0,-0.5,0.,-1 ,0\n')
    summary = prepare_table(str(csv), "numbers", label="y", settings=settings, spark=spark)
    assert (summary.written, summary.rejected, summary.dropped) == (3, 0, 0)
    assert _columns(settings, "numbers") == {"whole": "long", "dotted": "double", "tiny": "double",
                                             "trailing": "double", "spaced": "long", "y": "long"}
    assert _values(settings, "numbers", "dotted") == [0.0, 127.0, 128.0]
    assert _values(settings, "numbers", "tiny") == [-0.5, 1e-05, 2500.0]
    assert _values(settings, "numbers", "trailing") == [-3.0, 0.0, 4.0]
    assert _values(settings, "numbers", "spaced") == [-1.0, 7.0, 42.0]


def test_numbers_written_with_a_leading_point_sign_or_as_infinity_parse(spark, settings, tmp_path):
    """Only text that can begin a number is cast (a cast that fails is slow in Spark): what begins with a point,
    a sign or Infinity still parses, and a column of words stays a category."""
    csv = tmp_path / "starts.csv"
    csv.write_text("point,signed,wide,word,y\n.5,+3,Infinity,e5,0\n-.25,-2,-inf,x1,1\n1.5,+0,2,n,0\n")
    summary = prepare_table(str(csv), "starts", label="y", settings=settings, spark=spark)
    assert (summary.written, summary.rejected, summary.dropped) == (3, 0, 0)
    assert _columns(settings, "starts") == {"point": "double", "signed": "long", "wide": "double",
                                            "word": "string", "y": "long"}
    assert _values(settings, "starts", "point") == [-0.25, 0.5, 1.5]
    assert _values(settings, "starts", "signed") == [-2.0, 0.0, 3.0]
    assert _values(settings, "starts", "wide") == [float("-inf"), 2.0, float("inf")]


def test_a_long_given_by_schema_reads_whole_numbers_written_with_a_point(spark, settings, tmp_path):
    csv = tmp_path / "given.csv"
    csv.write_text("magnesium,y\n127.0,1\n101,0\n1e2,1\n")
    summary = prepare_table(str(csv), "given", label="y", schema={"magnesium": "long"}, settings=settings, spark=spark)
    assert (summary.written, summary.rejected) == (3, 0)
    assert _values(settings, "given", "magnesium") == [100.0, 101.0, 127.0]


def test_a_schema_type_the_values_do_not_parse_as_names_column_value_and_type(spark, settings, tmp_path):
    csv = tmp_path / "wrong.csv"
    csv.write_text("Colour Name,y\nred,1\nblue,0\n3,1\n")
    with pytest.raises(ds.DatasetError) as caught:
        prepare_table(str(csv), "wrong", label="y", schema={"Colour Name": "double"}, settings=settings, spark=spark)
    message = str(caught.value)
    assert "'Colour Name'" in message and ("'red'" in message or "'blue'" in message)
    assert "double" in message and "schema=" in message


def test_a_long_value_with_a_fraction_is_rejected_with_its_reason(spark, settings, tmp_path):
    csv = tmp_path / "fraction.csv"
    csv.write_text("n,y\n1,0\n2.5,1\n3,0\n4,1\n")
    summary = prepare_table(str(csv), "fraction", label="y", schema={"n": "int"}, settings=settings, spark=spark)
    assert summary.rejected_reasons == {"not a whole number in column n": 1}
    assert summary.written == 3


def test_when_no_row_is_left_the_column_that_emptied_them_is_named(spark, settings, tmp_path):
    csv = tmp_path / "empty.csv"
    csv.write_text("a,mostly missing,y\n" + "".join(f"{i},nan,{i % 2}\n" for i in range(8)))
    with pytest.raises(ds.DatasetError) as caught:
        prepare_table(str(csv), "empty", label="y", settings=settings, spark=spark)
    message = str(caught.value)
    assert "none of the 8 rows" in message
    assert "'mostly missing'" in message and "missing in 8 of 8 rows" in message and "'nan'" in message


def test_true_and_false_are_a_boolean_column(spark, settings, tmp_path):
    csv = tmp_path / "bools.csv"
    csv.write_text("flag,x,y\nTrue,1.5,False\nFalse,2.5,True\ntrue,0.5,False\n")
    summary = prepare_table(str(csv), "bools", label="y", settings=settings, spark=spark)
    assert summary.written == 3
    assert _columns(settings, "bools") == {"flag": "boolean", "x": "double", "y": "boolean"}
    assert _values(settings, "bools", "flag") == [0.0, 1.0, 1.0]
    assert _values(settings, "bools", "label") == [0, 0, 1]


def test_the_wide_and_the_long_inference_count_the_same(spark, settings, tmp_path, monkeypatch):
    """A table of up to _WIDE_COLUMNS columns is counted by one wide aggregate, a wider one cell by
    cell: both give the same types, failures, samples and row counts."""
    from hopsml.data.tables import csv as tables_csv
    from hopsml.data.tables import inference
    from hopsml.data.tables import options as table_options

    csv = tmp_path / "mixed.csv"
    csv.write_text('n,d,b,s,forced,given,y\n'
                   '1,1.5,true,a,3,4,0\n'
                   '2,x,False,b,4,4.5,1\n'
                   '3,2.0,TRUE,c,five,7,0\n'
                   '"4",NaN,false,"d, e",6,,1\n'
                   '5,3,true,f,7\n'                     # one field short: malformed
                   '6,4e2,,g,8,9,"q""uoted"\n')
    options = table_options.TableOptions(label="y", categorical=("forced",), schema={"given": "long"})
    names = table_options.field_names(tables_csv.column_names(spark, str(csv), options))
    na = sorted({v.strip() for v in options.na_values} | {""})
    from pyspark.sql import functions as F

    raw = tables_csv.read_text(spark, str(csv), names, options)
    cleaned = raw.select(*[F.when(F.trim(F.col(n)).isin(na), F.lit(None)).otherwise(F.trim(F.col(n))).alias(n)
                           for n in names], F.col(table_options.CORRUPT))
    wide = inference.infer_types(cleaned, names, options)
    monkeypatch.setattr(inference, "WIDE_COLUMNS", 0)
    long = inference.infer_types(cleaned, names, options)
    assert wide == long
    assert (wide.read, wide.malformed) == (6, 1)
    assert wide.types == {"n": "long", "d": "double", "b": "boolean", "s": "string", "forced": "string",
                          "given": "long", "y": "long"}
    assert (wide.failures["d"], wide.samples["d"], wide.failures["given"], wide.samples["y"]) == (1, "x", 1, "q\"uoted")


def _prepared_from_first_rows(spark, settings, tmp_path, monkeypatch, lines, **options):
    """What prepare_table makes of ``lines`` with the types guessed from 3 rows (and checked on all) and
    with the types from every row at once: they must be the same."""
    from hopsml.data.tables import job

    csv = tmp_path / "table.csv"
    csv.write_text("\n".join(lines) + "\n")
    outcomes = []
    for first_rows in (3, 10_000):
        monkeypatch.setattr(job, "SAMPLE_ROWS", first_rows)
        name = f"{tmp_path.name}_{first_rows}"
        summary = prepare_table(str(csv), name, label="y", settings=settings, spark=spark, **options)
        with open(dataset_folder(settings, name, "stats.json")) as handle:
            stats = json.load(handle)
        outcomes.append((_columns(settings, name), summary.read, summary.written, summary.rejected,
                         summary.rejected_reasons, stats["columns"], _values(settings, name, "label")))
    assert outcomes[0] == outcomes[1]
    return outcomes[0]


def test_types_guessed_from_the_first_rows_are_those_every_row_gives(spark, settings, tmp_path, monkeypatch):
    # the first rows mislead: whole numbers before a 127.0, words before numbers, true/false before a 1
    lines = ["grows,late,flag,junk,given,kind,y"]
    for i in range(40):
        lines.append(",".join([
            "127.0" if i == 30 else str(i),            # long in the first rows, double in all
            "word" if i < 3 else f"{i}.5",             # a category in the first rows, double in all
            "true" if i < 20 else ("1" if i == 25 else "false"),   # boolean in the first rows, not in all
            "oops" if i == 33 else str(i % 7),         # long throughout, one value rejected
            f"{i}.0",                                  # schema= long: whole numbers written with a point
            "a" if i % 2 else "b", str(i % 2)]))
    types, *_, reasons, _, _ = _prepared_from_first_rows(spark, settings, tmp_path, monkeypatch, lines,
                                                         schema={"given": "long"})
    assert types == {"grows": "double", "late": "double", "flag": "string", "junk": "long", "given": "long",
                     "kind": "string", "y": "long"}
    assert reasons == {"unparsable number in column junk": 1, "unparsable number in column late": 3}


def test_a_guess_that_holds_keeps_its_rejected_values(spark, settings, tmp_path, monkeypatch):
    # the guess from the first rows holds on every row; the rows whose values do not parse are rejected
    lines = ["n,x,b,y"] + [",".join([str(i) if i != 12 else "twelve", f"{i}.25" if i != 20 else "x?",
                                     "TRUE" if i % 2 else "false", str(i % 3)]) for i in range(30)]
    types, read, written, rejected, reasons, _, _ = _prepared_from_first_rows(spark, settings, tmp_path,
                                                                              monkeypatch, lines)
    assert types == {"n": "long", "x": "double", "b": "boolean", "y": "long"}
    assert (read, written, rejected) == (30, 28, 2)
    assert reasons == {"unparsable number in column n": 1, "unparsable number in column x": 1}


def test_a_table_whose_check_pass_made_a_class_the_jvm_refused_prepares(spark, settings, tmp_path):
    """34 float columns and 2 of whole numbers (a statsmodels results file): the check pass's generated code
    once compiled into a class the JVM rejected (java.lang.VerifyError) and the prepare failed."""
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame(np.random.default_rng(0).normal(size=(202, 34)) * 1e3, columns=[f"v{i}" for i in range(34)])
    frame["zero"], frame["label"] = 0, np.arange(202) % 2
    frame.to_csv(tmp_path / "wide.csv", index=False)
    summary = prepare_table(str(tmp_path / "wide.csv"), "wide-floats", label="label", settings=settings, spark=spark)
    assert (summary.written, summary.rejected, summary.dropped) == (202, 0, 0)
    assert _values(settings, "wide-floats", "v7") == sorted(frame["v7"].tolist())
