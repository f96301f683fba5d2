"""Run the hopsworks-tutorials' pipelines against hopsml, as a Hopsworks team would.

    python tests/tutorials/hopsworks_tutorials.py --tutorials <checkout or bare git dir> \
        [--pipelines churn,credit_scores,fraud_batch] [--work DIR] [--hopsml PATH]

The notebooks are read at run time from the checkout named (a work tree, or a bare git directory read with
`git show`); nothing of them is kept in hopsml. Each is changed only where a user of hopsml would change it:
`import hopsworks` becomes `from hopsml import hopsworks` (and `from hopsworks.X import` becomes
`from hopsml.hopsworks.X import`), `!pip install` lines are dropped, and the data URLs point at files that
tutorial_data.py makes locally. Then each pipeline's notebooks run in their order, each in a fresh kernel
whose working folder is the pipeline's folder (its helper modules copied beside it), all in one project under
`<work>/root`. The kernel runs this interpreter (or --python) with PYTHONPATH set to the hopsml checkout under
test, so that checkout's code is imported, not an installed copy.

Prints PASS/FAIL per notebook (a failure with its cell's first line and the exception's last lines), then
N/M per pipeline and in all; the exit code is 1 when a notebook fails. After each pipeline, every serving of the
project still running (a deployment whose notebook failed before `deployment.stop()`) is stopped and named.
The executed notebooks are kept under `<work>/<pipeline>/executed/`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNEL = "hopsml-tutorials"
PROJECT = "tutorials"


@dataclass(frozen=True)
class Pipeline:
    """One tutorial pipeline: its folder in the checkout and its notebooks in the order a user runs them."""

    folder: str
    notebooks: tuple[str, ...]
    helpers: tuple[str, ...] = field(default=())    # files and folders its notebooks import from


PIPELINES = {
    "churn": Pipeline("batch-ai-systems/churn", ("1_churn_feature_pipeline.ipynb", "2_churn_training_pipeline.ipynb",
                                                 "3_churn_batch_inference.ipynb")),
    "credit_scores": Pipeline("batch-ai-systems/credit_scores", (
        "1_credit_scores_feature_backfill.ipynb", "2_credit_scores_feature_pipeline.ipynb",
        "3_credit_scores_training_pipeline.ipynb", "4_credit_scores_batch_inference.ipynb"), ("functions.py",)),
    "fraud_batch": Pipeline("batch-ai-systems/fraud_batch", (
        "1_fraud_batch_feature_pipeline.ipynb", "2_fraud_batch_training_pipeline.ipynb",
        "3_fraud_batch_inference.ipynb"), ("features",)),
    "nyc_taxi_fares": Pipeline("batch-ai-systems/nyc_taxi_fares", (
        "1_nyc_taxi_fares_feature_backfill.ipynb", "2_nyc_taxi_fares_feature_pipeline.ipynb",
        "3_nyc_taxi_fares_training_pipeline.ipynb", "4_nyc_taxi_fares_batch_inference.ipynb"), ("features",)),
    "loan_approval": Pipeline("batch-ai-systems/loan_approval", (
        "1-loan-approval-feature-pipeline.ipynb", "2-loan-approval-training-pipeline.ipynb",
        "3-loan-approval-batch-inference.ipynb"), ("features",)),
    "fraud_online": Pipeline("real-time-ai-systems/fraud_online", (
        "1_fraud_online_feature_pipeline.ipynb", "2_fraud_online_training_pipeline.ipynb",
        "3_fraud_online_inference_pipeline.ipynb"), ("features",)),
    # fraud_online's pipeline, its predictor reading vectors from the online store's REST server (RonDB's)
    "online_inference_benchmark": Pipeline("benchmarks/online-inference-pipeline", (
        "1_fraud_online_feature_pipeline.ipynb", "2_fraud_online_training_pipeline.ipynb",
        "3_fraud_online_inference_pipeline.ipynb"), ("features",)),
}
DEFAULT_PIPELINES = ("churn", "credit_scores", "fraud_batch")


# --- reading the checkout ------------------------------------------------------------------------------------

class Checkout:
    """The tutorials' files, from a work tree or from a bare git directory (its HEAD)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bare = (path / "HEAD").is_file() and (path / "objects").is_dir()
        if not self.bare and not path.is_dir():
            sys.exit(f"--tutorials {path}: not a folder; name a checkout of logicalclocks/hopsworks-tutorials "
                     "or its bare git directory")

    def _git(self, *args: str) -> bytes:
        return subprocess.run(["git", "--git-dir", str(self.path), *args], check=True, capture_output=True).stdout

    def read(self, name: str) -> bytes:
        if self.bare:
            try:
                return self._git("show", f"HEAD:{name}")
            except subprocess.CalledProcessError as exc:
                raise FileNotFoundError(f"{name} is not in {self.path} (HEAD): {exc.stderr.decode().strip()}") from exc
        return (self.path / name).read_bytes()

    def files_under(self, name: str) -> list[str]:
        """Every file at or below `name` (a file or a folder), as paths inside the checkout."""
        if self.bare:
            listed = self._git("ls-tree", "-r", "--name-only", "HEAD", "--", name).decode().splitlines()
            return [line for line in listed if line]
        target = self.path / name
        if target.is_file():
            return [name]
        return sorted(str(p.relative_to(self.path)) for p in target.rglob("*") if p.is_file())


