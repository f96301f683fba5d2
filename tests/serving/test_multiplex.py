"""Several models behind one handler (hopsml.serving.instance.multiplex), with real models exported to the registry and
real Requests answered in an event loop: a model loads on its first request, requests are routed by name and
version (v1 and v2 paths), the least recently used model is evicted under a count bound and under a memory
bound (models measured by the process's resident memory), a model that fails to load answers 503 for its own
name only and is tried again after its back-off, concurrent first requests share one load, and a model with a
request in flight is not evicted."""

from __future__ import annotations

import asyncio
import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import export_sklearn, iris

from hopsml import config, layout
from hopsml.fs import Storage
from hopsml.model import registry
from hopsml.serving.instance.http_server import Request
from hopsml.serving.instance.multiplex import ModelMultiplexer, ModelSource, model_app, rss_bytes

MiB = 2**20
BIG_ROWS = 8 * MiB   # float64 values a "big" model holds: 64 MiB, touched, so resident


def registry_source(settings: config.Settings):
    """resolve(name, version) over the project's registry: the version's folder, and its predictor.py if any."""
    storage = Storage(settings.root)

    def resolve(name: str, version: int | None) -> ModelSource:
        found = registry.get_model(name, version, settings=settings)
        folder = storage.local_path(layout.model_dir(settings.project, found.name, found.version))
        assert folder is not None
        script = os.path.join(folder, "predictor.py")
        return ModelSource(name, found.version, folder, script if os.path.isfile(script) else None)

    def names() -> list[str]:
        return [m.name for m in registry.list_models(settings=settings)]

    return resolve, names


def multiplexer(settings: config.Settings, make_app=model_app, **bounds) -> ModelMultiplexer:
    resolve, names = registry_source(settings)
    return ModelMultiplexer(resolve, names, make_app, **bounds)


