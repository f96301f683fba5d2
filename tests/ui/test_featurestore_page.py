"""The feature store pages of `hopsml ui` over a feature store made by hopsml's hopsworks API (two groups, a
second commit that updates rows and adds a column, a validation suite, a view with a join and transformation
functions, a written-out and an in-memory training dataset, a model registered with feature_view= and one exported
by a run that read the training dataset): through Flask's test client, then one page in headless Chromium."""

from __future__ import annotations

import datetime as dt
import os
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from browser import chrome, chromium_paths, login, ui_server

from hopsml import config, layout, model
from hopsml.data import reader
from hopsml.fs import Storage
from hopsml.tracking.run_context import active_run
from hopsml.ui import create_app

pytest.importorskip("flask")
pytest.importorskip("deltalake")
pytest.importorskip("duckdb")

from hopsml import hopsworks
from hopsml.hopsworks.hsfs.builtin_transformations import label_encoder, min_max_scaler

PROJECT = "shop"
EVIL = "<script>window.hacked=1</script>"
T0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
SUITE = {"expectation_suite_name": "order_checks", "expectations": [
    {"expectation_type": "expect_column_values_to_be_between",
     "kwargs": {"column": "amount", "min_value": 0, "max_value": 1000}}]}


class _Tables(HTMLParser):
    """The rows of every table with an id: {table id: {row's data-id or data-column: [cell texts]}}; the text of a
    table inside a cell belongs to that inner table only."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, dict[str, list[str]]] = {}
        self._open: list[tuple[str | None, list]] = []   # per open table: its id, and [the row being read]

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._open.append((attrs.get("id"), [None]))
            if attrs.get("id"):
                self.tables[attrs["id"]] = {}
        elif self._open and tag == "tr":
            table, row = self._open[-1]
            key = attrs.get("data-id") or attrs.get("data-column")
            row[0] = self.tables[table].setdefault(key, []) if table and key else None
        elif self._open and tag == "td" and self._open[-1][1][0] is not None:
            self._open[-1][1][0].append("")
        elif tag in ("dt", "dd", "div", "br") and self._open and self._open[-1][1][0]:
            self._open[-1][1][0][-1] += " "   # parts of a cell on lines of their own

    def handle_endtag(self, tag):
        if tag == "table" and self._open:
            self._open.pop()
        elif tag == "tr" and self._open:
            self._open[-1][1][0] = None

    def handle_data(self, data):
        if self._open and self._open[-1][1][0]:
            self._open[-1][1][0][-1] += data


def _tables(page: str) -> dict[str, dict[str, list[str]]]:
    parser = _Tables()
    parser.feed(page)
    return {t: {k: [" ".join(c.split()) for c in cells] for k, cells in rows.items()}
            for t, rows in parser.tables.items()}


def _frames():
    rng = np.random.default_rng(0)
    customers = pd.DataFrame({"CustomerID": np.arange(10), "since": [T0 - dt.timedelta(days=400)] * 10,
                              "country": rng.choice(["SE", "DE"], 10), "age": rng.integers(18, 80, 10)})
    orders = pd.DataFrame({"CustomerID": rng.integers(0, 10, 40),
                           "ts": [T0 + dt.timedelta(minutes=m) for m in range(40)],
                           "amount": rng.gamma(2.0, 30.0, 40).round(2), "fraud": rng.integers(0, 2, 40)})
    return customers, orders


@pytest.fixture
def store(root, tmp_path):
    """The feature store, its models, and the app over the root; the group's commits as hopsworks lists them."""
    project = hopsworks.login(project=PROJECT)
    fs = project.get_feature_store()
    customers, orders = _frames()
    people = fs.get_or_create_feature_group("customers", version=1, primary_key=["CustomerID"], event_time="since",
                                            description=EVIL)
    people.insert(customers)
    fg = fs.get_or_create_feature_group("orders", version=1, primary_key=["CustomerID", "ts"], event_time="ts",
                                        description="card orders")
    fg.save_expectation_suite(SUITE, validation_ingestion_policy="ALWAYS")
    fg.insert(orders)
    again = orders.head(5).assign(amount=5000.0, channel="web")     # 5 updated rows, a new column, 5 out of range
    fg.insert(again)
    fg.update_feature_description("amount", "order total in EUR")
    query = fg.select(["customerid", "ts", "amount", "fraud"]).join(people.select(["country", "age"]))
    fv = fs.get_or_create_feature_view("fraud", version=1, query=query, labels=["fraud"],
                                       transformation_functions=[min_max_scaler("amount"), label_encoder("country")])
    written, _ = fv.create_training_data(description="everything")
    fv.train_test_split(test_size=0.25, seed=7)                      # version 2: in memory, not written out
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.txt").write_text("0.5")
    registry = project.get_model_registry()
    registry.python.create_model("fraud", metrics={"auc": 0.9}, feature_view=fv,
                                 training_dataset_version=written).save(str(folder))
    storage = Storage(str(root))
    with active_run(storage, layout.ExperimentDir.of(PROJECT, "local-1700000000000", 1)):
        assert sum(len(batch["label"]) for batch in reader(fv.training_dataset_name(written))) == 40
        model.export(str(folder), "fraud-run")                         # lineage through the run that read it
    app = create_app(config.load(project=PROJECT))
    return {"app": app, "client": app.test_client(), "commits": fg.commit_details(), "root": root,
            "dataset": fv.training_dataset_name(written), "storage": storage}


