"""A function in a child process: its result, its native output, and how its death is reported."""

import os
import signal

from hopsml.fs import Storage
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.child import ChildRank


def _trial(tmp_path, fn, **kwargs):
    spec = TaskSpec(Storage(str(tmp_path)), "trial", None, b"", trial=5)
    return ChildRank(fn, spec, kwargs=kwargs, rank=0, world_size=1, write_metrics=True, native_output=True).wait(60)


def native_then_return(x):
    print("python line")
    os.write(1, b"native stdout\n")
    os.write(2, b"native stderr\n")
    return {"metric": x * 2}


def test_child_gets_its_arguments_and_its_native_output_is_logged(tmp_path):
    report = _trial(tmp_path, native_then_return, x=4)
    assert report["ok"] and report["result"] == {"metric": 8} and report["trial"] == 5
    log = (tmp_path / "trial" / "output.log").read_text()
    assert "python line" in log and "native stdout" in log and "native stderr" in log


def killed(x):
    print(f"allocating {x} GiB")
    os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's out-of-memory killer sends


def segfault():
    import ctypes

    ctypes.string_at(0)


def test_a_killed_child_is_a_failure_naming_the_signal_with_its_last_lines(tmp_path):
    report = _trial(tmp_path, killed, x=64)
    assert not report["ok"] and report["trial"] == 5 and report["duration"] >= 0
    assert report["error"].startswith("trial 5: its process was killed by SIGKILL") \
        and "out-of-memory" in report["error"]
    assert "allocating 64 GiB" in report["tail"]


def test_a_segfault_leaves_the_python_traceback_in_the_log(tmp_path):
    report = _trial(tmp_path, segfault)
    assert not report["ok"] and "SIGSEGV" in report["error"]
    log = (tmp_path / "trial" / "output.log").read_text()
    assert "Segmentation fault" in log and "in segfault" in log  # faulthandler's dump


def sleeper(secs):
    import time

    time.sleep(secs)


def test_a_child_past_its_limit_is_killed_and_reported(tmp_path):
    spec = TaskSpec(Storage(str(tmp_path)), "trial", None, b"")
    report = ChildRank(sleeper, spec, kwargs={"secs": 60}, rank=2, world_size=1, write_metrics=True).wait(0.5)
    assert not report["ok"] and report["error"] == "rank 2: it did not end within 0 s and was killed"
