"""The hsfs members that hopsml's feature store does not offer: each raises one NotOfferedError that names the
member and what to use instead, rather than an AttributeError that says nothing. (hopsml.hopsworks.absent holds
the same for the project's members; this table is below it so the feature store's classes can use it.)"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from hopsml.errors import NotOfferedError

_MONITORING = ("feature monitoring is not offered yet: compare statistics with fg.get_statistics() / "
               "fg.compute_statistics(), or a serving's inputs with hopsml.serving.monitor")
_VECTORS = ("hopsml has no embedding index (hsfs keeps it in OpenSearch): read the vectors with fg.read() and "
            "search them in your own index")
_KAFKA = "hopsml has no Kafka: fg.insert(df) writes the offline table and the online store in one call"

# member -> what to use instead
INSTEAD = {
    "FeatureGroup.create_feature_monitoring": _MONITORING,
    "FeatureGroup.create_statistics_monitoring": _MONITORING,
    "FeatureGroup.get_feature_monitoring_configs": _MONITORING,
    "FeatureView.create_feature_monitoring": _MONITORING,
    "FeatureView.create_statistics_monitoring": _MONITORING,
    "FeatureView.get_feature_monitoring_configs": _MONITORING,
    "FeatureGroup.find_neighbors": _VECTORS,
    "FeatureView.find_neighbors": _VECTORS,
    "FeatureGroup.insert_stream": _KAFKA + " (Spark Structured Streaming: write each micro-batch with "
                                           "foreachBatch(lambda df, _: fg.insert(df)))",
    "FeatureGroup.subject": _KAFKA + "; the group's schema is fg.features",
    "FeatureGroup.materialization_job": _KAFKA + ", so there is no materialization job to run or schedule; "
                                                 "schedule the insert's own job (project.get_job_api(), Airflow)",
    "FeatureGroup.get_latest_online_ingestion": _KAFKA + "; fg.online_behind() says whether its online rows miss "
                                                         "commits",
    "FeatureGroup.get_online_ingestion": _KAFKA + "; fg.online_behind() says whether its online rows miss commits",
    "FeatureStore.create_external_feature_group": "hopsml has no storage connectors: read the source with its own "
                                                  "client (pandas, Spark) and fg.insert(df) into a feature group",
    "FeatureStore.get_external_feature_group": "hopsml has no external feature groups: use get_feature_group",
    "FeatureStore.get_storage_connector": "hopsml has no storage connectors: read the source with its own client "
                                         "(pandas, Spark's JDBC/S3 readers) and insert it into a feature group",
}


def refuse(member: str, instead: Mapping[str, str] = INSTEAD) -> NoReturn:
    """Raise the NotOfferedError of `member` (a key of `instead`)."""
    said = instead.get(member, "")
    raise NotOfferedError(f"{member} is not offered by hopsml" + (f"; instead: {said}" if said else ""))


def refusal(member: str, instead: Mapping[str, str] = INSTEAD) -> Callable[..., NoReturn]:
    """A method standing for `member` that raises its NotOfferedError, whatever it is given."""
    def method(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        refuse(member, instead)

    method.__name__ = member.rpartition(".")[2]
    method.__doc__ = f"Not offered by hopsml: raises NotOfferedError ({instead.get(member, '')})."
    return method


def refused_property(member: str, instead: Mapping[str, str] = INSTEAD) -> property:
    """A property standing for `member` that raises its NotOfferedError when read."""
    return property(refusal(member, instead), doc=f"Not offered by hopsml ({instead.get(member, '')}).")
