"""hopsml's Airflow 3 provider (``pip install ".[airflow]"``): operators for a pipeline's steps and jobs,
sensors on the project's objects, gates, and the project's objects as Airflow Assets.

    from hopsml.airflow import HopsmlJobOperator, ExperimentOperator, MonitorGateOperator, assets

The operators and sensors import Airflow, so they load on first use; `assets`, `steps`, `checks` and the DAG a
model's lineage writes (`lineage`) need no Airflow.
"""

from __future__ import annotations

from typing import Any

_OPERATORS = ("BestModelOperator", "CanaryGateOperator", "CanaryRolloutOperator", "CreateServingOperator",
              "DeployCanaryOperator", "ExperimentOperator", "FeatureGroupInsertOperator", "HopsmlJobOperator",
              "HopsmlOperator", "HopsworksLaunchOperator", "ModelExportOperator", "MonitorGateOperator",
              "PrepareDatasetOperator", "ServingCheckOperator", "StartServingOperator", "StopServingOperator",
              "TrainingDatasetOperator", "ValidationGateOperator")
_SENSORS = ("CanaryRequestsSensor", "DatasetSensor", "FeatureGroupCommitSensor", "HopsmlSensor",
            "HopsworksJobSuccessSensor", "JobExecutionSensor", "ModelVersionSensor", "ServingStateSensor")


def __getattr__(name: str) -> Any:  # lazy, so that importing hopsml.airflow.assets never imports Airflow
    import importlib

    if name in _OPERATORS:
        return getattr(importlib.import_module("hopsml.airflow.operators"), name)
    if name in _SENSORS:
        return getattr(importlib.import_module("hopsml.airflow.sensors"), name)
    raise AttributeError(f"module 'hopsml.airflow' has no attribute {name!r}")


__all__ = [*_OPERATORS, *_SENSORS]
