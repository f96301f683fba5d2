"""PyTorch on experiment.allreduce ranks (2 ranks, CPU): DDP over gloo, hopsml.torch, and the data helpers."""

import json
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pyspark import cloudpickle  # noqa: E402

from hopsml import config, experiment  # noqa: E402
from hopsml.data import prepare_images, samples  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks use this module's helpers

STEPS = 4
GLOBAL_BATCH = 8


def _model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3), torch.nn.Tanh(), torch.nn.Flatten(), torch.nn.Linear(48, 4))


def _batches():
    rng = np.random.default_rng(11)
    x = torch.from_numpy(rng.normal(size=(STEPS, GLOBAL_BATCH, 1, 6, 6)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 4, (STEPS, GLOBAL_BATCH)))
    return x, y


def _single_process_params():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    x, y = _batches()
    for step in range(STEPS):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x[step]), y[step]).backward()
        optimizer.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def _check_ranks(logdir, initial):
    with open(os.path.join(logdir, "experiment.json")) as f:
        results = json.load(f)["results"]
    assert len(results) == 2 and results[0]["checksum"] == results[1]["checksum"]  # the same bits on both ranks
    params = np.array(json.loads(results[0]["params"]), dtype=np.float32)
    expected = _single_process_params()
    assert np.abs(expected - initial).max() > 1e-2  # training moved the parameters
    np.testing.assert_allclose(params, expected, rtol=1e-4, atol=1e-5)


def _initial_params():
    return torch.cat([p.detach().reshape(-1) for p in _model().parameters()]).numpy()


@pytest.mark.parametrize("start", ["torch", "hopsml"])
def test_ddp_over_gloo_equals_single_process_training(spark, root, start):
    def train():
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        import hopsml.torch as ht

        torch.set_num_threads(1)
        if start == "torch":
            dist.init_process_group("gloo")  # plain env:// from the variables the rank exports
        else:
            ht.init_process_group()
            ht.init_process_group()  # idempotent
        rank, size = dist.get_rank(), dist.get_world_size()
        model = _model()
        ddp = DistributedDataParallel(model)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.2)
        x, y = _batches()
        local = GLOBAL_BATCH // size
        for step in range(STEPS):
            optimizer.zero_grad()
            part = slice(rank * local, (rank + 1) * local)
            torch.nn.functional.cross_entropy(ddp(x[step, part]), y[step, part]).backward()
            optimizer.step()
        backend = dist.get_backend()
        ht.destroy_process_group()
        assert dist.is_initialized()  # left to the rank's end: ddp still holds the group
        params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        return {"params": json.dumps(params.tolist()), "checksum": ht.parameters_checksum(model),
                "backend": backend}

    logdir, result = experiment.allreduce(train, name=f"ddp-{start}", num_workers=2)
    assert result["backend"] == "gloo"
    _check_ranks(logdir, _initial_params())


def test_hopsml_gradient_allreduce_equals_single_process_training(spark, root):
    def train():
        import torch

        import hopsml.torch as ht
        from hopsml import collective

        torch.set_num_threads(1)
        rank, size = collective.rank(), collective.size()
        torch.manual_seed(rank)
        model = _model() if rank == 0 else torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3), torch.nn.Tanh(),
                                                                torch.nn.Flatten(), torch.nn.Linear(48, 4))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
        x, y = _batches()
        local = GLOBAL_BATCH // size
        with ht.distribute(model, optimizer):  # rank 0's start; gradients averaged before each step
            for step in range(STEPS):
                optimizer.zero_grad()
                part = slice(rank * local, (rank + 1) * local)
                torch.nn.functional.cross_entropy(model(x[step, part]), y[step, part]).backward()
                optimizer.step()
        params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        return {"params": json.dumps(params.tolist()), "checksum": ht.parameters_checksum(model)}

    logdir, _ = experiment.allreduce(train, name="hopsml-torch", num_workers=2)
    _check_ranks(logdir, _initial_params())


def test_data_loader_with_equal_steps_on_unequal_shards(spark, root, tmp_path):
    src = str(tmp_path / "digits")
    samples.write_digits(src, limit=60, size=16, bad_files=False)
    settings = config.load(environ={}, root=str(root), project="test", master="local[4]")
    prepare_images(src, "digits", resize=(12, 12), crop=(10, 10), shards=3, test_fraction=0, settings=settings,
                   spark=spark)

    def train():
        import numpy as np
        import torch

        import hopsml.torch as ht
        from hopsml import collective

        plain = ht.data_loader("digits", batch_size=4, shuffle=False)
        loader = ht.data_loader("digits", batch_size=4, epochs=2, equal_steps=True)
        batches = 0
        labels = []
        for batch in loader:
            assert isinstance(batch["image"], torch.Tensor) and batch["image"].dtype == torch.uint8
            assert batch["image"].shape[1:] == (10, 10, 3) and batch["label"].dtype == torch.int32
            collective.allreduce(np.ones(1))  # one collective per batch: unequal counts would hang here
            batches += 1
        for batch in plain:
            labels += batch["label"].tolist()
        everyone = collective.allgather({"plain": len(plain), "rows": plain.dataset.reader.num_rows,
                                         "equal": loader.dataset.steps_per_epoch, "total": len(loader),
                                         "batches": batches, "labels": labels})
        return {"ranks": json.dumps(everyone)}

    _, result = experiment.allreduce(train, name="loader", num_workers=2, timeout_s=60)
    ranks = json.loads(result["ranks"])
    assert ranks[0]["rows"] + ranks[1]["rows"] == 60
    assert ranks[0]["plain"] != ranks[1]["plain"]  # 3 shards over 2 ranks: unequal without equal_steps
    steps = min(r["plain"] for r in ranks)
    assert [r["equal"] for r in ranks] == [steps, steps]
    assert [r["batches"] for r in ranks] == [r["total"] for r in ranks] == [2 * steps] * 2
    assert sorted(ranks[0]["labels"] + ranks[1]["labels"]) == sorted(samples_labels(60))


def samples_labels(limit):
    from sklearn.datasets import load_digits

    return [int(v) for v in load_digits().target[:limit]]
