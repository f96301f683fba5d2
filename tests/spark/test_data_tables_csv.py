"""CSV files as tools write them: pandas, Excel's "CSV UTF-8", R's write.csv, Spark's own writer."""

import json
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from table_helpers import dataset_folder, project_settings

from hopsml.data.tables import prepare_table


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    return project_settings(tmp_path_factory, "csv_forms")


def _written(settings, name):
    """Both splits' Parquet rows as one frame, in a stable order (a small table's test split may be empty)."""
    frames = [pq.read_table(dataset_folder(settings, name, "parquet", s)).to_pandas() for s in ("train", "test")
              if os.path.isdir(dataset_folder(settings, name, "parquet", s))]
    return pd.concat(frames, ignore_index=True)


def _json(settings, name, file):
    with open(dataset_folder(settings, name, file), encoding="utf-8") as handle:
        return json.load(handle)


def _odd_frame(rows=40):
    """Header names with spaces, '/', '(', dots and non-ASCII letters; text with the delimiter,
    quotes and line breaks; booleans; missing values; the label in the middle."""
    rng = np.random.default_rng(0)
    notes = ["plain", "with, comma", 'say "hi"', "two\nlines", "größe ≥ 3"]
    frame = pd.DataFrame({
        "sepal length (cm)": np.round(rng.normal(5, 1, rows), 2),
        "od280/od315": rng.integers(0, 9, rows).astype(float),   # whole numbers, written as 3.0
        "kind": rng.choice(["a", "b"], rows),
        "v1.2": rng.integers(-5, 5, rows),   # a missing value makes pandas write it as -3.0
        "größe": rng.choice([True, False], rows),
        "note": [notes[i % len(notes)] for i in range(rows)],
    })
    frame.loc[3, "sepal length (cm)"] = np.nan
    frame.loc[7, "v1.2"] = None
    return frame


def _check_odd(settings, name, frame, summary):
    kept = frame.dropna()
    assert summary.read == len(frame) and summary.rejected == 0
    assert summary.written == len(kept) and summary.dropped == len(frame) - len(kept)
    transform = _json(settings, name, "transform.json")
    types = {c["source_name"]: c["type"] for c in transform["columns"]}
    assert types == {"sepal length (cm)": "double", "od280/od315": "double", "kind": "string", "v1.2": "double",
                     "größe": "boolean", "note": "string"}
    stats = _json(settings, name, "stats.json")
    assert {c["source_name"] for c in stats["columns"]} == set(frame.columns)
    assert "größe" in {c["name"] for c in stats["columns"]}                      # non-ASCII letters stay
    written = _written(settings, name)
    got = sorted(zip(written["sepal_length_cm"], written["od280_od315"], written["v1_2"], written["größe"]))
    want = sorted(zip(kept["sepal length (cm)"], kept["od280/od315"], kept["v1.2"].astype(int),
                      kept["größe"].astype(int)))
    assert np.allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float))
    categories = transform["categorical"]["note"]["categories"]
    assert set(categories) == set(kept["note"])                      # quoted text came back whole
    assert set(transform["label"]["classes"]) == {"a", "b"}


def test_pandas_to_csv_with_quoted_fields_odd_names_and_the_label_in_the_middle(spark, settings, tmp_path):
    frame = _odd_frame()
    csv = tmp_path / "pandas.csv"
    frame.to_csv(csv, index=False)
    assert '"two\nlines"' in csv.read_text(encoding="utf-8")
    summary = prepare_table(str(csv), "pandas_csv", label="kind", settings=settings, spark=spark)
    _check_odd(settings, "pandas_csv", frame, summary)


def test_excel_csv_utf8_with_a_byte_order_mark_and_crlf(spark, settings, tmp_path):
    frame = _odd_frame()
    csv = tmp_path / "excel.csv"
    frame.to_csv(csv, index=False, encoding="utf-8-sig", lineterminator="\r\n")   # as Excel's "CSV UTF-8"
    assert csv.read_bytes().startswith(b"\xef\xbb\xbfsepal length (cm),") and b"\r\n" in csv.read_bytes()
    summary = prepare_table(str(csv), "excel_csv", label="kind", settings=settings, spark=spark)
    _check_odd(settings, "excel_csv", frame, summary)


