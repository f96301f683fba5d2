"""The default datasets a project starts with, as a Hopsworks project does.

Hopsworks notebooks read and `stat` files such as ``Logs/README.md`` and write into ``Resources/``
without creating it; so the first time a project is used, its default folders are made, each with
a README.md saying what it holds. A README a user changed is never replaced, and a folder the user
removed comes back only if the project's marker is removed too.
"""

from __future__ import annotations

import logging
import threading

from hopsml import layout
from hopsml.errors import HopsmlError
from hopsml.fs import Storage

_log = logging.getLogger(__name__)

MARKER = ".hopsml-project"

# name -> what its README says it holds; `{project}` is the project's name
DEFAULT_DATASETS: dict[str, str] = {
    "Logs": "Logs of the project's jobs and notebooks. Experiments keep their own logs in their folders.",
    "Resources": "Files the project's code reads: sample data, configuration, small inputs.",
    "Jupyter": "The project's notebooks.",
    layout.EXPERIMENTS: "One folder per experiment run: the record, the program, its environment, "
                        "logs, metrics, TensorBoard events and checkpoints.",
    layout.MODELS: "Registered models: <name>/<version>/ with the model's files and its metadata.",
    layout.DATASETS: "Datasets prepared by hopsml (Parquet and TFRecord shards with statistics).",
    "DataValidation": "Data validation results.",
    "Statistics": "Statistics computed over the project's data.",
    "{project}_Training_Datasets": "Training datasets, as Hopsworks' feature store names the folder.",
}

_made: set[tuple[str, str]] = set()
_lock = threading.Lock()


def ensure(storage: Storage, project: str) -> None:
    """Make `project`'s default datasets unless this project already has them (cheap after the first call)."""
    key = (storage.uri(), project)
    if key in _made:
        return
    with _lock:
        if key in _made:
            return
        try:
            _make(storage, project)
        except (HopsmlError, OSError) as exc:  # the caller's own work says what is wrong with the root
            _log.debug("project %r: default datasets not made: %s", project, exc)
        _made.add(key)


def _make(storage: Storage, project: str) -> None:
    base = layout.project_dir(project)
    if storage.exists(layout.join(base, MARKER)):
        return
    for name, about in DEFAULT_DATASETS.items():
        readme = layout.join(base, name.format(project=project), "README.md")
        if not storage.exists(readme):
            storage.write_text(readme, f"# {name.format(project=project)}\n\n{about}\n")
    storage.write_text(layout.join(base, MARKER), "the default datasets were made\n")
    _log.info("project %r: made its default datasets under %s", project, storage.uri(base))
