"""The training function the pipeline tests run as an experiment: a logistic regression on the train split of a
prepared iris table, scored on its test split, saved into the run as model.joblib. Importable by name
('iris_model:train'), as an ExperimentOperator and a DAG written from lineage need it."""

from __future__ import annotations

from typing import Any


def _split(dataset: str, split: str) -> tuple[Any, Any]:
    import numpy as np

    from hopsml.data import reader

    batches = list(reader(dataset, split=split, shuffle=False))
    return (np.concatenate([b["features"] for b in batches]).astype(np.float64),
            np.concatenate([b["label"] for b in batches]))


def train(dataset: str = "iris", c: float = 1.0) -> dict[str, Any]:
    import joblib
    from sklearn.linear_model import LogisticRegression

    from hopsml import tensorboard

    x, y = _split(dataset, "train")
    model = LogisticRegression(C=c, max_iter=500).fit(x, y)
    x_test, y_test = _split(dataset, "test")
    joblib.dump(model, tensorboard.logdir() + "model.joblib")
    return {"accuracy": float(model.score(x_test, y_test)), "train_rows": int(len(y))}
