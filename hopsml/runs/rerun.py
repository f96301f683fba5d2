"""What a rerun asks of a run, and what it checks before one: the verbs' side of `hopsml.experiments.rerun`.

A rerun's program learns that it is a rerun from two environment variables: ``HOPSML_RERUN`` (the
id it reruns) and ``HOPSML_RERUN_SEED``. A verb called there whose experiment name and function are
the recorded ones links its record to the old one (``rerun_of``), ``launch`` takes the recorded
parameters (also when the program computed them), and every verb without an explicit ``seed=``
takes the recorded seed.

Before a rerun starts, the datasets the run read are fingerprinted again and compared with the
fingerprints it recorded, and the versions of the stack with the recorded ones (``differences``); how
the recorded program is entered again is ``entry_point``.
"""

from __future__ import annotations

import logging
import os
import posixpath
from collections.abc import Mapping
from typing import Any

from hopsml import config, layout
from hopsml.errors import HopsmlError, StorageError
from hopsml.fs import Storage
from hopsml.layout import ExperimentDir
from hopsml.tracking import lineage, versioning
from hopsml.tracking.record import ExperimentRecord, ExperimentType, list_records, read_record

log = logging.getLogger(__name__)

ENV = "HOPSML_RERUN"             # the id of the experiment the program in this process reruns
SEED_ENV = "HOPSML_RERUN_SEED"   # its seed: what hopsml.launcher.seeds gives a verb called without one

FUNCTION, SCRIPT, NOTEBOOK = "function", "script", "notebook"


# --- inside the rerun's program: what the verbs ask --------------------------------------------

def pending() -> str | None:
    """The id of the experiment this process reruns, or None."""
    return os.environ.get(ENV) or None


def _pending_record(name: str, fn: object, storage: Storage | None = None, project: str | None = None
                    ) -> ExperimentRecord | None:
    """The record being rerun, when this verb call (its name and function) is the recorded one."""
    exp_id = pending()
    if exp_id is None:
        return None
    if storage is None or project is None:
        settings = config.load()
        storage, project = Storage(settings.root), settings.project
    try:
        rec = read_record(storage, project, exp_id)
    except HopsmlError as exc:
        log.warning("%s=%s names no readable experiment (%s): this run is not linked to it", ENV, exp_id, exc)
        return None
    if rec.name != name or rec.function != getattr(fn, "__qualname__", None):
        return None   # another verb of the same program
    return rec


def link(storage: Storage, project: str, name: str, fn: object) -> dict[str, Any]:
    """The fields that link a new record to the experiment it reruns (none outside a rerun)."""
    rec = _pending_record(name, fn, storage, project)
    return {"rerun_of": rec.id} if rec is not None else {}


def arguments(name: str, fn: object, args: dict[str, Any]) -> dict[str, Any]:
    """launch's arguments: in a rerun the recorded ones, also where the program computes them anew."""
    rec = _pending_record(name, fn)
    if rec is None or rec.type != ExperimentType.EXPERIMENT.value:
        return args
    if rec.hyperparameters != args:
        log.warning("rerun of %s: the program passed %s; using the recorded %s", rec.id, args, rec.hyperparameters)
    return dict(rec.hyperparameters)


# --- before the rerun: what differs ------------------------------------------------------------

def verb_of(rec: ExperimentRecord) -> str:
    """The experiment verb that made a record."""
    strategy = rec.extra.get("strategy")
    if rec.type == ExperimentType.PARALLEL_EXPERIMENTS.value:
        return {"grid": "grid_search", "random": "random_search"}.get(str(strategy), str(strategy))
    if rec.type == ExperimentType.DISTRIBUTED_TRAINING.value:
        return str(strategy) if strategy in ("mirrored", "parameter_server") else "allreduce"
    return "launch"


