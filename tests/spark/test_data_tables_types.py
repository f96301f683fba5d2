"""Columns are typed as their text is written, and a failure names the column, a value and the type."""

import json
import os

import pyarrow.parquet as pq
import pytest

from hopsml import config
from hopsml.data import dataset as ds
from hopsml.data.tables import prepare_table


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    base = tmp_path_factory.mktemp("types")
    return config.load(environ={}, root=str(base / "root"), project="test", master="local[4]")


def _folder(settings, name, *parts):
    return os.path.join(settings.root, "Projects", "test", "Datasets", name, *parts)


def _columns(settings, name):
    with open(_folder(settings, name, "transform.json")) as handle:
        return {c["name"]: c["type"] for c in json.load(handle)["columns"]}


def _values(settings, name, column):
    folders = [_folder(settings, name, "parquet", split) for split in ("train", "test")]
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
