"""What each task of a run does before the run's code: check the executor's Python stack against the
driver's, and install the user's own modules that travel with the run (`local_modules`).

An executor without hopsml, or with another numpy, pyarrow or framework than the notebook's, used to fail
inside Spark's unpickling with a traceback that named neither the host nor the package. Here each task of a
run first compares its Python and the versions of hopsml, numpy, pyarrow and the frameworks the function
imports with the driver's, and only then loads the run's code.

That first step must run where hopsml is missing, so the function that runs it refers to the standard
library alone and travels by value (cloudpickle's `register_pickle_by_value` on this module); the job's own
task function travels inside it as bytes, loaded after the check. A mismatch fails the task with a JSON report
between markers, the one thing a failed task can hand its driver; `raise_mismatch` turns it back into an
`ExecutorStackError`. The run verbs (through `launcher.driver.run_stage`) and the image job use it.
"""

from __future__ import annotations

import dis
import functools
import importlib.metadata
import json
import pickle
import socket
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from hopsml import DISTRIBUTION
from hopsml.errors import ExecutorStackError

TaskFunction = TypeVar("TaskFunction", bound=Callable[..., Any])  # of mapPartitions(WithIndex), mapInArrow, ...
_MARKER = "hopsml-executor-stack:"
ALWAYS = ("hopsml", "numpy", "pyarrow")  # what every run's code needs on the executor
# hopsml's own distribution is named apart from the package (the index's "hopsml" is another project). A string,
# so that the check, which travels by value and runs where hopsml may be missing, never imports hopsml.
_OWN_DISTRIBUTION = DISTRIBUTION


@dataclass(frozen=True)
class Preflight:
    """The driver's stack to check against (None: the check is off) and the module files to install."""

    stack: Stack | None
    modules: Mapping[str, bytes]


@dataclass(frozen=True)
class Stack:
    """The driver's Python (major.minor), its interpreter and the versions of the distributions that matter."""

    python: str
    executable: str
    packages: Mapping[str, str | None]


@functools.lru_cache(maxsize=1)
def _distributions() -> Mapping[str, list[str]]:
    """Import name -> the distributions that install it (read once: it scans every installed package)."""
    return importlib.metadata.packages_distributions()


def _version(distribution: str) -> str | None:
    if distribution == "hopsml":
        distribution = _OWN_DISTRIBUTION
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _imported_names(code: types.CodeType) -> Iterator[str]:
    """The top-level names of the modules a code object (and the functions inside it) imports."""
    for instruction in dis.get_instructions(code):
        if instruction.opname == "IMPORT_NAME":
            yield str(instruction.argval).split(".")[0]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _imported_names(const)


def used_modules(fn: object) -> Iterable[str]:
    """Top-level names of the modules `fn` uses: imported in its body, or module globals it refers to."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    names = set(_imported_names(code))
    fn_globals = getattr(fn, "__globals__", {})
    for name in code.co_names:
        value = fn_globals.get(name)
        if isinstance(value, types.ModuleType):
            names.add(value.__name__.split(".")[0])
        elif callable(value) and isinstance(getattr(value, "__module__", None), str):
            names.add(value.__module__.split(".")[0])
    return names


def driver_stack(fn: object = None, packages: Iterable[str] = ()) -> Stack:
    """The driver's stack: hopsml, numpy, pyarrow, `packages`, and the installed packages `fn` imports or uses."""
    distributions = _distributions()
    wanted = [*ALWAYS, *packages]
    for name in sorted(used_modules(fn)):
        if name in sys.stdlib_module_names or name == "__main__":
            continue
        for distribution in distributions.get(name, []):
            if distribution not in wanted and distribution != _OWN_DISTRIBUTION:
                wanted.append(distribution)
    return Stack(f"{sys.version_info[0]}.{sys.version_info[1]}", sys.executable,
                 {name: _version(name) for name in wanted})


