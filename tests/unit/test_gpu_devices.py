"""Spark's GPU addresses -> the rank's GPUs, the gpus_per_worker check, and pinning (no Spark, no GPU)."""

from __future__ import annotations

import sys
from dataclasses import fields
from types import SimpleNamespace

import pytest

from hopsml import devices
from hopsml.errors import ClusterError
from hopsml.launcher.task import rank


@pytest.mark.parametrize("addresses, visible, physical", [
    (["1"], "4,5,6,7", ["5"]),  # TorchDistributor's reading: an index into the executor's list
    (["0", "3"], "4,5,6,7", ["4", "7"]),
    (["2"], None, ["2"]),  # no restriction: addresses are the physical ids
    (["0"], " 3 , 2 ", ["3"]),
    (["GPU-8e6b"], "GPU-1a2f,GPU-8e6b", ["GPU-8e6b"]),  # a discovery script that prints UUIDs
    ([], "4,5", []),
])
def test_addresses_map_through_cuda_visible_devices(addresses, visible, physical):
    assert devices.physical_gpus(addresses, visible) == physical


@pytest.mark.parametrize("addresses, visible, message", [
    (["4"], "4,5", r"address '4'.*CUDA_VISIBLE_DEVICES='4,5' \(2 visible GPUs\).*indices 0\.\.1"),
    (["0"], "", r"address '0'.*\(0 visible GPUs\)"),
    (["0"], "-1", r"address '0'.*\(0 visible GPUs\)"),
    (["GPU-x"], "0,1", r"address 'GPU-x'"),
    (["0", "0"], "4,5", "same GPU twice"),
])
def test_addresses_that_cannot_be_mapped_are_a_cluster_error(addresses, visible, message):
    with pytest.raises(ClusterError, match=message):
        devices.physical_gpus(addresses, visible)


def test_parse_visible():
    assert devices.parse_visible(None) is None
    assert devices.parse_visible("") == [] and devices.parse_visible("-1") == []
    assert devices.parse_visible("0,,2") == ["0", "2"]


def test_visible_gpus_outside_spark_reads_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert devices.visible_gpus() == ["3", "1"] and devices.get_num_gpus() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert devices.get_num_gpus() == 0


@pytest.mark.parametrize("gpus, amount", [(0, None), (0, "1"), (1, "1"), (2, "2.0")])
def test_matching_gpu_amounts_pass(gpus, amount):
    devices.check_gpu_amount(gpus, amount)


@pytest.mark.parametrize("gpus, amount, message", [
    (1, None, "Spark does not schedule GPUs: set spark.task.resource.gpu.amount=1"),
    (2, "1", r"gpus_per_worker=2 but spark.task.resource.gpu.amount=1: .*set spark.task.resource.gpu.amount=2"
             r".*or pass gpus_per_worker=1"),
    (1, "0.5", r"amount=0\.5.*a fraction shares one GPU"),
    (1, "two", "not a number; set it to 1"),
])
def test_mismatched_gpu_amounts_say_which_conf_to_set(gpus, amount, message):
    with pytest.raises(ClusterError, match=message):
        devices.check_gpu_amount(gpus, amount)


class FakeCupy:
    """Just what pin_gpu touches: the device count CUDA reports and which device was made current."""

    def __init__(self, count: int) -> None:
        self.used: list[int] = []
        self.cuda = SimpleNamespace(runtime=SimpleNamespace(getDeviceCount=lambda: count),
                                    Device=lambda i: SimpleNamespace(use=lambda: self.used.append(i)))


def rank_info(gpus: list[str]) -> rank.RankInfo:
    known = {"rank": 0, "world_size": 1, "local_rank": 0, "addresses": [], "hosts": [], "gpus": gpus}
    return rank.RankInfo(**{f.name: known.get(f.name) for f in fields(rank.RankInfo)})


@pytest.mark.parametrize("count, gpus, used", [
    (1, ["5"], [0]),  # CUDA started with the rank's CUDA_VISIBLE_DEVICES=5: it is device 0
    (2, ["5", "7"], [0]),
    (4, ["2"], [2]),  # CUDA started earlier in a reused worker and sees every GPU: select by id
])
def test_pin_gpu_selects_the_rank_device(monkeypatch, count, gpus, used):
    fake = FakeCupy(count)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    rank.pin_gpu(rank_info(gpus))
    assert fake.used == used


def test_pin_gpu_refuses_a_gpu_the_worker_cannot_reach(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", FakeCupy(2))
    with pytest.raises(ClusterError, match="owns GPU 5, but CUDA was already started.*spark.python.worker.reuse=false"):
        rank.pin_gpu(rank_info(["5"]))


def test_pin_gpu_without_cupy_or_gpus_does_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    rank.pin_gpu(rank_info(["0"]))
    rank.pin_gpu(rank_info([]))
