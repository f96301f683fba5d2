"""PySpark ML pipelines into the registry, to be served without a JVM (the role MLeap had): a fitted
`PipelineModel` is converted to ONNX by onnxmltools' Spark ML converters and registered as `model.onnx`, which a
serving runs with onnxruntime; the Spark model itself is kept beside it (`spark/`), for batch scoring on Spark.

One ONNX input per input column (numbers as float, strings as string), so a serving takes rows in the order of
`inputs` (or rows of named values); its answer is the pipeline's `prediction`. A stage onnxmltools cannot convert
is refused at export, naming it, before anything is registered.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from hopsml import config
from hopsml.errors import ModelError
from hopsml.model.registry import ModelVersion, export


def export_spark_ml(pipeline_model: Any, model_name: str, inputs: object, *, spark: object = None,
                    metrics: Mapping[str, Any] | None = None, description: str | None = None,
                    settings: config.Settings | None = None) -> ModelVersion:
    """Register a fitted PySpark ML `PipelineModel` (or a single fitted model) as the next version of
    `model_name`: `model.onnx` for servings and `spark/` as Spark saved it. `inputs` names the columns it reads,
    in the order a served row gives them: a Spark DataFrame (its schema tells numbers from strings) or a list of
    numeric column names."""
    try:
        from onnxmltools import convert_sparkml
        from onnxmltools.convert.common.data_types import FloatTensorType, StringTensorType
    except ImportError:
        raise ModelError("exporting a Spark ML model for serving needs onnxmltools: pip install "
                         "onnxmltools onnxruntime (hopsml's spark-ml extra)") from None
    columns = _columns(inputs)
    _check_stages(pipeline_model)
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
    types = [(name, StringTensorType([None, 1]) if kind == "string" else FloatTensorType([None, 1]))
             for name, kind in columns]
    try:
        onnx = convert_sparkml(pipeline_model, model_name, types, spark_session=spark)
    except Exception as exc:   # onnxmltools raises plain errors: say what failed and what to do
        raise ModelError(f"Spark ML model {model_name!r} could not be converted to ONNX ({type(exc).__name__}: "
                         f"{exc}); check that `inputs` names the columns its first stage reads") from exc
    folder = tempfile.mkdtemp(prefix=f"hopsml-spark-ml-{model_name}-")
    with open(os.path.join(folder, "model.onnx"), "wb") as out:
        out.write(onnx.SerializeToString())
    pipeline_model.write().overwrite().save("file://" + os.path.join(folder, "spark"))
    return export(folder, model_name, metrics=metrics, description=description, settings=settings)


def _columns(inputs: object) -> list[tuple[str, str]]:
    """(name, 'number' or 'string') of each input column, in order."""
    schema = getattr(inputs, "schema", None)
    if schema is not None:
        from pyspark.sql.types import NumericType, StringType

        out = []
        for field in schema.fields:
            if isinstance(field.dataType, StringType):
                out.append((field.name, "string"))
            elif isinstance(field.dataType, NumericType):
                out.append((field.name, "number"))
            else:
                raise ModelError(f"input column {field.name!r} is {field.dataType.simpleString()}; a served row "
                                 "carries numbers and strings: select the columns the pipeline's first stage reads")
        return out
    if isinstance(inputs, str) or not isinstance(inputs, Sequence) or not inputs:
        raise ModelError("inputs= names the columns the pipeline reads: a Spark DataFrame of them, or a list of "
                         "numeric column names")
    return [(str(name), "number") for name in inputs]


def _check_stages(pipeline_model: object) -> None:
    """Refuse, naming it, a stage onnxmltools has no converter for (before any work)."""
    from onnxmltools.convert.sparkml.ops_names import get_sparkml_operator_name

    for stage in getattr(pipeline_model, "stages", [pipeline_model]):
        try:
            get_sparkml_operator_name(type(stage))
        except (ValueError, KeyError, RuntimeError):
            raise ModelError(f"stage {type(stage).__name__} ({stage.uid}) has no ONNX converter in onnxmltools, so "
                             "the pipeline cannot be served without a JVM; replace the stage, or score it on Spark "
                             "(hopsml.model.predict)") from None
