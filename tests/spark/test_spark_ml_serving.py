"""A PySpark ML pipeline (VectorAssembler + StandardScaler + LogisticRegression) exported to the registry and
served without a JVM: its ONNX form answers as Spark's transform does on the test split, for rows and for rows of
named values; a stage with no converter is refused at export, naming it."""

from __future__ import annotations

import pytest

pytest.importorskip("onnxmltools")
pytest.importorskip("onnxruntime")


def test_a_spark_ml_pipeline_is_served_without_a_jvm_as_spark_predicts(spark, root):
    import json
    import urllib.request

    import pandas as pd
    from pyspark.ml import Pipeline
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.feature import SQLTransformer, StandardScaler, VectorAssembler
    from sklearn.datasets import load_iris

    from hopsml import model, serving
    from hopsml.model import ModelError

    iris = load_iris(as_frame=True).frame
    iris.columns = ["sl", "sw", "pl", "pw", "label"]
    frame = spark.createDataFrame(pd.DataFrame(iris.astype(float)))
    train, test = frame.randomSplit([0.8, 0.2], seed=3)
    inputs = ["sl", "sw", "pl", "pw"]
    fitted = Pipeline(stages=[VectorAssembler(inputCols=inputs, outputCol="raw"),
                              StandardScaler(inputCol="raw", outputCol="features"),
                              LogisticRegression(featuresCol="features", labelCol="label")]).fit(train)
    version = model.export_spark_ml(fitted, "sparkiris", train.select(*inputs), metrics={"rows": train.count()})
    paths = {f["path"] for f in version.files}
    assert "model.onnx" in paths and any(p.startswith("spark/metadata/") for p in paths)

    rows = test.select(*inputs).toPandas().values.tolist()
    expected = [r.prediction for r in fitted.transform(test).select("prediction").collect()]
    serving.create_or_update("sparkiris", "Models/sparkiris", "PYTHON", model_version=version.version)
    serving.start("sparkiris")
    try:
        url = serving.get_internal_endpoints("sparkiris")[0] + "/v1/models/sparkiris:predict"
        for body in ({"instances": rows}, {"instances": [dict(zip(inputs, r)) for r in rows]}):
            request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as answer:
                predicted = json.loads(answer.read())["predictions"]
            assert [float(p) for p in predicted] == expected
    finally:
        serving.stop("sparkiris")

    odd = Pipeline(stages=[SQLTransformer(statement="SELECT *, sl * 2 AS sl2 FROM __THIS__"),
                           VectorAssembler(inputCols=inputs, outputCol="features"),
                           LogisticRegression(labelCol="label")]).fit(train)
    with pytest.raises(ModelError, match="stage SQLTransformer .* has no ONNX converter"):
        model.export_spark_ml(odd, "odd", inputs)