def test_r_write_csv_with_quoted_header_row_names_and_na(spark, settings, tmp_path):
    # write.csv(frame, "r.csv"): a quoted header whose first name is empty (the row names, left out:
    # a model must not learn from row numbers), quoted text, NA for missing, numbers unquoted
    lines = ['"","height","weight","smoker","group"']
    rng = np.random.default_rng(1)
    rows = []
    for i in range(1, 31):
        height, weight = round(float(rng.normal(170, 10)), 1), int(rng.integers(50, 100))
        smoker = "TRUE" if i % 3 else "FALSE"
        cells = [f'"{i}"', "NA" if i == 5 else str(height), str(weight), smoker, f'"g {i % 2}"']
        rows.append((height, weight, i % 3 != 0, i))
        lines.append(",".join(cells))
    csv = tmp_path / "r.csv"
    csv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary = prepare_table(str(csv), "r_csv", label="group", settings=settings, spark=spark)
    assert (summary.read, summary.written, summary.dropped, summary.rejected) == (30, 29, 1, 0)
    assert summary.left_out == {"": "the header gives column 1 no name: row names or an index"}
    assert "left out column '' (the header gives column 1 no name: row names or an index)" in str(summary)
    transform = _json(settings, "r_csv", "transform.json")
    assert [c["name"] for c in transform["columns"]] == ["height", "weight", "smoker", "group"]
    assert transform["left_out"] == summary.left_out and "c0" not in _written(settings, "r_csv").columns
    assert {c["name"]: c["type"] for c in transform["columns"]}["smoker"] == "boolean"
    written = _written(settings, "r_csv")
    assert sorted(zip(written["height"], written["weight"])) == sorted((h, w) for h, w, _, i in rows if i != 5)
    assert set(transform["label"]["classes"]) == {"g 0", "g 1"}


def test_r_write_table_whose_header_is_one_name_short_of_its_rows(spark, settings, tmp_path):
    # write.table(frame, sep=","): the header names only the columns, every row starts with its row name
    # (statsmodels ships dietox.csv so); pandas reads that first field as the index
    lines = ['"Weight","Feed","Pig","Litter"']
    for i in range(1, 26):
        feed = "NA" if i == 1 else f"{i * 1.5:.5f}"
        lines.append(f'"{i}",{20 + i * 0.7:.5f},{feed},{4600 + i % 4},{i % 2}')
    csv = tmp_path / "r_table.csv"
    csv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = pd.read_csv(csv).dropna()
    summary = prepare_table(str(csv), "r_table", label="Litter", settings=settings, spark=spark)
    assert (summary.read, summary.written, summary.dropped, summary.rejected) == (25, len(expected), 1, 0)
    assert summary.left_out == {"": "the header gives column 1 no name: row names or an index"}
    transform = _json(settings, "r_table", "transform.json")
    assert [c["name"] for c in transform["columns"]] == ["Weight", "Feed", "Pig", "Litter"]
    written = _written(settings, "r_table")
    assert sorted(written["Weight"]) == pytest.approx(sorted(expected["Weight"]))
    assert sorted(written["Pig"]) == sorted(expected["Pig"])


def test_a_folder_written_by_spark(spark, settings, tmp_path):
    # Spark's writer escapes a quote inside a field with a backslash ("say \"hi\""), not by doubling it
    names = ["r0", 'say "hi"', "with, comma", 'both, "x"', "back\\slash"]
    frame = pd.DataFrame({"x": np.arange(60) / 4.0, "n": np.arange(60) % 7, "name": [names[i % 5] for i in range(60)],
                          "y": np.arange(60) % 2})
    frame["name"] = frame["name"].where(frame.index != 10, None)
    out = str(tmp_path / "spark_out")
    spark.createDataFrame(frame).repartition(3).write.csv(out, header=True)
    summary = prepare_table(out, "spark_csv", label="y", settings=settings, spark=spark)
    assert (summary.read, summary.written, summary.dropped, summary.rejected) == (60, 59, 1, 0)
    written = _written(settings, "spark_csv")
    assert sorted(zip(written["x"], written["n"], written["label"])) == sorted(
        (x, n, y) for i, (x, n, y) in enumerate(zip(frame.x, frame.n, frame.y)) if i != 10)
    assert set(_json(settings, "spark_csv", "transform.json")["categorical"]["name"]["categories"]) == set(names)