def export_script(settings: config.Settings, folder: Path, name: str, script: str) -> None:
    """A model that is only a hops predictor script (it builds its model itself)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "predictor.py").write_text(textwrap.dedent(script))
    registry.export(str(folder), name, settings=settings)


BIG = f'''
import numpy as np


class Predict:
    def __init__(self):
        self.weights = np.ones({BIG_ROWS})   # np.ones writes every page: all of it is resident

    def predict(self, inputs):
        return [float(self.weights.sum())] * len(inputs)
'''


def post(path: str, body: object) -> Request:
    return Request("POST", path, json.dumps(body).encode())


def get(path: str) -> Request:
    return Request("GET", path, b"")


async def ask(mux: ModelMultiplexer, request: Request) -> tuple[int, dict]:
    status, body = await mux.handle(request)
    return status, json.loads(body)


def rows() -> np.ndarray:
    return iris()[0][::15]


def predict(name: str, version: int | None = None) -> Request:
    where = name if version is None else f"{name}/versions/{version}"
    return post(f"/v1/models/{where}:predict", {"instances": rows().tolist()})


def loaded(mux: ModelMultiplexer) -> set[tuple[str, int]]:
    return {(m.name, m.version) for m in mux.loaded()}


def test_routes_by_name_and_version_loading_each_on_its_first_request(settings, tmp_path):
    from sklearn.dummy import DummyClassifier

    fitted = export_sklearn(settings, tmp_path / "v1")          # iris version 1: a logistic regression
    x, y = iris()
    constant = DummyClassifier(strategy="constant", constant=2).fit(x, y)
    import joblib

    (tmp_path / "v2").mkdir()
    joblib.dump(constant, tmp_path / "v2" / "model.joblib")
    registry.export(str(tmp_path / "v2" / "model.joblib"), "iris", settings=settings)   # version 2
    export_sklearn(settings, tmp_path / "other", name="other")
    mux = multiplexer(settings)
    first, second = fitted.predict(rows()).tolist(), constant.predict(rows()).tolist()
    assert first != second

    async def scenario() -> None:
        status, body = await ask(mux, get("/v1/models/iris"))     # status is told without loading
        assert status == 200 and body["model_version_status"][0]["state"] == "END"
        assert await ask(mux, get("/v2/models/iris/ready")) == (200, {"name": "iris", "ready": False})
        assert mux.loads == 0
        assert await ask(mux, predict("iris", 1)) == (200, {"predictions": first})
        assert loaded(mux) == {("iris", 1)}
        assert await ask(mux, predict("iris", 2)) == (200, {"predictions": second})
        assert await ask(mux, predict("iris")) == (200, {"predictions": second})   # the default: the latest
        assert mux.loads == 2
        infer = {"inputs": [{"name": "input-0", "shape": list(rows().shape), "datatype": "FP64",
                             "data": rows().ravel().tolist()}]}
        status, body = await ask(mux, post("/v2/models/iris/versions/1/infer", infer))
        assert status == 200 and body["model_version"] == "1" and body["outputs"][0]["data"] == first
        status, body = await ask(mux, post("/v2/models/iris/infer", infer))
        assert status == 200 and body["model_version"] == "2" and body["outputs"][0]["data"] == second
        status, body = await ask(mux, get("/v1/models/iris/versions/1/metadata"))
        assert status == 200 and body["model_spec"]["version"] == "1"
        assert (await ask(mux, get("/v2/models/iris/versions/1/ready")))[1]["ready"] is True
        assert await ask(mux, predict("other")) == (200, {"predictions": first})
        assert mux.loads == 3 and mux.evictions == 0
        # the server's own paths, and what it holds
        assert await ask(mux, get("/v2/health/ready")) == (200, {"ready": True})
        assert await ask(mux, get("/v2/health/live")) == (200, {"live": True})
        status, body = await ask(mux, get("/v1/models"))
        assert status == 200 and body["models"] == ["iris", "other"]
        assert {(m["name"], m["version"]) for m in body["loaded"]} == {("iris", 1), ("iris", 2), ("other", 1)}
        assert (await ask(mux, get("/v2/models")))[1]["models"] == ["iris", "other"]
        # what is not here: a 404 that names what is
        status, body = await ask(mux, predict("nothing"))
        assert status == 404 and "'nothing'" in body["error"] and "iris, other" in body["error"]
        status, body = await ask(mux, predict("iris", 7))
        assert status == 404 and "no version 7" in body["error"] and "versions: 1, 2" in body["error"]
        status, body = await ask(mux, get("/v1/models/iris/versions/x"))
        assert status == 404 and "'x'" in body["error"]
        assert (await ask(mux, get("/nowhere")))[0] == 404
        assert (await ask(mux, post("/v2/health/ready", {})))[0] == 405
        status, body = await ask(mux, post("/v1/models/iris:predict", {"instances": [[1.0, 2.0]]}))
        assert status == 400 and "shape 4" in body["error"]     # the model's own answer to a bad request
        assert mux.loads == 3

    try:
        asyncio.run(scenario())
    finally:
        mux.close()


def test_the_least_recently_used_model_is_evicted_past_the_count_bound(settings, tmp_path):
    for name in ("a", "b", "c"):
        fitted = export_sklearn(settings, tmp_path / name, name=name)
    want = {"predictions": fitted.predict(rows()).tolist()}
    mux = multiplexer(settings, max_models=2)

    async def scenario() -> None:
        for name in ("a", "b", "a"):
            assert await ask(mux, predict(name)) == (200, want)
        assert loaded(mux) == {("a", 1), ("b", 1)}
        assert await ask(mux, predict("c")) == (200, want)     # b is the least recently used
        assert loaded(mux) == {("a", 1), ("c", 1)}
        assert [m.name for m in mux.loaded()] == ["c", "a"]    # most recently used first
        assert await ask(mux, predict("b")) == (200, want)     # now a is
        assert loaded(mux) == {("b", 1), ("c", 1)}
        assert (mux.loads, mux.evictions) == (4, 2)
        status, body = await ask(mux, get("/v1/models/a"))
        assert body["model_version_status"][0]["state"] == "END"   # evicted: told, not loaded again
        assert mux.loads == 4

    try:
        asyncio.run(scenario())
    finally:
        mux.close()


def test_the_memory_bound_evicts_by_measured_size_and_frees_the_memory(settings, tmp_path):
    for name in ("big-a", "big-b"):
        export_script(settings, tmp_path / name, name, BIG)
    export_sklearn(settings, tmp_path / "small", name="small")
    mux = multiplexer(settings, max_memory_bytes=100 * MiB)
    full = {"predictions": [float(BIG_ROWS)] * len(rows())}

    async def scenario() -> None:
        assert (await ask(mux, predict("small")))[0] == 200
        assert await ask(mux, predict("big-a")) == (200, full)
        sizes = {m.name: m.size_bytes for m in mux.loaded()}
        assert sizes["big-a"] >= 64 * MiB, sizes                 # the array, measured as the RSS growth
        assert sizes["small"] < 64 * MiB, sizes
        assert loaded(mux) == {("small", 1), ("big-a", 1)}
        assert (await ask(mux, predict("small")))[0] == 200      # big-a is the least recently used now
        before = rss_bytes()
        assert await ask(mux, predict("big-b")) == (200, full)   # both bigs pass 100 MiB: big-a goes, small stays
        assert loaded(mux) == {("small", 1), ("big-b", 1)}
        assert mux.evictions == 1
        assert rss_bytes() < before + 32 * MiB                    # big-a's array was given back, not kept
        assert mux.bytes_loaded() <= 100 * MiB
        # big-a's size is known now: big-b (the least recently used after small's turn) goes before big-a loads
        assert (await ask(mux, predict("small")))[0] == 200
        assert await ask(mux, predict("big-a")) == (200, full)
        assert loaded(mux) == {("small", 1), ("big-a", 1)}
        assert (mux.loads, mux.evictions) == (4, 2)

    try:
        asyncio.run(scenario())
    finally:
        mux.close()


BROKEN = '''
import os


class Predict:
    def __init__(self):
        if not os.path.exists({flag!r}):
            raise RuntimeError("the weights file is missing")

    def predict(self, inputs):
        return [1] * len(inputs)
'''


@pytest.mark.parametrize("retry_s", [3600.0, 0.0], ids=["within-back-off", "after-back-off"])
def test_a_model_that_fails_to_load_answers_503_for_its_own_name_only(settings, tmp_path, retry_s):
    flag = tmp_path / "weights-present"
    export_script(settings, tmp_path / "broken", "broken", BROKEN.format(flag=str(flag)))
    fitted = export_sklearn(settings, tmp_path / "iris")
    mux = multiplexer(settings, retry_s=retry_s)

    async def scenario() -> None:
        status, body = await ask(mux, predict("broken"))
        assert status == 503
        assert body["model"] == "broken" and "version 1" in body["error"]
        assert "RuntimeError: the weights file is missing" in body["error"]
        assert await ask(mux, predict("iris")) == (200, {"predictions": fitted.predict(rows()).tolist()})
        status, body = await ask(mux, get("/v1/models/broken"))
        assert body["model_version_status"][0]["status"]["error_code"] == "UNAVAILABLE"
        assert [f["name"] for f in (await ask(mux, get("/v2/models")))[1]["failed"]] == ["broken"]
        flag.touch()   # the model is fixed
        status, body = await ask(mux, predict("broken"))
        if retry_s:    # not tried again on every request: within the back-off, the last failure is answered
            assert status == 503 and "missing" in body["error"] and body["retry_after_s"] > 0
            assert mux.failures == 1 and mux.loads == 1
        else:          # tried again on the first request after the back-off
            assert (status, body) == (200, {"predictions": [1] * len(rows())})
            assert mux.failures == 1 and mux.loads == 2 and mux.failed() == []

    try:
        asyncio.run(scenario())
    finally:
        mux.close()


COUNTED = '''
import time


class Predict:
    def __init__(self):
        with open({log!r}, "a") as log:
            log.write("loaded\\n")
        time.sleep(0.2)   # a slow load: every request below arrives while it runs

    def predict(self, inputs):
        return [0] * len(inputs)
'''


def test_concurrent_first_requests_share_one_load(settings, tmp_path):
    log = tmp_path / "loads.txt"
    export_script(settings, tmp_path / "slow", "slow", COUNTED.format(log=str(log)))
    mux = multiplexer(settings)

    async def scenario() -> list[tuple[int, dict]]:
        requests = [predict("slow")] * 4 + [predict("slow", 1)] * 4 + \
            [post("/v2/models/slow/infer", {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                                        "data": [1, 2, 3, 4]}]})] * 4
        return await asyncio.gather(*(ask(mux, r) for r in requests))

    try:
        answers = asyncio.run(scenario())
    finally:
        mux.close()
    assert [status for status, _ in answers] == [200] * 12
    assert log.read_text() == "loaded\n"
    assert mux.loads == 1


class GatedApp:
    """A model's app whose requests for "held" wait at a gate, as a request waits for its batch: in flight on the
    event loop while others are answered."""

    def __init__(self, app, gate: dict[str, asyncio.Event]) -> None:
        self.app, self.gate = app, gate

    async def handle(self, request: Request):
        if request.path.startswith("/v1/models/held"):
            self.gate["entered"].set()
            await self.gate["open"].wait()
        return await self.app.handle(request)


def test_a_model_with_a_request_in_flight_is_not_evicted(settings, tmp_path):
    fitted = export_sklearn(settings, tmp_path / "held", name="held")
    export_sklearn(settings, tmp_path / "next", name="next")
    want = (200, {"predictions": fitted.predict(rows()).tolist()})
    gate: dict[str, asyncio.Event] = {}
    mux = multiplexer(settings, lambda *made: GatedApp(model_app(*made), gate), max_models=1)

    async def scenario() -> None:
        gate.update(entered=asyncio.Event(), open=asyncio.Event())
        held = asyncio.ensure_future(ask(mux, predict("held")))
        await asyncio.wait_for(gate["entered"].wait(), 60)   # held is loaded and its request in flight
        assert await ask(mux, predict("next")) == want        # loaded past the bound: held is busy
        assert loaded(mux) == {("held", 1), ("next", 1)} and mux.evictions == 0
        assert not held.done()
        gate["open"].set()
        assert await asyncio.wait_for(held, 60) == want
        assert loaded(mux) == {("next", 1)} and mux.evictions == 1   # evicted once its request ended

    try:
        asyncio.run(scenario())
    finally:
        mux.close()


def test_bounds_are_checked():
    from hopsml.serving.definition import ServingError

    def resolve(name, version):
        raise LookupError(name)

    for bounds in ({"max_models": 0}, {"max_memory_bytes": -1}, {"max_models": True}, {"retry_s": -1.0}):
        with pytest.raises(ServingError, match=next(iter(bounds))):
            ModelMultiplexer(resolve, list, **bounds)
