"""A child's folder ($TMPDIR/hopsml-rank-*) is private, holds no channel secret, and does not outlive
the processes that used it: not when its parent is killed, nor when both are."""

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

from hopsml.cluster import auth
from hopsml.fs import Storage
from hopsml.launcher.channel import DriverChannel
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task import child as child_module
from hopsml.launcher.task.child import ChildRank

# A driver of its own: starts a child whose function sleeps, says where things are, then waits to be killed.
DRIVER = """
import os, sys, time
from hopsml.fs import Storage
from hopsml.launcher.task.child import ChildRank
from hopsml.launcher.spec import TaskSpec

def nap():
    print("child ready", flush=True)
    time.sleep(600)

if __name__ == "__main__":
    spec = TaskSpec(Storage(sys.argv[1]), "run", None, b"")
    child = ChildRank(nap, spec, rank=0, world_size=1, write_metrics=True)
    print(child._dir, child._proc.pid, flush=True)
    if sys.argv[2] == "start":
        time.sleep(600)
    else:
        child.wait()
"""


def _wait_for(condition, what: str, limit_s: float = 60.0):
    """Poll until `condition()` holds; a generous bound, only so a broken build does not hang the suite."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.1)


def _start_driver(tmp_path: Path, tmpdir: Path, mode: str) -> tuple[subprocess.Popen, str, int]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    driver = subprocess.Popen([sys.executable, str(script), str(tmp_path / "root"), mode], env=env,
                              stdout=subprocess.PIPE, text=True)
    folder, pid = driver.stdout.readline().split()
    log = tmp_path / "root" / "run" / "output.log"
    _wait_for(lambda: log.exists() and "child ready" in log.read_text(), "the child to start")
    return driver, folder, int(pid)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def test_a_child_whose_driver_is_killed_removes_its_folder_itself(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    driver, folder, child_pid = _start_driver(tmp_path, tmpdir, "start")
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    _wait_for(lambda: _gone(child_pid), "the child to notice its parent is gone")
    assert not [p for p in tmpdir.iterdir() if p.name.startswith("hopsml-rank-")]


def test_the_next_run_sweeps_the_folder_of_a_driver_and_child_killed_together(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    driver, folder, child_pid = _start_driver(tmp_path, tmpdir, "start")
    os.kill(child_pid, signal.SIGKILL)  # both at once, as the out-of-memory killer may
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    _wait_for(lambda: _gone(child_pid), "the child to end")
    assert os.path.isdir(folder)  # nobody was left to remove it
    assert child_module.sweep_dead(str(tmpdir)) == [folder]
    assert not [p for p in tmpdir.iterdir() if p.name.startswith("hopsml-rank-")]


def test_a_live_drivers_folder_is_not_swept(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    driver, folder, child_pid = _start_driver(tmp_path, tmpdir, "start")
    try:
        assert child_module.sweep_dead(str(tmpdir)) == [] and os.path.isdir(folder)
    finally:
        os.kill(child_pid, signal.SIGKILL)
        driver.send_signal(signal.SIGKILL)
        driver.wait()


def talk():
    print("hello over the channel")
    return 1.0


def test_the_channel_secret_reaches_the_child_but_never_its_payload_file(tmp_path, monkeypatch):
    written: list[bytes] = []
    dumps = child_module._dumps
    monkeypatch.setattr(child_module, "_dumps", lambda value: written.append(dumps(value)) or written[-1])
    lines, heard = [], threading.Event()

    def on_message(message, _connection):
        if message.get("kind") == "output":
            lines.append(message["line"])
            heard.set()

    driver = DriverChannel("127.0.0.1", auth.new_secret(), on_message)
    try:
        spec = TaskSpec(Storage(str(tmp_path)), "run", driver.address, driver.secret)
        report = ChildRank(talk, spec, rank=0, world_size=1, write_metrics=True).wait(60)
        assert report["ok"], report
        _wait_for(heard.is_set, "the child's output over the authenticated channel")
    finally:
        driver.close()
    assert "hello over the channel" in lines  # the child had the secret: the driver let it in
    assert written and all(driver.secret not in payload for payload in written)
