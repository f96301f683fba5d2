"""Every wait of the driver channel has a bound: closing a task's end never blocks on a gone driver."""

import socket
import threading

from hopsml.cluster import auth
from hopsml.launcher import channel as channel_module
from hopsml.launcher.channel import DriverChannel, TaskChannel


def _closed_in_thread(task: TaskChannel, timeout_s: float) -> threading.Thread:
    closer = threading.Thread(target=task.close, kwargs={"timeout_s": timeout_s}, daemon=True)
    closer.start()
    closer.join(60)
    return closer


def test_close_returns_when_the_driver_end_is_gone_and_the_queue_is_full():
    driver_end, task_end = socket.socketpair()
    task = TaskChannel(task_end)
    driver_end.close()                            # the driver is gone
    task.send({"kind": "output", "line": "x"})    # the sender fails on it and stops
    task._sender.join(30)
    assert not task._sender.is_alive()
    for i in range(channel_module._OUTBOX_SIZE + 10):   # more than the queue holds: none of it blocks
        task.send({"kind": "output", "line": str(i)})
    closer = _closed_in_thread(task, timeout_s=1.0)
    assert not closer.is_alive(), "TaskChannel.close blocked on a full queue whose sender died"


def test_close_returns_when_the_driver_stops_reading():
    """A driver that is alive but reads nothing fills the socket buffers; close still returns."""
    driver_end, task_end = socket.socketpair()
    task = TaskChannel(task_end)
    big = "y" * 60_000
    for _ in range(channel_module._OUTBOX_SIZE + 10):
        task.send({"kind": "output", "line": big})
    closer = _closed_in_thread(task, timeout_s=1.0)
    assert not closer.is_alive(), "TaskChannel.close blocked on a driver that does not read"
    driver_end.close()


def test_queued_messages_are_flushed_on_close():
    received, done = [], threading.Event()

    def on_message(message, connection):
        received.append(message["line"])
        if len(received) == 100:
            done.set()

    secret = auth.new_secret()
    driver = DriverChannel("127.0.0.1", secret, on_message)
    try:
        task = TaskChannel.connect(driver.address, secret)
        for i in range(100):
            task.send({"kind": "output", "line": i})
        task.close()
        assert done.wait(30)
        assert received == list(range(100))
    finally:
        driver.close()


def test_driver_close_ends_its_accept_loop():
    driver = DriverChannel("127.0.0.1", auth.new_secret(), lambda message, connection: None)
    driver.close()
    driver._accept_thread.join(30)
    assert not driver._accept_thread.is_alive()
