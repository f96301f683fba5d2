"""hsml's model registry over hopsml's: `mr.python.create_model(...)`, `model.save(path)`, `mr.get_model(name,
version)`, `mr.get_best_model(...)`, `model.download()`, `model.get_feature_view()`.

What hsml records beyond hopsml's record of a version (`.model.json`): the framework, the input example, the model
schema, the feature view and training dataset version it was trained on, goes in `hsml.json` beside it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

from hopsml import config, layout
from hopsml.errors import ModelError
from hopsml.fs import Storage
from hopsml.model import registry

if TYPE_CHECKING:
    from hopsml.hopsworks.deployments import Deployment, InferenceBatcher, InferenceLogger, Resources

FRAMEWORKS = ("python", "sklearn", "tensorflow", "torch", "llm")
HSML_RECORD = layout.HSML_RECORD


class TrainingView(Protocol):
    """What a model reads of the feature view it was trained on (hsfs' FeatureView): its name and version, and the
    training dataset version it gave last."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> int: ...
    def get_last_accessed_training_dataset(self) -> int | None: ...


class Model:
    """A model version, saved (`version` set) or about to be (`save`)."""

    def __init__(self, settings: config.Settings, name: str, framework: str, version: int | None = None,
                 metrics: dict[str, Any] | None = None, description: str | None = None,
                 input_example: object = None, model_schema: object = None, feature_view: TrainingView | None = None,
                 training_dataset_version: int | None = None) -> None:
        self._settings, self.name, self.framework, self.version = settings, name, framework, version
        self.training_metrics = dict(metrics or {})
        self.description = description
        self.input_example, self.model_schema = input_example, model_schema
        self._feature_view = feature_view
        self.training_dataset_version = training_dataset_version

    def __repr__(self) -> str:
        return f"Model(name={self.name!r}, version={self.version}, framework={self.framework!r})"

    def save(self, model_path: str, await_registration: int = 480, keep_original_files: bool = False,
             upload_configuration: dict[str, Any] | None = None) -> Model:
        """Register the file or folder `model_path` as the next version (or the one given at create_model)."""
        mv = registry.export(model_path, self.name, model_version=self.version, metrics=self.training_metrics,
                             description=self.description, settings=self._settings)
        self.version = mv.version
        view = self._feature_view
        if view is not None and self.training_dataset_version is None:   # as hsml: the version the view gave last
            self.training_dataset_version = view.get_last_accessed_training_dataset()
        record = {"framework": self.framework, "input_example": _plain(self.input_example),
                  "model_schema": _plain(self.model_schema),
                  "feature_view": {"name": view.name, "version": view.version} if view is not None else None,
                  "training_dataset_version": self.training_dataset_version}
        storage = Storage(self._settings.root)
        storage.write_json(layout.join(layout.model_dir(self._settings.project, self.name, mv.version), HSML_RECORD),
                           record)
        return self

    def deploy(self, name: str | None = None, description: str | None = None, script_file: str | None = None,
               resources: Resources | dict[str, Any] | None = None,
               inference_logger: InferenceLogger | str | None = None,
               inference_batcher: InferenceBatcher | bool | None = None, **options: Any) -> Deployment:
        """A deployment of this version (saved, not started: `deployment.start()`), as hsml's `model.deploy`."""
        from hopsml.hopsworks.deployments import ModelServing

        predictor = ModelServing(self._settings).create_predictor(
            self, name=name, script_file=script_file, resources=resources, inference_logger=inference_logger,
            inference_batcher=inference_batcher, **options)
        return predictor.deploy()

    def _hsml(self) -> dict[str, Any]:
        storage = Storage(self._settings.root)
        path = layout.join(layout.model_dir(self._settings.project, self.name, int(self.version or 0)), HSML_RECORD)
        return dict(storage.read_json(path)) if storage.exists(path) else {}

    def download(self, local_path: str | None = None) -> str:
        """The version's files in a local folder."""
        return registry.download_model(self.name, self.version, local_dir=local_path, settings=self._settings,
                                       overwrite=local_path is not None)

    @property
    def model_files_path(self) -> str:
        """Where the version's files are, as hsml names it ('/Projects/<project>/Models/<name>/<version>'): the
        dataset API and hopsml.hdfs take it."""
        return "/" + layout.model_dir(self._settings.project, self.name, int(self._saved_version()))

    def get_url(self) -> str:
        """The path of the models' page in hopsml's web view (`hopsml ui` prints the address it serves on)."""
        return f"/p/{self._settings.project}/models/"

    def delete(self) -> None:
        """Delete this version from the registry; refused while a deployment serves it."""
        from hopsml.serving.control import lifecycle

        version = self._saved_version()
        serving = [s.name for s in lifecycle.get_all(self._settings)
                   if s.model_name == self.name and version in (s.model_version, s.canary_version)]
        if serving:
            raise ModelError(f"model {self.name!r} version {version} is served by {', '.join(serving)}: delete "
                             "those deployments first (deployment.delete())")
        Storage(self._settings.root).delete(layout.model_dir(self._settings.project, self.name, version))

    def _saved_version(self) -> int:
        if self.version is None:
            raise ModelError(f"model {self.name!r} is not saved yet: model.save(path) first")
        return int(self.version)

    def get_feature_view(self, init: bool = True, online: bool = False) -> Any:
        """The feature view the model was trained on, set up with its training dataset version as hsml does: for
        serving (feature vectors) with `online=True` or inside a deployment (DEPLOYMENT_NAME set, as a serving's
        instances have it), else for batch scoring."""
        from hopsml.featurestore.store import FeatureStore

        linked = self._hsml().get("feature_view")
        if not linked:
            raise ModelError(f"model {self.name!r} version {self.version} was saved without feature_view=...")
        view = FeatureStore(self._settings).get_feature_view(linked["name"], linked["version"])
        version = self._hsml().get("training_dataset_version")
        if init and version:
            if online or os.environ.get("DEPLOYMENT_NAME"):
                view.init_serving(version)
            else:
                view.init_batch_scoring(version)
        return view


class _Framework:
    """`mr.python`, `mr.sklearn`, ...: create_model for one framework."""

    def __init__(self, settings: config.Settings, framework: str) -> None:
        self._settings, self._framework = settings, framework

    def create_model(self, name: str, version: int | None = None, metrics: dict[str, Any] | None = None,
                     description: str | None = None, input_example: object = None, model_schema: object = None,
                     feature_view: TrainingView | None = None, training_dataset_version: int | None = None,
                     **_: object) -> Model:
        return Model(self._settings, layout.validate_name(name, "model name"), self._framework, version, metrics,
                     description, input_example, model_schema, feature_view, training_dataset_version)


class ModelRegistry:
    """The project's model registry, as `project.get_model_registry()` returns it."""

    def __init__(self, settings: config.Settings) -> None:
        self._settings = settings
        for framework in FRAMEWORKS:
            setattr(self, framework, _Framework(settings, framework))

    def _model(self, mv: registry.ModelVersion) -> Model:
        model = Model(self._settings, mv.name, "python", mv.version, mv.metrics, mv.description)
        extra = model._hsml()
        model.framework = extra.get("framework", "python")
        model.input_example, model.model_schema = extra.get("input_example"), extra.get("model_schema")
        model.training_dataset_version = extra.get("training_dataset_version")
        return model

    def get_model(self, name: str, version: int | None = None) -> Model:
        """Version `version` of model `name` (the newest when None)."""
        return self._model(registry.get_model(name, version, settings=self._settings))

    def get_models(self, name: str) -> list[Model]:
        """Every version of model `name`."""
        return [self._model(mv) for mv in registry.versions(name, self._settings)]

    def get_best_model(self, name: str, metric: str, direction: str) -> Model:
        """The version of model `name` with the best `metric`: highest for direction 'max', lowest for 'min'."""
        return self._model(registry.get_best_model(name, metric, direction, settings=self._settings))


def _plain(value: Any) -> Any:
    """A JSON-able copy of an input example or schema (numpy and pandas values as lists)."""
    if value is None:
        return None
    if hasattr(value, "to_dict") and hasattr(value, "columns"):
        return value.head(1).to_dict(orient="records")
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return value