def _get(store, path: str, status: int = 200) -> str:
    response = store["client"].get(path, headers={"Host": "localhost"})
    assert response.status_code == status, response.data[:600]
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    return response.get_data(as_text=True)


def test_the_store_page_lists_groups_views_and_the_models_trained_on_them(store):
    page = _get(store, f"/p/{PROJECT}/featurestore/")
    tables = _tables(page)
    groups = tables["feature-groups"]
    assert set(groups) == {"customers_1", "orders_1"}
    assert groups["orders_1"][:6] == ["orders", "1", "customerid, ts", "ts", "", "no"]
    assert groups["orders_1"][6] == "card orders" and groups["orders_1"][7].startswith("5 features")
    assert tables["features-orders-1"]["amount"] == ["amount", "double", "order total in EUR"]
    assert tables["features-orders-1"]["channel"][0] == "channel"
    assert EVIL not in page and "&lt;script&gt;window.hacked=1&lt;/script&gt;" in page
    view = tables["feature-views"]["fraud_1"]
    assert view[2:5] == ["orders_1, customers_1", "fraud", "min_max_scaler(amount), label_encoder(country)"]
    assert view[5] == "2" and view[6] == "fraud:1, fraud-run:1"
    assert f'href="/p/{PROJECT}/models/#model-fraud-1"' in page
    assert f'href="/p/{PROJECT}/featurestore/">Feature store</a>' in page          # the nav link


def test_a_group_page_shows_its_commits_statistics_per_commit_and_validation_reports(store):
    newest, first = sorted(store["commits"], reverse=True)
    page = _get(store, f"/p/{PROJECT}/featurestore/groups/orders/1")
    tables = _tables(page)
    commits = tables["commits"]
    assert list(commits) == [str(newest), str(first)]
    assert commits[str(first)][2:7] == ["WRITE", "40", "0", "0", ""]
    assert commits[str(newest)][3:7] == ["0", "5", "0", "channel"]
    assert tables["group-definition"] == {} and "order_checks" in page
    stats = tables["stats"]
    assert f"of the table after commit {newest}, 40 rows" in page
    assert "max 5000" in stats["amount"][1] and "missing 35" in stats["channel"][1]
    assert "min 2024-03-01 00:00:00+00:00" in stats["ts"][1]
    assert page.count('class="chart histogram"') == 3 and page.count('class="chart bars"') == 1  # ts: no chart
    assert f"?commit={first}#statistics" in page

    earlier = _tables(_get(store, f"/p/{PROJECT}/featurestore/groups/orders/1?commit={first}"))
    assert "channel" not in earlier["stats"] and "max 5000" not in earlier["stats"]["amount"][1]
    assert "count 40" in earlier["stats"]["amount"][1]

    reports = tables["validation"]
    assert len(reports) == 2
    newest_report, first_report = reports.values()
    assert newest_report[1] == "failed batch ingested" and newest_report[2] == "order_checks"
    assert newest_report[3] == "0/1" and "expect_column_values_to_be_between(amount): 5 of 5 rows" in newest_report[4]
    assert first_report[1] == "passed batch ingested"

    missing = _get(store, f"/p/{PROJECT}/featurestore/groups/orders/1?commit=99")
    assert "commit 99 has no statistics" in missing


