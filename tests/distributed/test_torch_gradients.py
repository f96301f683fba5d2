"""hopsml.torch's parameter broadcast and bucketed gradient all-reduce, in real rank processes (no Spark)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hopsml.errors import HopsmlError, NotInRunError  # noqa: E402

STEPS = 5
GLOBAL_BATCH = 16


def _model(seed: int):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 6 * 6, 5))


def _data():
    rng = np.random.default_rng(7)
    x = torch.from_numpy(rng.normal(size=(STEPS, GLOBAL_BATCH, 3, 8, 8)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 5, (STEPS, GLOBAL_BATCH)))
    return x, y


def _train(model, batches, step_fn):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sync = step_fn(model, optimizer)
    for x, y in batches:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    if sync is not None:
        sync.close()
    return model


def _params(model) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def _rank_train(rank: int, size: int, bucket_mb: float, first_bucket_mb: float | None = 1.0) -> dict:
    import hopsml.torch as ht

    torch.set_num_threads(1)
    x, y = _data()
    local = GLOBAL_BATCH // size
    batches = [(x[s, rank * local:(rank + 1) * local], y[s, rank * local:(rank + 1) * local]) for s in range(STEPS)]
    model = _model(seed=100 + rank)  # different on purpose: the broadcast makes them equal
    syncs = []

    def wrap(m, o):
        syncs.append(ht.distribute(m, o, bucket_mb=bucket_mb, first_bucket_mb=first_bucket_mb))
        return syncs[0]

    model = _train(model, batches, wrap)
    return {"params": _params(model), "checksum": ht.parameters_checksum(model), "buckets": len(syncs[0].buckets)}


# DDP's rule: a bucket closes once it reaches its cap; the default first cap (1 MiB) is at most half the model
@pytest.mark.parametrize("bucket_mb,first_bucket_mb,buckets", [(25.0, None, 1), (25.0, 1.0, 2), (1e-5, None, 4)],
                         ids=["one-bucket", "first-bucket-fc-then-conv", "one-tensor-each"])
def test_gradient_allreduce_equals_single_process_on_the_combined_batch(ranks, bucket_mb, first_bucket_mb, buckets):
    results = ranks(_rank_train, 2, bucket_mb, first_bucket_mb, join_s=120)
    assert all(r.ok for r in results.values()), {r: (o.error_type, o.error) for r, o in results.items()}
    assert results[0].value["checksum"] == results[1].value["checksum"]  # identical bits on every rank
    assert results[0].value["buckets"] == buckets
    # Each rank's loss is the mean over its half; the mean of the two gradients is the gradient of the
    # mean over the whole batch, so the ranks follow single-process training on the combined batch.
    x, y = _data()
    reference = _train(_model(seed=100), [(x[s], y[s]) for s in range(STEPS)], lambda m, o: None)
    moved = np.abs(_params(reference) - _params(_model(seed=100))).max()
    assert moved > 1e-2  # training changed the parameters, so the comparison below means something
    np.testing.assert_allclose(results[0].value["params"], _params(reference), rtol=1e-4, atol=1e-5)


def _rank_edge_cases(rank: int, size: int) -> dict:
    import hopsml.torch as ht

    torch.set_num_threads(1)
    out = {}
    # A parameter unused by one rank's forward pass still takes part (as zeros), so nobody waits forever.
    model = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 1), "b": torch.nn.Linear(3, 1)})
    sync = ht.distribute(model, op="sum")
    x = torch.ones(2, 3)
    loss = model["a"](x).sum() + (model["b"](x).sum() if rank == 1 else 0)
    loss.backward()
    sync.synchronize()
    out["b_grad"] = model["b"].weight.grad.numpy().copy()  # rank 1's gradient, summed with rank 0's zeros
    # Two backward passes without a synchronize in between would reduce the first gradient only.
    model.zero_grad()
    model["a"](x).sum().backward()
    try:
        model["a"](x).sum().backward()
    except HopsmlError as exc:
        out["double"] = str(exc)
    sync.synchronize()
    sync.close()
    # bfloat16 and integer tensors are broadcast bit for bit.
    state = {"w": torch.full((3,), float(rank) + 0.5, dtype=torch.bfloat16), "n": torch.tensor([rank * 7])}
    ht.broadcast_parameters(state, root=1)
    out["state"] = (state["w"].float().tolist(), state["n"].tolist())
    return out


def test_unused_parameters_double_backward_and_broadcast_dtypes(ranks):
    results = ranks(_rank_edge_cases, 2, join_s=120)
    assert all(r.ok for r in results.values()), {r: (o.error_type, o.error) for r, o in results.items()}
    for outcome in results.values():
        np.testing.assert_array_equal(outcome.value["b_grad"], np.full((1, 3), 2.0, np.float32))
        assert "second gradient before synchronize" in outcome.value["double"]
        assert outcome.value["state"] == ([1.5, 1.5, 1.5], [7])


def test_outside_a_run_the_errors_say_where_it_works(monkeypatch):
    import hopsml.torch as ht

    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(NotInRunError, match="experiment.allreduce"):
        ht.init_process_group()
    with pytest.raises(NotInRunError, match="experiment.allreduce"):
        ht.distribute(torch.nn.Linear(2, 2))
    ht.destroy_process_group()  # nothing started: a no-op


def test_imports_without_pyspark_and_says_how_to_get_torch():
    import subprocess
    import sys

    code = ("import sys; sys.modules['pyspark'] = None\n"
            "import hopsml.torch, hopsml.examples.digits_cnn\n"
            "assert 'pyspark.sql' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    code = ("import sys; sys.modules['torch'] = None\n"
            "import hopsml, hopsml.torch\n"
            "from hopsml.errors import HopsmlError\n"
            "try:\n    hopsml.torch.init_process_group()\nexcept HopsmlError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert "pip install torch" in out


def _rank_overlap(rank: int, size: int) -> dict:
    x, y = _data()
    local = GLOBAL_BATCH // size
    batches = [(x[s, rank * local:(rank + 1) * local], y[s, rank * local:(rank + 1) * local]) for s in range(STEPS)]
    import hopsml.torch as ht

    torch.set_num_threads(1)
    out = {}
    for name, kwargs in {"overlap": {"bucket_mb": 1e-5}, "sync": {"first_bucket_mb": None}}.items():
        syncs = []

        def wrap(m, o, kwargs=kwargs, syncs=syncs):
            syncs.append(ht.distribute(m, o, **kwargs))
            return syncs[0]

        out[name] = _params(_train(_model(seed=100 + rank), batches, wrap))
        out[name + "_buckets"] = len(syncs[0].buckets)
    return out


def test_gradients_with_overlap_are_the_bits_without(ranks):
    results = ranks(_rank_overlap, 2, join_s=120)
    for outcome in results.values():
        assert outcome.ok, (outcome.error_type, outcome.error)
        assert outcome.value["overlap_buckets"] == 4 and outcome.value["sync_buckets"] == 1
        assert outcome.value["overlap"].tobytes() == outcome.value["sync"].tobytes()
