"""Experiments as records: list them (:mod:`hopsml.run_catalog`, whose older, documented name this is:
``hopsml.experiments.list(...)``) and rerun one from its record (``rerun(id)``).

The rerun is a command above the verbs: it calls them again as the user did. What is rerun is what
the record versioned, entered the way it ran:

* ``function``: the program is the file that defines the run's function (a module such as the
  quickstart's ``hopsml.examples.digits``, or a test file): the function is taken from it (from the
  installed module when its source is the versioned one, else from the versioned ``program.py``) and
  the recorded verb is called with the recorded parameters, seed and settings of the verb;
* ``script``: the program is a script that called the verb: the versioned ``program.py`` runs again
  in a fresh Python (in the original script's folder when it is still there);
* ``notebook``: the versioned ``program.ipynb`` is executed cell by cell in a fresh kernel (nbclient).

What the verbs ask during a rerun, and the checks made before it (datasets and versions; any
difference refuses the rerun unless ``force``), are :mod:`hopsml.runs.rerun`.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import inspect
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hopsml import config, experiment
from hopsml.errors import HopsmlError
from hopsml.fs import Storage
from hopsml.layout import ExperimentDir
from hopsml.run_catalog import SORT_KEYS, STATES, TYPES, list, sort_records  # noqa: A004
from hopsml.runs.rerun import ENV, FUNCTION, SCRIPT, SEED_ENV, differences, entry_point, reruns_of, verb_of
from hopsml.tracking.record import ExperimentRecord, ExperimentType, read_record

__all__ = ["SORT_KEYS", "STATES", "TYPES", "RerunRefusedError", "RerunResult", "list", "rerun", "sort_records"]

log = logging.getLogger(__name__)


class RerunRefusedError(HopsmlError):
    """The datasets or package versions differ from those the experiment recorded, and force was not given."""


@dataclass
class RerunResult:
    """What a rerun did: the new experiment, the metric recorded and the new one, and what differed."""

    original: str
    rerun: str
    logdir: str
    how: str
    metric_key: str | None
    recorded: Any
    metric: Any
    reproduced: bool | None   # None: the original recorded nothing to compare with
    differences: builtins.list[str] = field(default_factory=builtins.list)   # `list` here is run_catalog's

    def __str__(self) -> str:
        lines = [f"differs from {self.original}'s record: {line}" for line in self.differences]
        key = self.metric_key or "metric"
        head = f"experiment {self.rerun} reran {self.original} ({self.how}) -> {self.logdir}"
        if self.reproduced is None:
            verdict = f"{self.original} recorded no {key} to compare with; now {key} = {self.metric!r}"
        elif self.reproduced:
            verdict = f"reproduced exactly: {key} = {self.metric!r}, as recorded"
        else:
            verdict = (f"NOT reproduced: {key} = {self.metric!r} now, {self.recorded!r} recorded "
                       f"(difference {_delta(self.metric, self.recorded)})")
        return "\n".join([*lines, head, verdict])


def _delta(now: Any, recorded: Any) -> str:
    try:
        return f"{float(now) - float(recorded):+.3g}"
    except (TypeError, ValueError):
        return "not numeric"


@contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """These environment variables set for the rerun's verbs (and the processes they start), then restored."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _load_function(rec: ExperimentRecord, storage: Storage, exp_dir: ExperimentDir, workdir: str) -> Callable:
    """The recorded function: from its installed module when that is the versioned source, else from
    the versioned program.py (loaded as a module of its own, shipped to the executors by value)."""
    qualname = rec.function or ""
    if not qualname or "<locals>" in qualname:
        raise HopsmlError(f"experiment {rec.id}'s function {qualname!r} is not defined at the top of its module, "
                          "so it cannot be called again on its own; rerun the script or notebook that defined it")
    versioned = storage.read_bytes(exp_dir.program(".py"))
    module = None
    try:
        module = importlib.import_module(rec.module or "")
        source = inspect.getsourcefile(module)
        with open(source or "", "rb") as handle:
            if handle.read() != versioned:
                log.warning("module %s differs from the program %s versioned: using the versioned one",
                            rec.module, rec.id)
                module = None
    except (ImportError, OSError, TypeError, ValueError):
        module = None
    if module is None:
        path = os.path.join(workdir, os.path.basename(rec.program or "program.py"))
        with open(path, "wb") as handle:
            handle.write(versioned)
        name = "hopsml_rerun_" + "".join(c if c.isalnum() else "_" for c in rec.id)
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise HopsmlError(f"cannot load the versioned program of {rec.id} from {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise HopsmlError(f"the program of {rec.id} defines no {qualname!r}: it cannot be rerun as a function")
    return target


def _call_verb(rec: ExperimentRecord, fn: Callable[..., Any]) -> None:
    """Call the recorded verb again with what the record says it was called with."""
    verb = verb_of(rec)
    common: dict[str, Any] = {"name": rec.name, "description": rec.description, "seed": rec.seed}
    extra = rec.extra
    gpus = rec.gpus_per_executor or None
    if verb == "launch":
        experiment.launch(fn, dict(rec.hyperparameters), metric_key=rec.metric_key, **common)
    elif verb == "allreduce":
        experiment.allreduce(fn, metric_key=rec.metric_key, num_workers=rec.executors, gpus_per_worker=gpus, **common)
    elif verb == "mirrored":
        evaluator = bool(extra.get("evaluator"))
        experiment.mirrored(fn, metric_key=rec.metric_key, evaluator=evaluator, gpus_per_worker=gpus,
                            num_workers=rec.executors, **common)
    elif verb == "parameter_server":
        evaluator, num_ps = bool(extra.get("evaluator")), int(extra.get("num_ps") or 1)
        experiment.parameter_server(fn, metric_key=rec.metric_key, evaluator=evaluator, num_ps=num_ps,
                                    num_workers=rec.executors - 1 - num_ps - int(evaluator), gpus_per_worker=gpus,
                                    **common)
    elif verb in ("grid_search", "random_search", "differential_evolution"):
        search: dict[str, Any] = {"direction": rec.direction or "max",
                                  "optimization_key": rec.optimization_key or "metric", **common}
        if verb == "grid_search":
            experiment.grid_search(fn, dict(rec.hyperparameters), **search)
        elif verb == "random_search":
            samples = sum((extra.get("trials") or {}).values()) or 10
            experiment.random_search(fn, dict(rec.hyperparameters), samples=samples,
                                     log_scale=extra.get("log_scale") or None, **search)
        else:
            experiment.differential_evolution(fn, dict(rec.hyperparameters), generations=int(extra["generations"]),
                                              population=int(extra["population"]),
                                              log_scale=extra.get("log_scale") or None, **search)
    else:
        raise HopsmlError(f"experiment {rec.id} was made by {verb!r}, which a rerun cannot call again")


def _run_script(rec: ExperimentRecord, storage: Storage, exp_dir: ExperimentDir, workdir: str) -> None:
    """Run the versioned script in a fresh Python, in the original script's folder when it still exists."""
    path = os.path.join(workdir, os.path.basename(rec.program or "program.py"))
    with open(path, "wb") as handle:
        handle.write(storage.read_bytes(exp_dir.program(".py")))
    folder = os.path.dirname(rec.program or "")
    cwd = folder if folder and os.path.isdir(folder) else workdir
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (cwd, env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, path], cwd=cwd, env=env, check=False)
    if done.returncode != 0:
        raise HopsmlError(f"the rerun of {rec.id}: its program {rec.program} exited with code {done.returncode}; "
                          "its output above says why")


