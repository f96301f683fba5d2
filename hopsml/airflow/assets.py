"""The names hopsml's objects have as Airflow Assets: ``hopsml://<project>/<kind>/<name>[/<version>]``.

Pure text, no Airflow import: the operators, the sensors and the DAGs a lineage writes build the same names here,
so a DAG scheduled on ``Asset(assets.featuregroup("demo", "iris", 1))`` runs after every commit to that group.

>>> featuregroup("demo", "iris", 1), model("demo", "iris"), dataset("demo", "iris")
('hopsml://demo/featuregroups/iris/1', 'hopsml://demo/models/iris', 'hopsml://demo/datasets/iris')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hopsml import layout

SCHEME = "hopsml"


def _uri(project: str, kind: str, *parts: object) -> str:
    layout.validate_name(project, "project name")
    for part in parts:
        layout.validate_name(str(part), f"{kind} name")
    return "/".join([f"{SCHEME}://{project}", kind, *map(str, parts)])


def featuregroup(project: str, name: str, version: int) -> str:
    return _uri(project, "featuregroups", name, int(version))


def featureview(project: str, name: str, version: int) -> str:
    """A feature view: an event on it means a new training dataset version."""
    return _uri(project, "featureviews", name, int(version))


def dataset(project: str, name: str) -> str:
    return _uri(project, "datasets", name)


def model(project: str, name: str) -> str:
    return _uri(project, "models", name)


def serving(project: str, name: str) -> str:
    return _uri(project, "servings", name)


def experiment(project: str, name: str) -> str:
    """Experiments by their name (every run of `name` is an event on one Asset)."""
    return _uri(project, "experiments", name)


def job(project: str, name: str) -> str:
    return _uri(project, "jobs", name)


def of_produced(project: str, produced: Mapping[str, Any]) -> str | None:
    """The Asset of one object a job execution reports it produced (`Execution.produced`), None for a kind
    without one.

    >>> of_produced("demo", {"kind": "featuregroup", "name": "iris", "version": 2})
    'hopsml://demo/featuregroups/iris/2'
    >>> of_produced("demo", {"kind": "model", "name": "iris", "version": 3})
    'hopsml://demo/models/iris'
    """
    kind, name = produced.get("kind"), produced.get("name")
    if not isinstance(name, str) or not name:
        return None
    if kind == "featuregroup":
        return featuregroup(project, name, int(produced.get("version") or 1))
    builders = {"dataset": dataset, "model": model, "serving": serving, "experiment": experiment}
    return builders[kind](project, name) if kind in builders else None
