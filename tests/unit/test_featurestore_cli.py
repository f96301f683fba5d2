"""`hopsml fs`: a CSV and a Parquet file inserted from the command line, groups, views and training datasets
listed and shown, and a group that does not exist yet refused without --primary-key."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import cli, hopsworks


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["fs", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_insert_list_and_show_from_the_command_line(root, tmp_path, capsys):
    first = tmp_path / "tx.csv"
    first.write_text("Customer_ID,ts,amount\n1,2024-01-01T00:00:00,10.5\n2,2024-01-02T00:00:00,20\n")
    code, out, _ = _run(capsys, "insert", "transactions", str(first), "--primary-key", "Customer_ID",
                        "--event-time", "ts", "--description", "card payments")
    assert code == 0 and "inserted 2 rows" in out and "2 new, 0 updated" in out
    second = tmp_path / "more.parquet"
    pd.DataFrame({"Customer_ID": [1, 3], "ts": pd.to_datetime(["2024-01-01", "2024-01-03"]),
                  "amount": [11.0, 30.0], "country": ["SE", "DE"]}).to_parquet(second)
    code, out, _ = _run(capsys, "insert", "transactions", str(second))
    assert code == 0 and "1 new, 1 updated" in out and "new columns country" in out

    code, out, _ = _run(capsys, "groups", "list")
    assert code == 0 and "transactions" in out and "customer_id" in out and "card payments" in out
    code, out, _ = _run(capsys, "groups", "show", "transactions")
    assert code == 0 and "country      string" in out and "INSERTED" in out

    fs = hopsworks.login().get_feature_store()
    fg = fs.get_feature_group("transactions")
    fv = fs.create_feature_view("spend", query=fg.select(["customer_id", "ts", "amount"]), labels=["amount"])
    fv.training_data(start_time=dt.datetime(2024, 1, 1))
    code, out, _ = _run(capsys, "views", "list")
    assert code == 0 and "spend" in out and "transactions_1" in out
    code, out, _ = _run(capsys, "training-datasets", "list", "spend")
    assert code == 0 and "transactions_1=2" in out and "train=3" in out   # the commit it read


def test_a_new_group_needs_its_primary_key(root, tmp_path, capsys):
    data = tmp_path / "x.csv"
    data.write_text("id,v\n1,2\n")
    code, _, err = _run(capsys, "insert", "fresh", str(data))
    assert code != 0 and "give --primary-key" in err
    code, _, err = _run(capsys, "insert", "fresh", str(tmp_path / "x.txt.json"), "--primary-key", "id")
    assert code != 0 and "name a .csv or .parquet file" in err


def test_csv_files_scikit_learn_ships_insert_with_their_delimiter(root, capsys):
    """Files no one here wrote: linnerud's is space-separated; a comma would read one column and refuse it."""
    import pathlib

    import sklearn

    exercise = pathlib.Path(sklearn.__file__).parent / "datasets" / "data" / "linnerud_exercise.csv"
    code, _, err = _run(capsys, "insert", "exercise", str(exercise), "--primary-key", "Chins,Situps,Jumps")
    assert code != 0 and "has no column 'chins'" in err
    code, out, _ = _run(capsys, "insert", "exercise", str(exercise), "--primary-key", "Chins,Situps,Jumps",
                        "--delimiter", " ")
    assert code == 0 and "inserted 20 rows" in out


def test_a_csv_file_without_a_header_or_a_key_takes_columns_and_row_numbers(root, capsys):
    """scikit-learn's iris.csv opens with a count line and has no header; two of its rows are equal, so it has
    no key of its own either."""
    import pathlib

    import sklearn

    iris = pathlib.Path(sklearn.__file__).parent / "datasets" / "data" / "iris.csv"
    names = "sepal_length,sepal_width,petal_length,petal_width,target"
    code, _, err = _run(capsys, "insert", "iris", str(iris), "--skip-rows", "1", "--columns", names,
                        "--primary-key", names, "--duplicate-keys", "refuse")
    assert code != 0 and "appear more than once in the batch" in err
    code, _, err = _run(capsys, "insert", "iris", str(iris), "--skip-rows", "1", "--columns", "a,b,c",
                        "--primary-key", "a")
    assert code != 0 and "cannot read" in err and "--columns" in err
    code, out, _ = _run(capsys, "insert", "iris", str(iris), "--skip-rows", "1", "--columns", names,
                        "--row-number", "flower", "--primary-key", "flower")
    assert code == 0 and "inserted 150 rows" in out
    from hopsml.featurestore.store import FeatureStore

    rows = FeatureStore().get_feature_group("iris").read().sort_values("flower")
    assert rows["flower"].tolist() == list(range(150)) and rows["sepal_length"].iloc[0] == 5.1
    assert sorted(rows["target"].unique()) == [0, 1, 2]
