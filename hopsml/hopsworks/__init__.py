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
from typing import Any, NoReturn

from hopsml import config
from hopsml.errors import FeatureStoreError
from hopsml.featurestore.hsfs_members import stable_id
from hopsml.featurestore.store import FeatureStore
from hopsml.featurestore.transformations import udf
from hopsml.hopsworks.absent import refusal, refuse
from hopsml.hopsworks.datasets import DatasetApi
from hopsml.hopsworks.deployments import ModelServing
from hopsml.hopsworks.jobs import JobApi
from hopsml.hopsworks.registry import ModelRegistry


class Project:
    """A hopsml project, as `hopsworks.login()` returns it."""

    def __init__(self, settings: config.Settings, connection: dict[str, Any]) -> None:
        self.settings, self.name, self.connection = settings, settings.project, connection

    def __repr__(self) -> str:
        return f"Project({self.name!r})"

    @property
    def id(self) -> int:
        """A number standing for the project (the same in every process; hopsworks' projects have ids)."""
        return stable_id(self.name)

    def get_dataset_api(self) -> DatasetApi:
        """The project's files under hopsworks' dataset API (upload, download, exists, mkdir, remove, ...)."""
        return DatasetApi(self.settings)

    def get_feature_store(self, name: str | None = None) -> FeatureStore:
        """The project's feature store (`name`, when given, must be '<project>_featurestore')."""
        store = FeatureStore(self.settings)
        if name not in (None, store.name, self.name):
            raise FeatureStoreError(f"feature store {name!r}: project {self.name!r} has one, {store.name!r}; shared "
                                    "feature stores of other projects are not available")
        return store

    def get_model_registry(self) -> ModelRegistry:
        """The project's model registry (hsml's ModelRegistry): registered models and their versions."""
        return ModelRegistry(self.settings)

    def get_model_serving(self) -> ModelServing:
        """The project's model serving (hsml's ModelServing): deployments of registered models."""
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
          engine: str | None = None, **options: object) -> Project:
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
    """The process's project, as `login()` without arguments gives it."""
    return login()


class Connection:
    """What `hopsworks.connection()` returns: the project's stores, as the older entry point gives them."""

    def __init__(self, project: Project) -> None:
        self._project = project

    def __repr__(self) -> str:
        return f"Connection({self._project.name!r})"

    def get_feature_store(self, name: str | None = None) -> FeatureStore:
        """The feature store of the connection's project."""
        return self._project.get_feature_store(name)

    def get_model_registry(self, project: str | None = None) -> ModelRegistry:
        """The model registry of `project` (default: the connection's project)."""
        return (login(project=project) if project else self._project).get_model_registry()

    def get_model_serving(self) -> ModelServing:
        """The model serving of the connection's project."""
        return self._project.get_model_serving()

    def get_project(self, name: str | None = None) -> Project:
        """The project `name` (it becomes the process's project), else the connection's own."""
        return login(project=name) if name else self._project

    def close(self) -> None:
        """Nothing to close: there is no server."""


def connection(host: str | None = None, port: int = 443, project: str | None = None, engine: str | None = None,
               hostname_verification: bool = False, trust_store_path: str | None = None, cert_folder: str = "/tmp",
               api_key_file: str | None = None, api_key_value: str | None = None) -> Connection:
    """hopsworks' older entry point: a connection to the project (see login; the arguments are recorded)."""
    return Connection(login(host, port, project, api_key_value, api_key_file, hostname_verification,
                            trust_store_path, engine))


def create_project(name: str, description: str | None = None, feature_store_topic: str | None = None) -> Project:
    """Create the project `name` (its folder under the root) and return it; refused when it exists, as hopsworks
    refuses a name that is taken. It does not become the process's project (login(project=name) makes it so)."""
    from hopsml import layout
    from hopsml.errors import HopsmlError
    from hopsml.fs import Storage

    settings = config.load(project=name)   # checks the name
    storage = Storage(settings.root)
    folder = layout.project_dir(settings.project)
    if storage.exists(folder):
        raise HopsmlError(f"project {name!r} exists ({storage.uri(folder)}): open it with "
                          f"hopsworks.login(project={name!r})")
    storage.makedirs(folder)
    return Project(settings, {"description": description})


def get_secrets_api() -> NoReturn:
    """Not offered by hopsml: raises NotOfferedError (no secrets store; environment variables instead)."""
    refuse("hopsworks.get_secrets_api")


__all__ = ["Connection", "Project", "connection", "create_project", "get_current_project", "get_secrets_api",
           "login", "udf"]
