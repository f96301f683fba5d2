"""The process helpers below the wings (hopsml/processes.py), with real processes: a recorded process is known by
its pid and start time, and a child set to die with its parent ends when that parent is killed, whether the
signal was set in a preexec_fn (the job runner's app) or by the child itself (a serving's instance)."""

import os
import signal
import subprocess
import sys

import pytest

from hopsml.processes import Proc, start_time, wait_gone

# A parent that starts a long sleeper, prints its pid and waits to be killed; the sleeper dies with it either way.
PARENT = """
import os, subprocess, sys, time
from hopsml.processes import parent_death_hook

if sys.argv[1] == "preexec":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             preexec_fn=parent_death_hook(os.getpid()))
else:
    child = subprocess.Popen([sys.executable, "-c", "import os, sys, time; from hopsml.processes import "
                              "die_with_parent; die_with_parent(int(sys.argv[1])); print('set', flush=True); "
                              "time.sleep(600)", str(os.getpid())], stdout=subprocess.PIPE)
    child.stdout.readline()
print(child.pid, flush=True)
time.sleep(600)
"""

WAIT_S = 60.0   # only bounds a failure: the kernel ends the child as soon as its parent is gone


@pytest.mark.parametrize("how", ["preexec", "in_the_child"])
def test_a_child_set_to_die_with_its_parent_ends_when_the_parent_is_killed(how):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, how], stdout=subprocess.PIPE, text=True)
    try:
        child = Proc.of(int(parent.stdout.readline()))
        assert child.alive()
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert wait_gone(child, WAIT_S)
        assert not child.alive()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_child_told_of_a_parent_that_is_not_its_own_ends_at_once_and_one_whose_parent_lives_goes_on():
    code = "import sys; from hopsml.processes import die_with_parent; die_with_parent(int(sys.argv[1])); sys.exit(7)"
    no_process = 10**7   # above the kernel's largest pid (2**22)
    ended = subprocess.run([sys.executable, "-c", code, str(no_process)], check=False)
    assert ended.returncode == 1
    kept = subprocess.run([sys.executable, "-c", code, str(os.getpid())], check=False)
    assert kept.returncode == 7


def test_a_recorded_process_is_known_by_its_start_time_not_its_pid_alone():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        proc = Proc.of(sleeper.pid)
        assert proc.alive() and proc.started == start_time(sleeper.pid)
        assert not Proc(sleeper.pid, proc.started + 1).alive()   # the same pid, another process's start
        assert Proc.from_dict(proc.to_dict()) == proc
        assert proc.signal(signal.SIGTERM)
        assert wait_gone(proc, WAIT_S)   # our child: reaped, so no zombie reads as alive
        assert not proc.alive() and not proc.signal(signal.SIGTERM)
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
