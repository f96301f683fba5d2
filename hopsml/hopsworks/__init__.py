"""The hopsworks SDK's face: `hopsworks.login()` opens the local project (or the one named), and the project
gives its feature store and model registry under the names hopsworks 4.x uses.

    from hopsml import hopsworks
    project = hopsworks.login()
    fs = project.get_feature_store()
    mr = project.get_model_registry()

There is no Hopsworks server: `host`, `port`, `api_key_value` and the other connection arguments are accepted
so that existing programs run, and recorded on the project (`project.connection`); the project is a folder
under hopsml's root (setting `root`), named by `project` (else setting `project`), and the process's project
from then on.
"""

from __future__ import annotations

import os
from typing import Any

from hopsml import config
from hopsml.errors import FeatureStoreError
from hopsml.featurestore.store import FeatureStore
from hopsml.hopsworks.absent import refusal
from hopsml.hopsworks.deployments import ModelServing
from hopsml.hopsworks.jobs import JobApi
from hopsml.hopsworks.registry import ModelRegistry


class Project:
    """A hopsml project, as `hopsworks.login()` returns it."""

    def __init__(self, settings: config.Settings, connection: dict[str, Any]) -> None:
        self.settings, self.name, self.connection = settings, settings.project, connection

    def __repr__(self) -> str:
        return f"Project({self.name!r})"

    def get_feature_store(self, name: str | None = None) -> FeatureStore:
        """The project's feature store (`name`, when given, must be '<project>_featurestore')."""
        store = FeatureStore(self.settings)
        if name not in (None, store.name, self.name):
            raise FeatureStoreError(f"feature store {name!r}: project {self.name!r} has one, {store.name!r}; shared "
                                    "feature stores of other projects are not available")
        return store

    def get_model_registry(self) -> ModelRegistry:
        return ModelRegistry(self.settings)

    def get_model_serving(self) -> ModelServing:
        return ModelServing(self.settings)

    def get_job_api(self) -> JobApi:
        """The project's named jobs under hopsworks' names (create_job, get_job, get_jobs, exists)."""
        return JobApi(self.settings)

    def get_jobs_api(self) -> JobApi:
        """hopsworks' older name of get_job_api (tutorials still call it)."""
        return self.get_job_api()

    # hopsworks' services that hopsml does not have: one clear error naming each (absent.py)
    get_kafka_api = refusal("Project.get_kafka_api")
    get_opensearch_api = refusal("Project.get_opensearch_api")
    get_flink_cluster_api = refusal("Project.get_flink_cluster_api")
    get_git_api = refusal("Project.get_git_api")
    get_environment_api = refusal("Project.get_environment_api")


def login(host: str | None = None, port: int = 443, project: str | None = None, api_key_value: str | None = None,
          api_key_file: str | None = None, hostname_verification: bool = False, trust_store_path: str | None = None,
          engine: str | None = None, **options: Any) -> Project:
    """The project `project` (else the setting `project`) under hopsml's root; see the module docstring. As with
    Hopsworks, the project named becomes this process's project (HOPSML_PROJECT): the experiments, datasets and
    models of later calls go there too."""
    if project:
        settings = config.load(project=project)   # checks the name first
        os.environ["HOPSML_PROJECT"] = settings.project
    else:
        settings = config.load()
    connection = {"host": host, "port": port, "engine": engine, "hostname_verification": hostname_verification,
                  "api_key": "given" if api_key_value or api_key_file else None, **{k: str(v) for k, v in
                                                                                     options.items()}}
    return Project(settings, connection)


def get_current_project() -> Project:
    return login()
