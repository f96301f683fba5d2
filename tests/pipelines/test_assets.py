"""The project's objects as Airflow Assets: a commit to a feature group, made by one DAG's insert task, is an
event on `hopsml://<project>/featuregroups/<name>/<version>` that queues the DAG scheduled on it (as the scheduler
sees it); that DAG's sensor then finds the commit. No Spark: the feature store writes with delta-rs."""

from __future__ import annotations

import pytest

pytest.importorskip("airflow.sdk")   # the provider runs where the airflow extra is installed

from conftest import PROJECT, asset_events, dags_folder, run_dag, task_states, xcom

from hopsml.airflow import steps

UPSTREAM = '''
import datetime as dt

from airflow.sdk import DAG

from hopsml.airflow import FeatureGroupInsertOperator

with DAG("flowers_in", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False) as dag:
    FeatureGroupInsertOperator(task_id="insert", name="flowers", path=PATH, primary_key=["id"])
'''

DOWNSTREAM = '''
import datetime as dt

from airflow.sdk import DAG, Asset

from hopsml.airflow import FeatureGroupCommitSensor

with DAG("on_flowers", schedule=[Asset("hopsml://PROJECT/featuregroups/flowers/1")], start_date=dt.datetime(2026, 1, 1),
         catchup=False) as dag:
    FeatureGroupCommitSensor(task_id="commit", name="flowers", version=1, mode="poke", poke_interval=1, timeout=120)
'''


def _queued(dag_id: str) -> int:
    """How many asset events wait to start a run of `dag_id` (the scheduler's queue)."""
    from airflow.models.asset import AssetDagRunQueue
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return session.scalar(select(func.count()).select_from(AssetDagRunQueue).where(
            AssetDagRunQueue.target_dag_id == dag_id))


def test_a_feature_group_commit_triggers_the_dag_scheduled_on_its_asset(project, tmp_path):
    csv = tmp_path / "flowers.csv"
    csv.write_text("id,petal_length\n1,1.4\n2,4.7\n")
    (dags_folder() / "on_flowers.py").write_text(DOWNSTREAM.replace("PROJECT", PROJECT))
    upstream = run_dag("flowers_in", UPSTREAM.replace("PATH", repr(str(csv))))
    assert str(upstream.state) == "success", task_states(upstream)
    assert xcom(upstream, "insert")["commit"] == 0
    assert asset_events(f"hopsml://{PROJECT}/featuregroups/flowers/1") == [{"commit": 0}]
    assert _queued("on_flowers") == 1                       # the scheduler would start on_flowers now

    downstream = run_dag("on_flowers", DOWNSTREAM.replace("PROJECT", PROJECT))
    assert str(downstream.state) == "success", task_states(downstream)
    assert xcom(downstream, "commit") == {"featuregroup": "flowers", "version": 1, "commit": 0}

    csv.write_text("id,petal_length\n3,5.1\n")
    again = run_dag("flowers_in", UPSTREAM.replace("PATH", repr(str(csv))))
    assert str(again.state) == "success"
    assert asset_events(f"hopsml://{PROJECT}/featuregroups/flowers/1") == [{"commit": 0}, {"commit": 1}]


GATED = '''
import datetime as dt

from airflow.sdk import DAG

from hopsml.airflow import FeatureGroupInsertOperator, ValidationGateOperator

with DAG("orders_gate", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False,
         default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=1)}) as dag:
    insert = FeatureGroupInsertOperator(task_id="insert", name="orders", path=PATH, primary_key=["order_id"])
    insert >> ValidationGateOperator(task_id="gate", name="orders", version=1, max_failed=MAX_FAILED)
'''


def test_a_validation_gate_fails_the_run_when_more_expectations_fail_than_allowed(project, tmp_path):
    """The group's suite lets every batch in (policy ALWAYS); the gate checks the group's rows: one expectation
    fails (an amount out of range), so max_failed=0 fails the run at once and max_failed=1 lets it pass."""
    from hopsml.featurestore.store import FeatureStore

    suite = {"expectation_suite_name": "orders_checks", "expectations": [
        {"expectation_type": "expect_column_values_to_be_between",
         "kwargs": {"column": "amount", "min_value": 0, "max_value": 1000}},
        {"expectation_type": "expect_column_values_to_not_be_null", "kwargs": {"column": "amount"}}]}
    group = FeatureStore(project).create_feature_group("orders", version=1, primary_key=["order_id"])
    group.save_expectation_suite(suite, validation_ingestion_policy="ALWAYS")
    group.save()
    csv = tmp_path / "orders.csv"
    csv.write_text("order_id,amount\n1,20.0\n2,5000.0\n")
    source = GATED.replace("PATH", repr(str(csv)))
    strict = run_dag("orders_gate", source.replace("MAX_FAILED", "0"))
    assert str(strict.state) == "failed" and task_states(strict)["gate"] == ("failed", 1)
    with pytest.raises(steps.GateFailed, match="1 of 2 expectations fail .expect_column_values_to_be_between"):
        steps.validation_gate(project, "orders", 1)             # what the strict gate said
    lenient = run_dag("orders_gate", source.replace("MAX_FAILED", "1"))
    assert str(lenient.state) == "success", task_states(lenient)
    assert xcom(lenient, "gate") == {"featuregroup": "orders", "version": 1, "failed":
                                     ["expect_column_values_to_be_between"], "evaluated": 2}