def test_a_view_page_shows_its_query_training_datasets_and_model_lineage(store):
    newest = max(store["commits"])
    page = _get(store, f"/p/{PROJECT}/featurestore/views/fraud/1")
    tables = _tables(page)
    assert tables["query"]["orders_1"][1:3] == ["customerid, ts, amount, fraud", "left (label) side"]
    assert tables["query"]["customers_1"][1:3] == ["country, age", "left join on customerid"]
    assert tables["functions"] == {"min_max_scaler": ["min_max_scaler", "amount", "built in"],
                                   "label_encoder": ["label_encoder", "country", "built in"]}
    assert '<td id="labels">fraud</td>' in page
    datasets = tables["training-datasets"]
    assert list(datasets) == ["2", "1"]
    written, in_memory = datasets["1"], datasets["2"]
    assert written[2:4] == ["none", "train 40"]
    assert written[4] == f"orders_1 @ {newest}, customers_1 @ 0"
    assert written[5] == store["dataset"] and written[6] == "fraud:1, fraud-run:1"
    assert f'href="/p/{PROJECT}/featurestore/groups/orders/1?commit={newest}"' in page
    assert f'href="/p/{PROJECT}/datasets/{store["dataset"]}"' in page
    assert in_memory[2] == "random: test 25%, seed 7" and in_memory[5] == "not written out" and in_memory[6] == ""
    assert _tables(_get(store, f"/p/{PROJECT}/datasets/{store['dataset']}"))["stats"]     # the linked page is there

    models = _get(store, f"/p/{PROJECT}/models/")
    assert 'id="model-fraud-1"' in models and 'id="model-fraud-run-1"' in models
    row = _tables(models)["models"]["fraud:1"]
    assert row[7] == "fraud_1 td 1" and f'href="/p/{PROJECT}/featurestore/views/fraud/1"' in models


def test_a_root_without_a_feature_store_shows_an_empty_state_and_unknown_pages_are_not_found(root):
    storage = Storage(str(root))
    storage.makedirs(layout.project_dir("empty"))
    client = create_app(config.load(project="empty")).test_client()
    page = client.get("/p/empty/featurestore/", headers={"Host": "localhost"})
    assert page.status_code == 200 and 'id="fs-empty"' in page.get_data(as_text=True)
    assert "feature-groups" not in page.get_data(as_text=True)
    for path in ("/p/empty/featurestore/groups/orders/1", "/p/empty/featurestore/views/fraud/1",
                 "/p/empty/featurestore/groups/..%2Fx/1", "/p/nope/featurestore/"):
        assert client.get(path, headers={"Host": "localhost"}).status_code == 404, path
    assert client.get("/p/empty/featurestore/", headers={"Host": "attacker.example"}).status_code == 421


