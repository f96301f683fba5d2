"""The training function of the retraining-loop tests: a logistic regression on a feature view's training dataset,
which it reads through its parameter's *default* (notebook 08's pattern, `def train(dataset=...)`), so the
experiment records no argument naming it. Importable by name ('wage_model:train'), as a DAG needs it."""

from __future__ import annotations

from typing import Any

FIRST_TRAINING_DATASET = "wageview_1_td1"   # the view's first training dataset, which the test module creates


def _split(dataset: str, split: str) -> tuple[Any, Any]:
    import numpy as np

    from hopsml.data import reader

    batches = list(reader(dataset, split=split, shuffle=False))
    return (np.concatenate([b["features"] for b in batches]).astype(np.float64),
            np.concatenate([b["label"] for b in batches]))


def train(dataset: str = FIRST_TRAINING_DATASET, c: float = 1.0) -> dict[str, Any]:
    import joblib
    from sklearn.linear_model import LogisticRegression

    from hopsml import tensorboard

    x, y = _split(dataset, "train")
    model = LogisticRegression(C=c, max_iter=500).fit(x, y)
    x_test, y_test = _split(dataset, "test")
    joblib.dump(model, tensorboard.logdir() + "model.joblib")
    return {"accuracy": float(model.score(x_test, y_test)), "train_rows": int(len(y))}


def train_in_memory(view: str = "wagesplit", c: float = 1.0) -> dict[str, Any]:
    """The view split in memory by the function itself (docs/featurestore.md's opening example)."""
    import joblib
    from sklearn.linear_model import LogisticRegression

    from hopsml import hopsworks, tensorboard

    fv = hopsworks.login().get_feature_store().get_feature_view(view, 1)
    x_train, x_test, y_train, y_test = fv.train_test_split(test_size=0.25, seed=3)
    model = LogisticRegression(C=c, max_iter=500).fit(x_train.to_numpy(dtype=float), y_train.iloc[:, 0])
    joblib.dump(model, tensorboard.logdir() + "model.joblib")
    return {"accuracy": float(model.score(x_test.to_numpy(dtype=float), y_test.iloc[:, 0]))}
