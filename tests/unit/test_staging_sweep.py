"""Staging folders of processes that died even before their watcher could clean up are removed by
the next run on the host, and only those."""

import os
import subprocess
import sys
import time

from hopsml.tracking.staging import PREFIX, sweep_dead


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _folder(tmp_path, pid, age_s):
    path = tmp_path / f"{PREFIX}{pid}-abc"
    path.mkdir()
    (path / "output.log").write_text("x\n")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_only_old_folders_of_dead_processes_are_removed(tmp_path):
    dead = _dead_pid()
    gone = _folder(tmp_path, dead, 3600)
    alive = _folder(tmp_path, os.getpid(), 3600)
    other = tmp_path / "hopsml-model-x"
    other.mkdir()
    assert sweep_dead(60, str(tmp_path)) == [str(gone)]
    assert not gone.exists() and alive.exists() and other.exists()


def test_a_dead_process_folder_touched_recently_is_kept(tmp_path):
    kept = _folder(tmp_path, _dead_pid(), 5)
    assert sweep_dead(60, str(tmp_path)) == []
    assert kept.exists()


def test_the_watcher_of_a_run_that_ended_cleanly_exits_at_once_and_touches_nothing(tmp_path):
    from hopsml.tracking import staging

    folder = tmp_path / f"{PREFIX}1-x"
    folder.mkdir()
    watcher = staging._start_watcher(str(tmp_path / "root"), "Projects/p/Experiments/a_1", str(folder))
    try:
        watcher.stdin.write(staging._DONE)
        watcher.stdin.flush()            # the pipe stays open, as when the run forked a child
        assert watcher.wait(60) == 0
    finally:
        watcher.stdin.close()
    assert folder.exists() and not (tmp_path / "root").exists()


def test_the_watcher_of_a_dead_run_copies_its_files_and_removes_the_folder(tmp_path):
    from hopsml.tracking import staging

    folder = tmp_path / f"{PREFIX}1-y"
    (folder / "tensorboard").mkdir(parents=True)
    (folder / "output.log").write_text("last words\n")
    (folder / "tensorboard" / "events.out").write_bytes(b"e")
    watcher = staging._start_watcher(str(tmp_path / "root"), "Projects/p/Experiments/a_1", str(folder))
    watcher.stdin.close()                # what the death of the run's process does to the pipe
    assert watcher.wait(120) == 0
    run = tmp_path / "root" / "Projects/p/Experiments/a_1"
    assert (run / "output.log").read_text() == "last words\n" and (run / "tensorboard" / "events.out").exists()
    assert not folder.exists()