# --- the one change a hopsml user makes --------------------------------------------------------------------

_IMPORT = re.compile(r"^(\s*)import hopsworks\s*$")
_FROM = re.compile(r"^(\s*)from (hopsworks|hsfs|hsml)(\.[\w.]+)? import ")
_PIP = re.compile(r"^\s*[!%]\s*pip\s+install\b")
_URL = re.compile(r"""(["'])(https?://[^"']+/([^/"']+\.\w+))\1""")   # a file's URL (a.csv), not a service's


def _from_sdk(match: re.Match) -> str:
    """`from hopsworks.X import` -> `from hopsml.hopsworks.X import`; the SDK's own hsfs and hsml packages (the
    hopsworks wheel installs them at the top level) -> `from hopsml.hopsworks.hsfs.X import` and hsml's."""
    package = "" if match.group(2) == "hopsworks" else "." + match.group(2)
    return f"{match.group(1)}from hopsml.hopsworks{package}{match.group(3) or ''} import "


def rewrite(source: str, files: dict[str, Path]) -> str:
    """The cell as a hopsml user would have it: the import changed, pip lines dropped, data URLs local.

    >>> rewrite("!pip install -U 'hopsworks[python]'\\nimport hopsworks", {})
    'from hopsml import hopsworks'
    >>> rewrite("from hopsworks.hsfs.builtin_transformations import label_encoder", {})
    'from hopsml.hopsworks.hsfs.builtin_transformations import label_encoder'
    >>> rewrite("from hsfs.transformation_statistics import TransformationStatistics", {})
    'from hopsml.hopsworks.hsfs.transformation_statistics import TransformationStatistics'
    >>> rewrite('pd.read_csv("https://repo.hops.works/x/a.csv")', {"a.csv": Path("/d/a.csv")})
    "pd.read_csv('/d/a.csv')"
    >>> rewrite('post(f"https://{host}:4406/0.1.0/batch_feature_store")', {})
    'post(f"https://{host}:4406/0.1.0/batch_feature_store")'
    """
    lines = []
    for line in source.splitlines():
        if _PIP.match(line):
            continue
        line = _IMPORT.sub(r"\1from hopsml import hopsworks", line)
        line = _FROM.sub(_from_sdk, line)
        lines.append(line)
    text = "\n".join(lines)

    def local(match: re.Match) -> str:
        name = match.group(3)
        if name not in files:
            raise KeyError(f"the notebook reads {match.group(2)}, which no generator makes: add {name!r} to the "
                           "pipeline's generator in tutorial_data.py")
        return repr(str(files[name]))

    return _URL.sub(local, text)


# --- the kernel ----------------------------------------------------------------------------------------------

