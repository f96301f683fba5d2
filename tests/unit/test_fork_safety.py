"""A launch forks its child from the task's Python worker only while every thread there is a Python thread (or
one made for forks): a native library's own threads (S3's client) left a forked child to die of SIGSEGV."""

import os
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import ctypes, threading, time
    from hopsml.launcher.task.child import fork_is_safe

    print(fork_is_safe())
    ready = threading.Event()
    threading.Thread(target=ready.wait, daemon=True).start()   # a Python thread: the fork does not touch it
    print(fork_is_safe())
    libc = ctypes.CDLL(None)
    thread = ctypes.c_ulong()
    # a native thread, as a library starts one: libc's sleep(30) run by pthread_create (its argument the seconds)
    assert libc.pthread_create(ctypes.byref(thread), None, libc.sleep, ctypes.c_void_p(30)) == 0
    time.sleep(0.2)
    print(fork_is_safe())
    ready.set()
""")


def test_a_native_thread_of_a_library_makes_the_fork_unsafe_and_python_threads_do_not():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}   # as Spark starts its workers
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "False"], done.stdout
