"""The ranks of a barrier stage meet at the driver (launcher.task.rank.meet, driver.Rendezvous): real channels,
ranks in threads; Spark's task context is replaced by an object with the three calls meet makes."""

import random
import socket
import threading
import time

import pytest

from hopsml.cluster import auth
from hopsml.errors import ClusterError
from hopsml.fs import Storage
from hopsml.launcher.channel import DriverChannel
from hopsml.launcher.driver import StageMonitor
from hopsml.launcher.spec import TaskSpec
from hopsml.launcher.task.rank import meet


class TaskContext:
    """What meet reads of pyspark's BarrierTaskContext."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size

    def partitionId(self) -> int:  # noqa: N802 - pyspark's name
        return self.rank

    def getTaskInfos(self) -> list[object]:  # noqa: N802 - pyspark's name
        return [object()] * self.world_size

    def allGather(self, message: str) -> list[str]:  # noqa: N802 - pyspark's name
        raise AssertionError("a run with a channel never calls Spark's allGather")


@pytest.fixture
def driver():
    monitor = StageMonitor(echo=False)
    channel = DriverChannel("127.0.0.1", auth.new_secret(), monitor)
    yield channel
    channel.close()


def spec_for(channel, tmp_path) -> TaskSpec:
    return TaskSpec(Storage(str(tmp_path)), "run", channel.address, channel.secret)


def meet_all(spec: TaskSpec, world_size: int, timeout_s: float = 30.0) -> dict[int, object]:
    """Every rank meets in its own thread, started in a random order with random delays."""
    results: dict[int, object] = {}
    order = list(range(world_size))
    random.shuffle(order)

    def rank_thread(rank: int) -> None:
        time.sleep(random.random() * 0.05)
        try:
            results[rank] = meet(TaskContext(rank, world_size), spec, {"rank": rank, "host": f"h{rank}"}, timeout_s)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            results[rank] = exc

    threads = [threading.Thread(target=rank_thread, args=(r,)) for r in order]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def test_every_rank_learns_every_rank_in_rank_order(driver, tmp_path):
    results = meet_all(spec_for(driver, tmp_path), 5)
    expected = [{"rank": r, "host": f"h{r}"} for r in range(5)]
    assert results == {r: expected for r in range(5)}


def test_a_retried_stage_meets_again_on_the_same_channel(driver, tmp_path):
    spec = spec_for(driver, tmp_path)
    first = meet_all(spec, 3)
    second = meet_all(spec, 3)
    assert first == second == {r: [{"rank": i, "host": f"h{i}"} for i in range(3)] for r in range(3)}


def test_a_rank_whose_peer_never_comes_says_so_within_its_timeout(driver, tmp_path):
    spec = spec_for(driver, tmp_path)
    with pytest.raises(ClusterError, match=r"rank 0 waited 1 s for the other ranks.*collective_timeout_s"):
        meet(TaskContext(0, 2), spec, {"rank": 0}, timeout_s=1.0)


def test_a_driver_that_closes_ends_the_wait(tmp_path):
    channel = DriverChannel("127.0.0.1", auth.new_secret(), StageMonitor(echo=False))
    spec = spec_for(channel, tmp_path)
    threading.Timer(0.5, channel.close).start()
    with pytest.raises(ClusterError, match="rank 1: the driver at 127.0.0.1:.* closed its channel"):
        meet(TaskContext(1, 2), spec, {"rank": 1}, timeout_s=120.0)  # ended by the close, not the timeout


def test_an_unreachable_driver_is_named(tmp_path):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    spec = TaskSpec(Storage(str(tmp_path)), "run", ("127.0.0.1", port), auth.new_secret())
    with pytest.raises(ClusterError, match=rf"rank 3 cannot reach the driver at 127.0.0.1:{port}"):
        meet(TaskContext(3, 4), spec, {}, timeout_s=5.0)


def test_without_a_channel_spark_gathers(tmp_path):
    class Gathering(TaskContext):
        def allGather(self, message: str) -> list[str]:  # noqa: N802 - pyspark's name
            return [message, '{"rank": 1}']

    spec = TaskSpec(Storage(str(tmp_path)), "run", None, b"")
    assert meet(Gathering(0, 2), spec, {"rank": 0}, timeout_s=5.0) == [{"rank": 0}, {"rank": 1}]
