"""A notebook job's process: `python -m hopsml.jobs.notebook NOTEBOOK FOLDER [ARGS...]` runs the notebook cell by
cell in a fresh kernel (nbclient), as Jupyter's "Restart and run all" would, prints each cell's output as it
completes (the execution's stdout.log) and writes the notebook with its outputs to FOLDER/executed.ipynb, also
when a cell fails. The job's arguments reach the notebook as `sys.argv[1:]`, set by a first cell tagged
`hopsml-job-arguments` (as papermill injects its parameters), and as JSON in HOPSML_JOB_ARGS.

Exit status: 0 when every cell ran, 1 when a cell failed, 2 when the kernel could not run it. On SIGTERM (the
execution is stopped, or its owner ended) the kernel's process group is ended too: jupyter_client starts a
kernel in a session of its own, so the runner's signal to this process's group would not reach it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from typing import Any

from hopsml.layout import EXECUTION_NOTEBOOK

ARGS_TAG = "hopsml-job-arguments"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_kernel_pid: list[int] = []


def _print(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def _show_outputs(cell: Any, cell_index: int, **_: object) -> None:
    """What a cell printed or returned, in the order it came: the log a notebook job leaves."""
    if cell.get("cell_type") != "code" or ARGS_TAG in cell.get("metadata", {}).get("tags", []):
        return
    _print(f"--- cell {cell_index} ---")
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "stream":
            _print(output.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            text = output.get("data", {}).get("text/plain")
            if text:
                _print(text if isinstance(text, str) else "".join(text))
        elif kind == "error":
            _print(_ANSI.sub("", "\n".join(output.get("traceback", []))))


def _remember_kernel(**_: object) -> None:
    """Called when the kernel is up: note its pid, to end its group on SIGTERM."""
    client = _client[0] if _client else None
    process = getattr(getattr(getattr(client, "km", None), "provisioner", None), "process", None)
    if process is not None and getattr(process, "pid", None):
        _kernel_pid.append(process.pid)


_client: list[Any] = []


def _on_term(signum: int, _frame: object) -> None:
    for pid in _kernel_pid:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    os._exit(128 + signum)


def arguments_cell(nbformat: Any, path: str, args: list[str]) -> Any:
    """The first cell: the job's arguments as sys.argv, as a script of the job would get them."""
    source = f"import sys\nsys.argv = {[path, *args]!r}"
    return nbformat.v4.new_code_cell(source, metadata={"tags": [ARGS_TAG]})


def main(argv: list[str]) -> int:
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError as exc:
        _print(f"hopsml: a notebook job needs nbclient, nbformat and ipykernel ({exc}): "
               "pip install nbclient nbformat ipykernel (hopsml's notebook extra)")
        return 2
    path, output, args = argv[0], os.path.join(argv[1], EXECUTION_NOTEBOOK), argv[2:]
    signal.signal(signal.SIGTERM, _on_term)
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.insert(0, arguments_cell(nbformat, path, args))
    env = {**os.environ, "JPY_SESSION_NAME": path, "HOPSML_JOB_ARGS": json.dumps(args)}
    client = NotebookClient(notebook, timeout=None, startup_timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}},
                            on_cell_executed=_show_outputs, on_notebook_start=_remember_kernel)
    _client.append(client)
    code = 0
    try:
        client.execute(env=env)
    except CellExecutionError as exc:
        _print(f"hopsml: a cell of {os.path.basename(path)} failed (its traceback is above): "
               f"{getattr(exc, 'ename', type(exc).__name__)}: {getattr(exc, 'evalue', exc)}")
        code = 1
    except Exception as exc:  # noqa: BLE001 - the kernel died or did not start: say so in the log, exit 2
        _print(f"hopsml: the kernel could not run {os.path.basename(path)}: {type(exc).__name__}: {exc}")
        code = 2
    finally:
        nbformat.write(notebook, output)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