@pytest.mark.parametrize("text", ["", "nan", "NaN", "NA", "N/A", "null"])
def test_missing_as_pandas_and_others_write_it(spark, settings, tmp_path, text):
    csv = tmp_path / "missing.csv"
    csv.write_text("a,b,y\n" + "".join(f"{i}.5,{text if i == 2 else i},{i % 2}\n" for i in range(10)))
    safe = ['empty', 'nan', 'NaN', 'NA', 'N_A', 'null'][['', 'nan', 'NaN', 'NA', 'N/A', 'null'].index(text)]
    name = f"missing_{safe}"
    summary = prepare_table(str(csv), name, label="y", settings=settings, spark=spark)
    assert (summary.read, summary.written, summary.dropped, summary.rejected) == (10, 9, 1, 0)
    assert {c["name"]: c["type"] for c in _json(settings, name, "transform.json")["columns"]}["b"] == "long"
    filled = prepare_table(str(csv), name + "_kept", label="y", na_values=["?"], settings=settings, spark=spark)
    assert filled.read == filled.written + filled.rejected + filled.dropped
    if text in ("NA", "N/A", "null"):   # na_values replaces the default list: the text does not parse
        assert filled.rejected_reasons == {"unparsable number in column b": 1}


@pytest.mark.slow
def test_a_thousand_columns(spark, settings, tmp_path):
    rng = np.random.default_rng(2)
    frame = pd.DataFrame(rng.normal(size=(60, 1000)).round(4), columns=[f"f {i}" for i in range(1000)])
    frame["target"] = np.arange(60) % 3
    csv = tmp_path / "wide.csv"
    frame.to_csv(csv, index=False)
    summary = prepare_table(str(csv), "wide", label="target", settings=settings, spark=spark)
    assert (summary.read, summary.written, summary.rejected) == (60, 60, 0)
    written = _written(settings, "wide")
    assert np.stack(written["features"]).shape == (60, 1000)
    got = sorted(map(tuple, np.stack(written["features"]).astype(np.float64).round(3)))
    want = sorted(map(tuple, frame.iloc[:, :1000].to_numpy().astype(np.float32).astype(np.float64).round(3)))
    assert np.allclose(got, want)


def test_excluded_columns_are_no_features_and_malformed_rows_are_still_rejected(spark, settings, tmp_path):
    lines = ["id,x,note,y"] + [f"{1000 + i},{i / 2},note {i % 4},{i % 2}" for i in range(30)]
    lines[5] = "1004,2.0,note 0"                 # a field short
    lines[9] = "1008,4.0,note 0,0,surplus"       # a field too many
    csv = tmp_path / "ids.csv"
    csv.write_text("\n".join(lines) + "\n")
    summary = prepare_table(str(csv), "ids", label="y", exclude=["id", "note"], settings=settings, spark=spark)
    assert (summary.read, summary.written, summary.rejected) == (30, 28, 2)
    assert summary.rejected_reasons == {"malformed row (wrong number of fields)": 2}
    assert summary.left_out == {"id": "excluded", "note": "excluded"}
    transform = _json(settings, "ids", "transform.json")
    assert [c["name"] for c in transform["columns"]] == ["x", "y"] and transform["features"] == ["x"]
    with pytest.raises(Exception, match=r"exclude= names \['nope'\], which are not among the columns"):
        prepare_table(str(csv), "ids2", label="y", exclude=["nope"], settings=settings, spark=spark)