def test_an_unreadable_record_is_listed_by_its_file_and_hides_nothing_else(store):
    storage = store["storage"]
    storage.write_bytes(layout.join(layout.feature_group_dir(PROJECT, "customers", 1), layout.GROUP_RECORD), b'{"na')
    storage.write_bytes(layout.join(layout.training_datasets_dir(PROJECT, "fraud", 1), "2",
                                    layout.TRAINING_DATASET_RECORD), b"[1, 2")
    reports = layout.join(layout.feature_group_dir(PROJECT, "orders", 1), layout.GROUP_VALIDATION)
    storage.write_bytes(layout.join(reports, "9999999999999999999.json"), b"not json")
    storage.write_bytes(layout.join(layout.feature_view_dir(PROJECT, "broken", 1), layout.VIEW_RECORD), b"{")

    tables = _tables(_get(store, f"/p/{PROJECT}/featurestore/"))
    groups, views = tables["feature-groups"], tables["feature-views"]
    assert "unreadable: FeatureStore/customers_1/_group.json cannot be read" in groups["customers_1"][0]
    assert groups["orders_1"][6] == "card orders"
    assert "unreadable: FeatureStore/views/broken_1/view.json cannot be read" in views["broken_1"][0]
    assert views["fraud_1"][5] == "2"

    group = _get(store, f"/p/{PROJECT}/featurestore/groups/customers/1")
    assert "unreadable: FeatureStore/customers_1/_group.json cannot be read" in group
    assert list(_tables(group)["commits"]) == ["0"]                   # its table is still read

    view = _tables(_get(store, f"/p/{PROJECT}/featurestore/views/fraud/1"))["training-datasets"]
    assert view["2"][1].startswith("unreadable: Training_Datasets/fraud_1/2/training_dataset.json cannot be read")
    assert view["1"][2] == "none"
    assert "view.json cannot be read" in _get(store, f"/p/{PROJECT}/featurestore/views/broken/1")

    orders = _tables(_get(store, f"/p/{PROJECT}/featurestore/groups/orders/1"))["validation"]
    assert orders["9999999999999999999.json"][1].startswith(
        "unreadable: FeatureStore/orders_1/_validation/9999999999999999999.json cannot be read")
    assert len(orders) == 3


PATHS = chromium_paths()


@pytest.mark.slow
@pytest.mark.skipif(PATHS is None, reason="Chromium and chromedriver are not installed (apt-get install chromium "
                    "chromium-driver): the browser test cannot run")
def test_a_group_page_in_chromium_draws_its_charts_without_errors_and_follows_a_commit_link(store):
    pytest.importorskip("selenium")
    from selenium.webdriver.support.ui import WebDriverWait

    first = min(store["commits"])
    env = dict(os.environ, HOPSML_ROOT=str(store["root"]), HOPSML_PROJECT=PROJECT)
    with ui_server(env) as base:
        driver = chrome(PATHS)
        try:
            login(driver, base)
            driver.get(f"{base}p/{PROJECT}/featurestore/")
            driver.find_element("css selector", "#feature-groups tr[data-id='orders_1'] a").click()
            WebDriverWait(driver, 30).until(lambda d: d.find_elements("id", "commits"))
            points = [int(svg.get_attribute("data-points")) for svg in driver.find_elements("css selector",
                                                                                            "#stats svg.chart")]
            assert len(points) >= 4 and all(p > 0 for p in points)
            driver.find_element("css selector", f"#commits tr[data-id='{first}'] a").click()
            WebDriverWait(driver, 30).until(lambda d: f"commit={first}" in d.current_url)
            assert f"after commit {first}" in driver.find_element("id", "statistics").text
            assert not driver.find_elements("css selector", "#stats tr[data-column='channel']")
            errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
            assert errors == [] and driver.execute_script("return window.hacked") is None
        finally:
            driver.quit()


def test_an_online_group_page_shows_its_online_rows_and_last_sync(store):
    fs = hopsworks.login(project=PROJECT).get_feature_store()
    limits = fs.create_feature_group("limits", primary_key=["customerid"], event_time="ts", online_enabled=True)
    limits.insert(pd.DataFrame({"customerid": [1, 1, 2], "ts": [T0, T0 + dt.timedelta(hours=1), T0],
                                "limit": [1.0, 2.0, 3.0]}))
    page = _get(store, f"/p/{PROJECT}/featurestore/groups/limits/1")
    assert "SQLite in the project: 2 rows" in page and "last synced" not in page
    limits.sync_online()
    assert "SQLite in the project: 2 rows, last synced" in _get(store, f"/p/{PROJECT}/featurestore/groups/limits/1")
    assert 'id="online-side"' not in _get(store, f"/p/{PROJECT}/featurestore/groups/orders/1")