def register_kernel(work: Path, python: str, hopsml: Path) -> Path:
    """A kernel spec under `<work>/jupyter` that runs `python` with hopsml's checkout first on its path."""
    spec = work / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}", "--IPKernelApp.log_level=ERROR"],
        "display_name": f"hopsml tutorials ({hopsml})", "language": "python",
        "env": {"PYTHONPATH": str(hopsml), "MPLBACKEND": "Agg"},
    }, indent=1))
    return spec.parent.parent


# --- one notebook --------------------------------------------------------------------------------------------

@dataclass
class Result:
    pipeline: str
    notebook: str
    ok: bool
    seconds: float
    cell: str = ""
    error: str = ""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _failure(notebook) -> tuple[str, str]:
    """The failing cell's first line and the exception's last lines, from the executed notebook's outputs."""
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                first = next((line for line in cell.source.splitlines() if line.strip()
                              and not line.lstrip().startswith("#")), cell.source[:80])
                trace = _ANSI.sub("", "\n".join(output.get("traceback", []))).splitlines()
                frames = [line.strip() for line in trace if line.startswith(("File ", "Cell In["))]
                # where the notebook called, and the last frames outside installed packages (hopsml's own)
                frames = list(dict.fromkeys(frames[:1] + [f for f in frames if "site-packages" not in f][-2:]
                                            + frames[-1:]))
                exception = f"{output.get('ename', '')}: {output.get('evalue', '')}".strip().splitlines()
                return first.strip(), "\n".join(frames + exception[-4:])
    return "", ""


