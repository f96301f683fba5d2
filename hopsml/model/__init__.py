"""Model registry and batch inference, with hops' `hops.model` names.

    from hopsml import model
    model.export("/tmp/model.npz", "digits", metrics={"accuracy": 0.93})
    best = model.get_best_model("digits", "accuracy", "max")
    small = model.quantize("digits", best.version, eval_data=(x_test, y_test))   # int8 weights, a new version
    model.export_spark_ml(pipeline_model, "churn", train_df.select("age", "plan"))   # served without a JVM
    summary = model.predict(best, "digits", predict_fn, split="test")

Versions live in `Projects/<project>/Models/<name>/<version>/`; predictions become a dataset.
Importing this package starts nothing; `predict` imports pyspark only when called.
"""

from __future__ import annotations

from hopsml.model.inference import PredictionError, PredictionSummary, predict
from hopsml.model.registry import (
    Metric,
    ModelError,
    ModelExistsError,
    ModelNotFoundError,
    ModelVersion,
    download_model,
    export,
    get_best_model,
    get_model,
    list_models,
    quantize,
    resolve,
    versions,
)
from hopsml.model.spark_ml import export_spark_ml

list = list_models  # noqa: A001 - hops-style `model.list()` for notebooks

__all__ = ["Metric", "ModelError", "ModelExistsError", "ModelNotFoundError", "ModelVersion", "PredictionError",
           "PredictionSummary", "download_model", "export", "export_spark_ml", "get_best_model", "get_model", "list",
           "list_models", "predict", "quantize", "resolve", "versions"]
