"""Framework ports: reserved outside the ephemeral range, held until released, then bindable."""

import socket

import pytest

from hopsml.cluster.ports import FrameworkPorts, ephemeral_range, reserve_port


def test_reserved_port_is_outside_the_ephemeral_range_and_held():
    sock = reserve_port("127.0.0.1")
    port = sock.getsockname()[1]
    low, high = ephemeral_range()
    assert not low <= port <= high
    with socket.socket() as other, pytest.raises(OSError):
        other.bind(("127.0.0.1", port))  # nobody else gets it while hopsml holds it
    sock.close()


def test_released_ports_are_bindable_by_the_framework():
    ports = FrameworkPorts.reserve("127.0.0.1", with_master=True)
    numbers = [ports.framework_port, ports.master_port]
    assert len(set(numbers)) == 2
    ports.release()
    ports.release()  # idempotent
    for port in numbers:
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))
            server.listen()


def test_only_rank_zero_reserves_a_master_port():
    ports = FrameworkPorts.reserve("127.0.0.1", with_master=False)
    assert ports.master_port is None and ports.framework_port > 0
    ports.release()