def read_lineage(storage: Storage, exp_dir: ExperimentDir) -> list[dict[str, Any]]:
    """The datasets a run (or any of its trials) recorded reading, joined by dataset."""
    entries: list[dict[str, Any]] = []
    for rel in storage.ls(exp_dir.path, recursive=True):
        if posixpath.basename(rel) != layout.DATASETS_USED:
            continue
        try:
            found = storage.read_json(rel).get("datasets", [])
        except (StorageError, ValueError, AttributeError) as exc:
            log.warning("cannot read %s: %s", storage.uri(rel), exc)
            continue
        for entry in found:
            entries = lineage.merge(entries, entry)
    return entries


def dataset_differences(storage: Storage, project: str, entries: list[dict[str, Any]]) -> list[str]:
    """One line per changed, added or removed file (or gone dataset) since the run read them."""
    from hopsml.data import dataset as ds
    from hopsml.data import fingerprint

    lines: list[str] = []
    for entry in entries:
        name = str(entry.get("name"))
        try:
            ddir, manifest = ds.open_dataset(storage, project, name)
        except HopsmlError as exc:
            lines.append(f"dataset {name!r} cannot be read now: {str(exc).split(';')[0]}")
            continue
        recorded = entry.get(lineage.SPLIT_FINGERPRINTS) or {}
        for split in entry.get("splits", []):
            if split not in recorded or recorded[split].get("fingerprint") in (None, fingerprint.UNKNOWN):
                log.warning("experiment read split %r of dataset %r without a fingerprint: cannot check it",
                            split, name)
                continue
            if split not in (manifest.get("splits") or {}):
                lines.append(f"dataset {name!r} has no split {split!r} now")
                continue
            now = fingerprint.compute_split(storage, ddir.path, manifest, split)
            lines += [f"dataset {name!r} split {split!r}: {change}"
                      for change in fingerprint.diff_split(recorded[split], now)]
    return lines


def _spark_version() -> str | None:
    try:
        import pyspark

        return str(pyspark.__version__)
    except ImportError:
        return None


def version_differences(recorded: Mapping[str, Any], now: Mapping[str, Any] | None = None) -> list[str]:
    """One line per package whose version is not the recorded one."""
    now = now if now is not None else versioning.stack_versions(_spark_version())
    return [f"{key} {recorded.get(key) or 'absent'} recorded, {now.get(key) or 'absent'} now"
            for key in sorted(set(recorded) | set(now))
            if key in recorded and recorded.get(key) != now.get(key)]


def differences(storage: Storage, project: str, rec: ExperimentRecord) -> list[str]:
    """What differs between the experiment's record and now: its datasets' bytes, the stack's versions."""
    exp_dir = ExperimentDir.from_id(project, rec.id)
    return (dataset_differences(storage, project, read_lineage(storage, exp_dir))
            + version_differences(rec.versions or {}))


# --- how the recorded program is entered, and what reran it ----------------------------------

def entry_point(rec: ExperimentRecord, storage: Storage, exp_dir: ExperimentDir) -> str:
    """How the recorded program is re-entered: FUNCTION, SCRIPT or NOTEBOOK."""
    if storage.exists(exp_dir.program(".ipynb")):
        return NOTEBOOK
    if not storage.exists(exp_dir.program(".py")):
        raise HopsmlError(f"experiment {rec.id} versioned no program (program.py or program.ipynb in "
                          f"{storage.uri(exp_dir.path)}): there is nothing to rerun")
    module = rec.module or ""
    program = (rec.program or "").replace(os.sep, "/")
    if module and module != "__main__" and program.endswith("/" + module.replace(".", "/") + ".py"):
        return FUNCTION
    if module == "__main__" or rec.program:
        return SCRIPT
    return FUNCTION


def reruns_of(storage: Storage, project: str, exp_id: str) -> list[ExperimentRecord]:
    """The experiments that reran `exp_id`, newest first."""
    return [rec for rec in list_records(storage, project) if rec.rerun_of == exp_id]







