"""A project root with real runs made by hopsml's own API, for the web view's tests: a launch with
per-step metrics, a 2-rank all-reduce on a prepared digits dataset that exports a model, a grid
search with early stopping, a random search with a log-scale parameter, a failed run, a prepared
table, and records the CLI shows as LOST and BROKEN."""

from __future__ import annotations

import json
import os
import time

from hopsml import experiment, layout, tensorboard
from hopsml.data import prepare_images, prepare_table, samples
from hopsml.examples import digits
from hopsml.fs import Storage

PROJECT = "test"
# Names and texts that would run script if a page did not escape them.
XSS_NAME = "<script>window.hacked=1<"
XSS_DESCRIPTION = "</script><img src=x onerror=\"window.hacked=2\">"


def _curve(lr: float, epochs: int = 4) -> dict:
    for step in range(epochs):
        tensorboard.log({"loss": 1.0 / (1 + lr * step), "accuracy": lr * step / epochs}, step=step)
    print(f"trained with lr={lr}")
    return {"accuracy": lr * (epochs - 1) / epochs}


def _curve_with_dropout(lr: float, dropout: float) -> dict:
    return _curve(lr * (1 - dropout))


def _lagging_search(markers: str):
    """A trial function whose small-lr trial starts once two others have finished, so the median rule
    has what it needs and stops it (the others leave a file in `markers` as they return)."""

    def train(lr: float) -> dict:
        if lr < 0.2:
            deadline = time.monotonic() + 120
            while len(os.listdir(markers)) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
        steps = 10 if lr < 0.2 else 6
        for step in range(steps):
            tensorboard.log({"accuracy": lr * step}, step=step)
            time.sleep(0.3 if lr < 0.2 else 0.05)
        if lr >= 0.2:
            open(os.path.join(markers, str(lr)), "w").close()
        return {"accuracy": lr * (steps - 1)}

    return train


def _failing(lr: float) -> dict:
    raise ValueError(f"diverged at lr={lr}")


def _train_and_export() -> dict:
    return digits.train_on_dataset("digits", lr=0.5, epochs=2, batch_size=16, export_as="digits")


def build(tmp: str) -> dict:
    """Runs, datasets and a model under `tmp`/root (HOPSML_ROOT and HOPSML_PROJECT must point there)."""
    ids: dict = {}
    logdir, _ = experiment.launch(_curve, {"lr": 0.5}, name=XSS_NAME, metric_key="accuracy",
                                  description=XSS_DESCRIPTION)
    ids["launch"] = os.path.basename(logdir)
    try:
        experiment.launch(_failing, {"lr": 9.0}, name="diverges")
    except Exception as exc:  # noqa: BLE001  (the failed run is what the view shows)
        ids["failed_error"] = type(exc).__name__
    samples.write_digits(os.path.join(tmp, "digits"), limit=120, size=16)
    prepare_images(os.path.join(tmp, "digits"), "digits", resize=(16, 16), crop=(12, 12), shards=2)
    samples.write_table(os.path.join(tmp, "iris.csv"))
    prepare_table(os.path.join(tmp, "iris.csv"), "iris", label="species")
    logdir, _ = experiment.allreduce(_train_and_export, name="digits-allreduce", num_workers=2,
                                     metric_key="accuracy")
    ids["allreduce"] = os.path.basename(logdir)
    markers = os.path.join(tmp, "finished-trials")
    os.makedirs(markers, exist_ok=True)
    logdir, _, _ = experiment.grid_search(_lagging_search(markers), {"lr": [0.05, 0.5, 0.9, 0.7]}, name="grid",
                                          optimization_key="accuracy", early_stopping="median",
                                          early_stopping_min_steps=2)
    ids["search"] = os.path.basename(logdir)
    logdir, _, _ = experiment.random_search(_curve_with_dropout, {"lr": [1e-4, 1e-1], "dropout": [0.0, 0.5]},
                                            samples=4, seed=3, log_scale=["lr"], name="random",
                                            optimization_key="accuracy")
    ids["random"] = os.path.basename(logdir)
    storage = Storage(os.environ["HOPSML_ROOT"])
    lost = layout.ExperimentDir.of(PROJECT, "local-1000000000000", 1)
    storage.write_json(lost.record, {"id": lost.id, "name": "gone", "app_id": "local-1000000000000",
                                     "run_id": 1, "state": "RUNNING", "start": "2020-01-01T00:00:00+00:00"})
    ids["lost"] = lost.id
    broken = layout.ExperimentDir.of(PROJECT, "local-1000000000000", 2)
    storage.write_bytes(broken.record, b'{"id": "cut')
    ids["broken"] = broken.id
    return ids


if __name__ == "__main__":
    import sys

    os.environ.setdefault("HOPSML_PROJECT", PROJECT)
    print(json.dumps(build(sys.argv[1])))