def run_notebook(pipeline: str, name: str, source: bytes, folder: Path, files: dict[str, Path],
                 timeout: int) -> Result:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    notebook = nbformat.reads(source.decode(), as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.source = rewrite(cell.source, files)
            cell.outputs = []
    started = time.monotonic()
    ok, cell_line, error = True, "", ""
    os.environ["JPY_SESSION_NAME"] = str(folder / name)
    client = NotebookClient(notebook, timeout=timeout, kernel_name=KERNEL,
                            resources={"metadata": {"path": str(folder)}})
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
        ok = False
        cell_line, error = _failure(notebook)
        if not error:    # a timeout or a dead kernel leaves no error output
            error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
            running = [c for c in notebook.cells if c.cell_type == "code" and c.get("execution_count") is None
                       and c.source.strip()]
            cell_line = running[0].source.strip().splitlines()[0] if running else ""
    executed = folder / "executed"
    executed.mkdir(exist_ok=True)
    nbformat.write(notebook, executed / name)
    return Result(pipeline, name, ok, time.monotonic() - started, cell_line, error)


# --- a pipeline ----------------------------------------------------------------------------------------------

# --- what the notebooks leave running -----------------------------------------------------------------------

# Run by the kernels' interpreter with the checkout under test: every serving of the project that is not
# stopped is stopped (a deployment's server outlives the kernel that started it), and its name printed.
_STOP_SERVINGS = """
from hopsml import serving
for found in serving.get_all():
    if str(found.status) != "Stopped":
        serving.stop(found.name)
        print(f"{found.name}({found.status})")
"""


def stop_servings(python: str) -> list[str]:
    """Stop the servings the notebooks left running or failed in the project (a failed notebook stops before
    its `deployment.stop()`); returns 'name(status)' of each. The environment is the kernels' (root, project,
    PYTHONPATH)."""
    done = subprocess.run([python, "-c", _STOP_SERVINGS], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        print(f"      could not stop the project's servings: {done.stderr.strip().splitlines()[-1:]}", flush=True)
    return done.stdout.split()


def run_pipeline(key: str, checkout: Checkout, work: Path, seed: int, timeout: int) -> list[Result]:
    import numpy as np

    sys.path.insert(0, str(HERE))
    from tutorial_data import GENERATORS

    pipeline = PIPELINES[key]
    folder = work / key
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for helper in pipeline.helpers:
        for name in checkout.files_under(f"{pipeline.folder}/{helper}"):
            target = folder / Path(name).relative_to(pipeline.folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(checkout.read(name))
    files = GENERATORS[key](work / "data" / key, np.random.default_rng(seed))
    results = []
    for name in pipeline.notebooks:
        result = run_notebook(key, name, checkout.read(f"{pipeline.folder}/{name}"), folder, files, timeout)
        print(f"{'PASS' if result.ok else 'FAIL'}  {key}/{name}  ({result.seconds:.0f} s)", flush=True)
        if not result.ok:
            print(f"      cell: {result.cell}", flush=True)
            for line in result.error.splitlines():
                print(f"      | {line}", flush=True)
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tutorials", required=True, type=Path,
                        help="a checkout of logicalclocks/hopsworks-tutorials, or its bare git directory")
    parser.add_argument("--pipelines", default=",".join(DEFAULT_PIPELINES),
                        help=f"comma-separated, of {', '.join(PIPELINES)} (default: %(default)s)")
    parser.add_argument("--work", type=Path, default=None,
                        help="where the data, the project and the executed notebooks go (default: a new temporary "
                             "folder); emptied first")
    parser.add_argument("--hopsml", type=Path, default=HERE.parents[1],
                        help="the hopsml checkout the kernels import (default: the one this script is in)")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter the kernels run (default: this one)")
    parser.add_argument("--seed", type=int, default=53, help="the data generators' seed")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds one cell may run")
    args = parser.parse_args(argv)

    keys = [key.strip() for key in args.pipelines.split(",") if key.strip()]
    unknown = [key for key in keys if key not in PIPELINES]
    if unknown:
        parser.error(f"unknown pipeline(s) {unknown}; known: {', '.join(PIPELINES)}")
    if not (args.hopsml / "hopsml" / "__init__.py").is_file():
        parser.error(f"--hopsml {args.hopsml}: no hopsml/__init__.py there")
    if args.work is None:
        import tempfile
        args.work = Path(tempfile.mkdtemp(prefix="hopsml-tutorials-"))
    work = args.work.resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    checkout = Checkout(args.tutorials.resolve())

    # The kernels inherit this environment: one project under the work folder, this checkout's hopsml.
    os.environ.update({"HOPSML_ROOT": str(work / "root"), "HOPSML_PROJECT": PROJECT,
                       "HOPSML_LOG_DIR": str(work / "logs"), "JUPYTER_PATH": str(register_kernel(
                           work, args.python, args.hopsml.resolve())),
                       "PYTHONPATH": str(args.hopsml.resolve()), "MPLBACKEND": "Agg"})
    os.environ.pop("HOPSML_CONF", None)
    print(f"hopsml: {args.hopsml.resolve()} ({_describe(args.hopsml)}); tutorials: {checkout.path} "
          f"({_describe(checkout.path, bare=checkout.bare)}); work: {work}", flush=True)

    started = time.monotonic()
    results: list[Result] = []
    for key in keys:
        try:
            results += run_pipeline(key, checkout, work, args.seed, args.timeout)
        finally:
            left = stop_servings(args.python)
            if left:
                print(f"      {key} left serving(s) not stopped, now stopped: {', '.join(left)}", flush=True)
    print()
    for key in keys:
        mine = [r for r in results if r.pipeline == key]
        print(f"{key}: {sum(r.ok for r in mine)}/{len(mine)}")
    passed = sum(r.ok for r in results)
    print(f"total: {passed}/{len(results)} notebooks ran to the end ({time.monotonic() - started:.0f} s)")
    return 0 if passed == len(results) else 1


def _describe(path: Path, bare: bool = False) -> str:
    """The commit a checkout is at, for the record."""
    command = ["git", "--git-dir", str(path)] if bare else ["git", "-C", str(path)]
    try:
        return subprocess.run([*command, "log", "-1", "--format=%h %s"], check=True, capture_output=True,
                              text=True).stdout.strip()[:72]
    except (subprocess.CalledProcessError, OSError):
        return "not a git checkout"


if __name__ == "__main__":
    sys.exit(main())