def _differences(stack: Stack) -> list[dict[str, str | None]]:
    """On the executor: each package whose version is not the driver's (None: not installed)."""
    found: list[dict[str, str | None]] = []
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if python != stack.python:
        found.append({"package": "python", "executor": python, "driver": stack.python})
    for name, wanted in stack.packages.items():
        have = _version(name)
        if have != wanted:
            found.append({"package": name, "executor": have, "driver": wanted})
    return found


def guard(partition_fn: TaskFunction, preflight: Preflight) -> TaskFunction:
    """`partition_fn` (of mapPartitions or mapPartitionsWithIndex) behind the preflight: the task checks its
    stack and installs the modules, then loads and runs it."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    payload = cloudpickle.dumps(partition_fn)
    stack, modules = preflight.stack, dict(preflight.modules)

    def checked(*args: object) -> Iterable[Any]:
        differences = _differences(stack) if stack is not None else []
        if differences:
            report = {"host": socket.gethostname(), "executable": sys.executable, "differences": differences}
            raise RuntimeError(_MARKER + json.dumps(report) + _MARKER)
        if modules:
            from hopsml.cluster.local_modules import install

            install(modules)
        return pickle.loads(payload)(*args)

    return cast(TaskFunction, checked)


def raise_mismatch(error: BaseException | None, preflight: Preflight) -> None:
    """Raise the ExecutorStackError that a failed Spark job's error carries, if it carries one."""
    if preflight.stack is not None and (message := mismatch_in(error, preflight.stack)) is not None:
        raise ExecutorStackError(message) from None


def _nothing(iterator: Iterable[Any]) -> list[Any]:
    return []


def explain_failure(spark: Any, error: BaseException | None, preflight: Preflight, tasks: int) -> None:
    """After a failed job whose tasks could not run the check first, raise the ExecutorStackError that
    explains it: the one its error carries, or, when the error is a missing module, the one a check of
    `tasks` tasks on `spark` (a SparkHandle) finds. Tasks cannot check first when PySpark's worker fails before
    any of hopsml's code: an Arrow UDF imports pyarrow first, and a worker daemon module
    (`spark.python.daemon.module`, such as the opt-in hopsml.cluster.worker_daemon) is imported before every
    task. Returns when nothing explains it."""
    raise_mismatch(error, preflight)
    text = str(error or "")
    if preflight.stack is None or "No module named" not in text:
        return
    try:
        spark.run(guard(_nothing, preflight), range(tasks), tasks)
    except Exception as probe:  # noqa: BLE001 - only a stack report is of use here
        raise_mismatch(probe, preflight)
    if "No module named 'hopsml'" in text:  # not even the check could start there
        raise ExecutorStackError(
            "the executors' Python cannot import hopsml, so the job did not start (PySpark's worker said: No "
            f"module named 'hopsml'); the driver's Python is {preflight.stack.executable}. Give the executors the "
            "driver's environment: set PYSPARK_PYTHON to the driver's Python before the session starts (one "
            "machine), or ship it (README, 'On a real cluster')") from None


def mismatch_in(error: BaseException | None, stack: Stack) -> str | None:
    """The message for the executor report inside a failed job's error, or None when it holds none."""
    text = str(error or "")
    start = text.find(_MARKER)
    end = text.find(_MARKER, start + len(_MARKER)) if start >= 0 else -1
    if end < 0:
        return None
    try:
        report = json.loads(text[start + len(_MARKER):end])
    except ValueError:
        return None
    differences = "; ".join(f"{d['package']} {d['executor'] or 'is not installed there'} "
                            f"(the driver has {d['driver'] or 'none'})" for d in report.get("differences", []))
    return (f"executor {report.get('host')} runs another Python stack than this driver, so the run did not start: "
            f"{differences}. Its Python is {report.get('executable')}, the driver's {stack.executable}. Give the "
            "executors the driver's environment: set PYSPARK_PYTHON to the driver's Python before the session "
            "starts (one machine), or ship it (README, 'On a real cluster'); or turn the check off with "
            "HOPSML_CHECK_VERSIONS=false when you know the difference is harmless")
