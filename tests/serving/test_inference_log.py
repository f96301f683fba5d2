"""Inference logging: each predict request and its answer in the serving's Parquet log, written by the
instance's writer thread (rolled by size and time, flushed at stop); a full queue drops and counts."""

from __future__ import annotations

import contextlib
import io
import json
import os
import textwrap

import numpy as np
import pyarrow.parquet as pq
from conftest import base_url, export_sklearn, http, iris, running

from hopsml import layout
from hopsml.serving import InferenceLog
from hopsml.serving.control import lifecycle
from hopsml.serving.instance import inference_log


def _folder(settings, name: str) -> str:
    return os.path.join(settings.root, layout.ServingDir.of("test", name).inference_log)


def test_every_request_and_answer_is_logged_with_model_latency_and_status(settings, tmp_path):
    fitted = export_sklearn(settings, tmp_path / "model")
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", instances=2,
                               inference_log=InferenceLog(roll_seconds=3600),
                               settings=settings)
    x, _ = iris()
    rows = x[:3].tolist()
    with running(settings, "iris") as serving:
        for i in range(4):
            assert http("POST", base_url(serving) + ":predict", {"instances": rows[: i % 3 + 1]})[0] == 200
        assert http("POST", base_url(serving) + ":predict", b"{not json")[0] == 400
        assert http("GET", base_url(serving))[0] == 200  # status requests are not inferences: not logged
        assert inference_log.files(_folder(settings, "iris")) == []  # held by the writers until they roll
    table = inference_log.read(_folder(settings, "iris")).to_pylist()  # stopping wrote them
    assert len(table) == 5
    assert inference_log.batch_sizes(_folder(settings, "iris")) == {1: 2, 2: 1, 3: 1}   # the side records kept
    assert pq.read_table(_folder(settings, "iris")).num_rows == 5   # as docs/serving.md reads it: the folder
    assert {r["serving"] for r in table} == {"iris"}
    assert {(r["model_name"], r["model_version"]) for r in table} == {("iris", 1)}
    assert sorted(r["status"] for r in table) == [200, 200, 200, 200, 400]
    assert all(r["latency_ms"] > 0 and r["time"] is not None for r in table)
    good = sorted((r for r in table if r["status"] == 200), key=lambda r: r["rows"])
    assert [r["rows"] for r in good] == [1, 1, 2, 3]
    for r in good:
        sent = json.loads(r["inputs"])["instances"]
        assert json.loads(r["response"]) == {"predictions": fitted.predict(np.array(sent)).tolist()}
    bad = next(r for r in table if r["status"] == 400)
    assert bad["request"] == "{not json" and "not valid JSON" in json.loads(bad["response"])["error"]
    assert bad["rows"] is None
    assert lifecycle.get_inference_log("iris", settings) == _folder(settings, "iris")
    from hopsml import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--root", settings.root, "--project", "test", "serving", "status", "iris"]) == 0
    assert f"inference log: {_folder(settings, 'iris')} (5 requests, latency p50" in out.getvalue()


TRANSFORMER = '''
class Transformer:
    def preprocess(self, inputs):
        return {"instances": [[v / 10.0 for v in row] for row in inputs["instances"]]}

    def postprocess(self, outputs):
        return outputs
'''


def test_the_inputs_are_what_the_model_got_after_the_transformer_and_modes_pick_columns(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    resources = os.path.join(settings.root, "Projects/test/Resources")
    os.makedirs(resources)
    with open(os.path.join(resources, "transformer.py"), "w") as out:
        out.write(textwrap.dedent(TRANSFORMER))
    lifecycle.create_or_update("iris", "Models/iris", "PYTHON", transformer="Resources/transformer.py",
                               inference_logging="MODEL_INPUTS", settings=settings)
    with running(settings, "iris") as serving:
        assert http("POST", base_url(serving) + ":predict", {"instances": [[51.0, 35.0, 14.0, 2.0]]})[0] == 200
    (record,) = inference_log.read(_folder(settings, "iris")).to_pylist()
    assert json.loads(record["request"]) == {"instances": [[51.0, 35.0, 14.0, 2.0]]}
    assert json.loads(record["inputs"]) == {"instances": [[5.1, 3.5, 1.4, 0.2]]}
    assert record["response"] is None  # MODEL_INPUTS keeps no predictions


def test_no_log_without_inference_logging_or_without_a_topic(settings, tmp_path):
    export_sklearn(settings, tmp_path / "model")
    for name, options in (("off", {"inference_logging": None}), ("notopic", {"topic_name": "NONE"})):
        lifecycle.create_or_update(name, "Models/iris", "PYTHON", settings=settings, **options)
        with running(settings, name) as serving:
            assert http("POST", base_url(serving) + ":predict", {"instances": [[5.1, 3.5, 1.4, 0.2]]})[0] == 200
        assert not os.path.exists(_folder(settings, name))
        assert lifecycle.get_inference_log(name, settings) is None


def _record(i: int) -> inference_log._Record:
    return inference_log._Record(time=1.7e9 + i, status=200, latency_ms=1.0, request=b'{"instances": [[1]]}',
                                 inputs=None, response=b'{"predictions": [0]}')


def test_a_full_queue_drops_and_counts_rather_than_waiting(tmp_path):
    options = inference_log.LogOptions(folder=str(tmp_path), serving="s", model_name="m", model_version=1,
                                       queue_size=2, roll_seconds=3600)
    logger = inference_log.InferenceLogger(options, 0, start=False)  # a writer that has not caught up yet
    for i in range(5):
        logger.put(_record(i))
    assert logger.dropped == 3
    logger.start()
    logger.close()
    (path,) = inference_log.files(str(tmp_path))
    table = pq.read_table(path).to_pylist()
    assert [r["dropped"] for r in table] == [3, 0]
    assert inference_log.summary(str(tmp_path))["dropped"] == 3


def test_files_roll_by_size(tmp_path):
    options = inference_log.LogOptions(folder=str(tmp_path), roll_bytes=100, roll_seconds=3600)
    logger = inference_log.InferenceLogger(options, 0, start=False)
    for i in range(3):
        logger.put(_record(i))
    logger.start()
    logger.close()
    assert len(inference_log.files(str(tmp_path))) == 3
    assert inference_log.read(str(tmp_path)).num_rows == 3
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
