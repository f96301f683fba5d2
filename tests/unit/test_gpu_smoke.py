"""bench/gpu_smoke.py runs where only numpy and cupy exist: without cupy it skips; with the fake cupy of
tests/distributed its items all run (NCCL calls do nothing there, which is right for a size-1 communicator,
and two ranks sharing one fake GPU take the host-staged path), and nothing imports pyspark or pyarrow."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "gpu_smoke.py"

# pyspark and pyarrow are made unimportable, so any module-level import of them fails the run
RUN = textwrap.dedent(f"""
    import runpy, sys
    sys.modules["pyspark"] = None
    sys.modules["pyarrow"] = None
    sys.argv = [{str(BENCH)!r}]
    try:
        runpy.run_path({str(BENCH)!r}, run_name="__main__")
    finally:
        print("HEAVY", sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "pyarrow")
                              and sys.modules[m] is not None))
""")

SHIM = textwrap.dedent(f"""
    import sys
    import numpy as np
    sys.path.insert(0, {str(REPO / "tests" / "distributed")!r})
    import fake_cupy
    fake_cupy.install()
    module = sys.modules["cupy"]
    for name in dir(np):  # the array functions the training step uses (exp, log, arange, ...)
        if not hasattr(module, name):
            setattr(module, name, getattr(np, name))
    module.__version__ = "fake"
    module.cuda.runtime.runtimeGetVersion = lambda: 0
""")


def run(tmp_path: Path, *, fake: bool) -> subprocess.CompletedProcess:
    path = [str(REPO)]
    if fake:
        (tmp_path / "cupy").mkdir()
        (tmp_path / "cupy" / "__init__.py").write_text(SHIM)
        path.insert(0, str(tmp_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    env.pop("HOPSML_GPU_COLLECTIVE", None)
    return subprocess.run([sys.executable, "-c", RUN], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


def test_without_cupy_it_says_skipped_and_succeeds(tmp_path):
    done = run(tmp_path, fake=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("skipped: no cupy/GPU (cupy is not importable")
    assert "HEAVY []" in done.stdout


def test_with_a_cupy_every_item_runs_and_passes(tmp_path):
    done = run(tmp_path, fake=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert not [line for line in lines if line.startswith("FAIL")], done.stdout
    passed = [line for line in lines if line.startswith("PASS ")]
    assert sum("size-1 NCCL" in line for line in passed) == 24
    assert sum("2 ranks on 1 GPU (host-staged)" in line for line in passed) == 26
    assert sum("(host-staged): allreduce_async" in line for line in passed) == 2
    assert any("HOPSML_GPU_COLLECTIVE=nccl: clear CollectiveError" in line for line in passed)
    assert any(line.startswith("PASS cupy training step") for line in passed)
    assert sum(line.startswith("PASS timeline, 2 ranks") and "timeline:" in line for line in passed) == 2
    assert "device all-reduce ms (median; timeline off, on, on without CUDA events)" in done.stdout
    assert "all passed" in lines and "HEAVY []" in done.stdout