def _run_notebook(rec: ExperimentRecord, storage: Storage, exp_dir: ExperimentDir, workdir: str) -> None:
    """Execute the versioned notebook cell by cell in a fresh kernel, as Jupyter would."""
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError as exc:
        raise HopsmlError(f"rerunning a notebook needs nbclient, nbformat and ipykernel ({exc}): "
                          "pip install nbclient nbformat ipykernel (hopsml's notebook extra)") from None
    original = rec.program if rec.program and rec.program.endswith(".ipynb") else None
    path = os.path.join(workdir, os.path.basename(original or "program.ipynb"))
    with open(path, "wb") as handle:
        handle.write(storage.read_bytes(exp_dir.program(".ipynb")))
    folder = os.path.dirname(original or "")
    cwd = folder if folder and os.path.isdir(folder) else workdir
    notebook = nbformat.read(path, as_version=4)
    env = {**os.environ, "JPY_SESSION_NAME": path}   # the kernel versions this copy as its program
    try:
        NotebookClient(notebook, timeout=None, kernel_name="python3",
                       resources={"metadata": {"path": cwd}}).execute(env=env)
    except CellExecutionError as exc:
        raise HopsmlError(f"the rerun of {rec.id}: a cell of its notebook failed: {str(exc)[-2000:]}") from None


