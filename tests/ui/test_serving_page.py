"""The servings list and a serving's page in the web view, over a real serving: iris prepared by Spark, a model
exported from a run that read it, served with batching, asked for the training rows with one feature shifted,
stopped. Through Flask's test client, then in a headless Chromium when one is installed."""

from __future__ import annotations

import json
import os
import urllib.request

import numpy as np
import pytest

from hopsml import config, layout
from hopsml.data import prepare_table, samples
from hopsml.data.readers import reader
from hopsml.fs import Storage
from hopsml.model import registry
from hopsml.serving import InferenceLog
from hopsml.serving.control import lifecycle
from hopsml.tracking.run_context import active_run

pytest.importorskip("flask")

PROJECT = "test"
REQUESTS = 10


def _predict(serving: lifecycle.Serving, rows: list) -> int:
    url = f"http://{serving.internal_ips[0]}:{serving.internal_port}/v1/models/{serving.name}:predict"
    request = urllib.request.Request(url, data=json.dumps({"instances": rows}).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status


@pytest.fixture(scope="module")
def served(spark, tmp_path_factory):
    """The root, after serving 'iris' answered REQUESTS requests of training rows with sepal_width shifted."""
    import joblib
    from sklearn.linear_model import LogisticRegression

    base = tmp_path_factory.mktemp("serving-page")
    settings = config.load(environ={}, root=str(base / "root"), project=PROJECT)
    csv = str(base / "iris.csv")
    samples.write_table(csv, bad_rows=False)
    prepare_table(csv, "iris", label="species", standardize=True, settings=settings, spark=spark)
    with active_run(Storage(settings.root), layout.ExperimentDir.of(PROJECT, "local-1", 1)):
        batches = list(reader("iris", split="train", shuffle=False, settings=settings))
        features = np.concatenate([b["features"] for b in batches]).astype(np.float64)
        labels = np.concatenate([b["label"] for b in batches])
        joblib.dump(LogisticRegression(max_iter=500).fit(features, labels), str(base / "model.joblib"))
        registry.export(str(base / "model.joblib"), "iris", settings=settings)
    features[:, 1] += 1.5
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", batching_enabled=True,
                               inference_log=InferenceLog(roll_seconds=3600), settings=settings)
    serving = lifecycle.start("iris", settings=settings)
    try:
        for chunk in np.array_split(features, REQUESTS):
            assert _predict(serving, chunk.tolist()) == 200
    finally:
        lifecycle.stop("iris", settings=settings)
    return settings


def test_the_servings_list_the_serving_page_and_the_models_link(served):
    from hopsml.ui import create_app

    client = create_app(served).test_client()
    page = client.get(f"/p/{PROJECT}/servings/").get_data(as_text=True)
    assert 'data-id="iris" data-state="Stopped"' in page and "iris:1" in page
    page = client.get(f"/p/{PROJECT}/servings/iris").get_data(as_text=True)
    assert f'<td class="num" id="requests">{REQUESTS}</td>' in page
    assert 'id="p50"' in page and 'id="p99"' in page and 'id="batch-sizes"' in page
    assert 'data-id="sepal_width" data-drift="yes"' in page
    for name in ("sepal_length", "petal_length", "petal_width", "petal_size"):
        assert f'data-id="{name}" data-drift="no"' in page
    assert 'id="preprocessing-ok"' in page
    assert page.count('class="chart histogram"') == 4 and page.count('class="chart bars"') == 1
    models = client.get(f"/p/{PROJECT}/models/").get_data(as_text=True)
    assert f'href="/p/{PROJECT}/servings/iris"' in models
    assert client.get(f"/p/{PROJECT}/servings/nothere").status_code == 404
    assert client.get(f"/p/{PROJECT}/servings/..").status_code == 404


def test_the_serving_page_in_a_browser(served, tmp_path):
    from browser import artifacts_dir, chrome, chromium_paths, login, ui_server

    pytest.importorskip("selenium")
    paths = chromium_paths()
    if paths is None:
        pytest.skip("Chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.support.ui import WebDriverWait

    env = {**os.environ, "HOPSML_ROOT": served.root, "HOPSML_PROJECT": PROJECT}
    env.pop("HOPSML_CONF", None)
    with ui_server(env) as url:
        driver = chrome(paths)
        try:
            login(driver, url)
            driver.get(url + f"p/{PROJECT}/servings/iris")
            WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")
            errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
            assert errors == []
            rows = driver.find_elements("css selector", "#drift tbody tr")
            assert {r.get_attribute("data-id"): r.get_attribute("data-drift") for r in rows}["sepal_width"] == "yes"
            points = [int(svg.get_attribute("data-points"))
                      for svg in driver.find_elements("css selector", "svg.chart")]
            assert len(points) == 5 and all(p > 0 for p in points)
            driver.set_window_size(1400, 2400)
            driver.save_screenshot(os.path.join(artifacts_dir(str(tmp_path)), "serving.png"))
            driver.find_element("link text", "Servings").click()
            WebDriverWait(driver, 30).until(lambda d: d.find_elements("css selector", "#servings tbody tr"))
        finally:
            driver.quit()
