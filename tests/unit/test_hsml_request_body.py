"""`deployment.predict(data=, inputs=)` sends the body hsml 4.2's REST path sends (serving_engine's
_validate_inference_payload and _parse_inference_inputs): a row of plain values is one instance, so a predictor's
`predict(inputs)` reads the first value at `inputs[0][0]`, as the fraud_online tutorial's does after
`deployment.predict(inputs=[cc_num])`; and `describe()` prints the deployment's and its state's fields as JSON."""

from __future__ import annotations

import json

import pytest

from hopsml.hopsworks.deployments import InferenceLogger, Predictor, PredictorState, Resources, request_body
from hopsml.serving.definition import ServingError


@pytest.mark.parametrize("inputs, instances", [
    ([4467360740682089], [[4467360740682089]]),          # one row of plain values: one instance
    ([1.0, [2.0]], [[1.0, [2.0]]]),                      # any plain value makes the list one row
    ([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.0]]),  # rows: as given
    ([{"a": 1}, {"a": 2}], [{"a": 1}, {"a": 2}]),
    ({"cc_num": 7}, [[{"cc_num": 7}]]),                  # a dict: one instance of one value
])
def test_inputs_become_two_dimensional_instances_as_hsml_makes_them(inputs, instances):
    assert request_body(inputs=inputs) == {"instances": instances}


def test_data_is_sent_as_given_once_it_has_rows():
    body = {"instances": [[1, 2]], "key2": "value2"}
    assert request_body(data=body) is body
    assert request_body(data={"inputs": [[1]]}) == {"inputs": [[1]]}


@pytest.mark.parametrize("data, inputs, message", [
    ({"instances": [[1]]}, [1], "not both"),
    (None, None, "takes a list"),
    (None, 7, "not a int"),
    (None, [], "nothing to predict"),
    ([[1]], None, "takes the request body as a dict"),
    ({"rows": [[1]]}, None, "lacks the 'instances' key"),
    ({"instances": [1, 2]}, None, "non-empty list of non-empty rows"),
    ({"instances": []}, None, "non-empty list of non-empty rows"),
])
def test_bodies_hsml_refuses_are_refused_with_what_to_send(data, inputs, message):
    with pytest.raises(ServingError, match=message):
        request_body(data=data, inputs=inputs)


def test_describe_prints_the_fields_as_sorted_json(capsys):
    predictor = Predictor("fraud", 1, "fraudonline", "/Projects/p/Models/predict.py", Resources(num_instances=2),
                          InferenceLogger("MODEL_INPUTS"))
    predictor.describe()
    printed = json.loads(capsys.readouterr().out)
    assert printed == {"name": "fraudonline", "model_name": "fraud", "model_version": 1, "model_server": "PYTHON",
                       "serving_tool": "DEFAULT", "predictor": "/Projects/p/Models/predict.py", "api_protocol": "REST",
                       "num_instances": 2, "inference_logging": "MODEL_INPUTS"}
    PredictorState("Failed", "instance 0 exited", 0).describe()
    assert json.loads(capsys.readouterr().out) == {"available_instances": 0, "status": "Failed",
                                                   "condition": {"reason": "instance 0 exited"}}
