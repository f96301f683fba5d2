import socket
import threading

from hopsml.cluster import auth
from hopsml.launcher.channel import DriverChannel, TaskChannel


def test_messages_flow_both_ways_and_strangers_are_refused(caplog):
    received, got = [], threading.Event()

    def on_message(message, connection):
        received.append(message)
        connection.send({"kind": "stop"})
        got.set()

    secret = auth.new_secret()
    driver = DriverChannel("127.0.0.1", secret, on_message)
    try:
        # a connection with the wrong secret is refused, the channel keeps serving
        assert TaskChannel.connect(driver.address, auth.new_secret(), timeout_s=5) is None
        raw = socket.create_connection(driver.address)
        raw.recv(32)
        raw.sendall(b"\x00" * 64)
        assert raw.recv(1) == b""  # closed by the driver
        raw.close()

        task = TaskChannel.connect(driver.address, secret)
        task.send({"kind": "output", "line": "hello"})
        assert got.wait(10)
        assert received == [{"kind": "output", "line": "hello"}]
        assert task.inbox.get(timeout=10) == {"kind": "stop"}
        task.close()
    finally:
        driver.close()
    assert "refused a connection" in caplog.text
