"""The DAG written from a model's lineage when the model was trained on a feature view's training dataset: the
DAG makes a new training dataset of the view (scheduled on the view's feature-group Assets), trains on it with the
recorded function, parameters and seed, and exports a version with the same metrics (`airflow dags test`)."""

from __future__ import annotations

import pytest

pytest.importorskip("airflow.sdk")   # the provider runs where the airflow extra is installed

from conftest import PROJECT, airflow, dags_folder

from hopsml.airflow import commands, steps
from hopsml.model import registry


def test_the_lineage_dag_of_a_model_trained_on_a_feature_view_reproduces_it(project):
    import argparse

    import pandas as pd
    from sklearn.datasets import load_iris

    from hopsml.featurestore.store import FeatureStore

    settings = project
    frame = load_iris(as_frame=True).frame.rename(columns=lambda c: c.replace(" (cm)", "").replace(" ", "_"))
    frame.insert(0, "flower", range(len(frame)))
    store = FeatureStore(settings)
    group = store.create_feature_group("petals", primary_key=["flower"])
    group.insert(pd.DataFrame(frame))
    store.create_feature_view("flowerview", query=group.select_all(), labels=["target"])
    made = steps.create_training_dataset(settings, "flowerview", test_size=0.2, seed=3).ref
    trained = steps.run_experiment(settings, "iris_model:train", args={"dataset": made["dataset"], "c": 1.0},
                                   name="fromview", seed=7).ref
    steps.export_model(settings, "viewmodel", trained["experiment_id"], model_file="model.joblib")
    v1 = registry.get_model("viewmodel", settings=settings)
    assert [d["name"] for d in v1.datasets] == [made["dataset"]]      # the model's lineage reaches the view

    path = dags_folder() / "retrain_viewmodel.py"
    parser = argparse.ArgumentParser()
    commands.add_commands(parser.add_subparsers(dest="command"))
    commands.run(parser.parse_args(["pipelines", "dag", "viewmodel", "-o", str(path)]), settings)
    source = path.read_text()
    for part in ("TrainingDatasetOperator(", "'flowerview'", f"Asset('hopsml://{PROJECT}/featuregroups/petals/1')",
                 'training_dataset_flowerview.output["dataset"]'):
        assert part in source, part
    done = airflow("dags", "test", "retrain_viewmodel")
    assert done.returncode == 0 and "state=success" in done.stdout + done.stderr, (done.stdout + done.stderr)[-4000:]
    v2 = registry.get_model("viewmodel", settings=settings)
    assert v2.version == 2 and v2.metrics == v1.metrics                 # same rows, parameters and seed
    assert [d["name"] for d in v2.datasets] != [d["name"] for d in v1.datasets]   # a new training dataset