def _new_rerun(storage: Storage, project: str, exp_id: str, since: str) -> ExperimentRecord:
    started = datetime.fromisoformat(since)
    found = [rec for rec in reruns_of(storage, project, exp_id) if datetime.fromisoformat(rec.start) >= started]
    if not found:
        raise HopsmlError(f"the program of {exp_id} ran, but started no experiment named {exp_id!r}'s name "
                          "with its function: was the verb call changed or made conditional?")
    return found[0]


def _same(rec: ExperimentRecord, new: ExperimentRecord) -> bool | None:
    """Whether the new run reproduced the recorded metric exactly (and a search's best parameters)."""
    if rec.metric is None:
        return None
    same = new.metric == rec.metric
    if rec.type == ExperimentType.PARALLEL_EXPERIMENTS.value:
        same = same and new.extra.get("best_hyperparameters") == rec.extra.get("best_hyperparameters")
    return bool(same)


def rerun(exp_id: str, force: bool = False, settings: config.Settings | None = None) -> RerunResult:
    """Run experiment `exp_id`'s recorded program again with its parameters, seed and verb, as a new
    experiment linked to it; refuses (RerunRefusedError) when its datasets or package versions differ,
    unless `force`. Returns what ran and whether the metric reproduced."""
    settings = settings or config.load()
    storage, project = Storage(settings.root), settings.project
    rec = read_record(storage, project, exp_id)
    exp_dir = ExperimentDir.from_id(project, exp_id)
    how = entry_point(rec, storage, exp_dir)
    changed = differences(storage, project, rec)
    if changed and not force:
        raise RerunRefusedError(f"experiment {exp_id} would not rerun on what it ran on:\n  " + "\n  ".join(changed)
                                + "\nprepare the data or install the versions it recorded, or pass --force "
                                  "(force=True) to rerun anyway and compare")
    for line in changed:
        log.warning("rerun of %s despite a difference: %s", exp_id, line)
    since = datetime.now().astimezone().isoformat(timespec="milliseconds")
    env = {ENV: exp_id, config.ENV_PREFIX + "ROOT": settings.root, config.ENV_PREFIX + "PROJECT": project}
    if rec.seed is not None:
        env[SEED_ENV] = str(rec.seed)
    with tempfile.TemporaryDirectory(prefix="hopsml-rerun-") as workdir, _environment(env):
        if how == FUNCTION:
            _call_verb(rec, _load_function(rec, storage, exp_dir, workdir))
        elif how == SCRIPT:
            _run_script(rec, storage, exp_dir, workdir)
        else:
            _run_notebook(rec, storage, exp_dir, workdir)
    new = _new_rerun(storage, project, exp_id, since)
    reproduced = _same(rec, new)
    new.rerun_differences = changed or None
    new.reproduced = {"metric_key": rec.optimization_key or rec.metric_key, "recorded": rec.metric,
                      "now": new.metric, "exactly": reproduced}
    storage.write_json(ExperimentDir.from_id(project, new.id).record, new.to_dict())
    return RerunResult(original=exp_id, rerun=new.id, logdir=storage.uri(ExperimentDir.from_id(project, new.id).path),
                       how=how, metric_key=rec.optimization_key or rec.metric_key, recorded=rec.metric,
                       metric=new.metric, reproduced=reproduced, differences=changed)
