"""A small model on scikit-learn's bundled digits (8x8 images, 10 classes), written once for numpy
and cupy: the array module follows where the arrays live. Used by the quickstart and the notebooks."""

from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

MODEL_FILE = "model.npz"


def load(test_fraction: float = 0.25, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): pixels scaled to [0, 1], a fixed shuffled split."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(len(x) * (1 - test_fraction))
    train, test = order[:cut], order[cut:]
    return x[train], y[train], x[test], y[test]


def array_module(array: object) -> Any:
    """numpy, or cupy for cupy arrays (without importing cupy when it is not in use)."""
    if type(array).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


@dataclass
class SoftmaxRegression:
    """Multinomial logistic regression: small, exact gradients, enough to show data parallelism."""

    weights: Any
    bias: Any

    @classmethod
    def create(cls, n_features: int, n_classes: int, xp: Any = np, seed: int = 0) -> SoftmaxRegression:
        rng = np.random.default_rng(seed)
        weights = rng.normal(0, 0.01, (n_features, n_classes)).astype(np.float32)
        return cls(xp.asarray(weights), xp.zeros(n_classes, dtype=xp.float32))

    def probabilities(self, x: object) -> Any:
        xp = array_module(x)
        logits = x @ self.weights + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        exp = xp.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)

    def loss_and_gradients(self, x: Any, y: Any) -> tuple[float, list[Any]]:
        """Mean cross-entropy over the batch and its gradients [dW, db]."""
        xp = array_module(x)
        probs = self.probabilities(x)
        n = x.shape[0]
        loss = float(-xp.log(probs[xp.arange(n), y] + 1e-12).mean())
        probs[xp.arange(n), y] -= 1.0
        probs /= n
        return loss, [x.T @ probs, probs.sum(axis=0)]

    def apply(self, gradients: list[Any], lr: float) -> None:
        self.weights -= lr * gradients[0]
        self.bias -= lr * gradients[1]

    def accuracy(self, x: object, y: object) -> float:
        return float((self.probabilities(x).argmax(axis=1) == y).mean())

    @classmethod
    def load(cls, path: str) -> SoftmaxRegression:
        """A model written by `save` (numpy arrays)."""
        with np.load(path) as saved:
            return cls(saved["weights"], saved["bias"])

    def save(self, path: str) -> str:
        xp = array_module(self.weights)
        as_numpy = (lambda a: xp.asnumpy(a)) if xp is not np else np.asarray
        np.savez(path, weights=as_numpy(self.weights), bias=as_numpy(self.bias))
        return path


def train(lr: float = 0.5, epochs: int = 15, batch_size: int = 64, seed: int = 0) -> dict[str, Any]:
    """Single-process training for experiment.launch: logs loss per epoch, returns accuracy and the model file."""
    from hopsml import tensorboard

    x_train, y_train, x_test, y_test = load(seed=seed)
    model = SoftmaxRegression.create(x_train.shape[1], 10, seed=seed)
    rng = np.random.default_rng(seed)
    for epoch in range(epochs):
        order = rng.permutation(len(x_train))
        losses = []
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            loss, grads = model.loss_and_gradients(x_train[batch], y_train[batch])
            model.apply(grads, lr)
            losses.append(loss)
        accuracy = model.accuracy(x_test, y_test)
        tensorboard.log({"loss": float(np.mean(losses)), "accuracy": accuracy}, step=epoch)
        print(f"epoch {epoch + 1}/{epochs}: loss {np.mean(losses):.4f} test accuracy {accuracy:.4f}")
    path = model.save(os.path.join(tempfile.mkdtemp(prefix="digits-"), "model.npz"))
    return {"accuracy": model.accuracy(x_test, y_test), "loss": float(np.mean(losses)), "model_file": path}


def _rank_array_module() -> Any:
    """cupy when this rank has a GPU and cupy is installed, else numpy."""
    from hopsml import devices

    if devices.get_num_gpus() > 0:
        try:
            import cupy

            return cupy
        except ImportError:
            pass
    return np


def train_data_parallel(lr: float = 0.5, epochs: int = 15, batch_size: int = 64, seed: int = 0) -> dict[str, Any]:
    """One rank of data-parallel training for experiment.allreduce.

    Each rank trains on its own shard (every size-th row), computes gradients on its part of the
    global batch, and the ranks average them with one fused all-reduce per step, so every rank
    applies the same update and the model equals single-process training on the global batch.
    """
    from hopsml import collective, tensorboard

    rank, size = collective.rank(), collective.size()
    xp = _rank_array_module()
    x_train, y_train, x_test, y_test = load(seed=seed)
    per_rank = len(x_train) // size  # equal shards: every rank takes the same number of steps
    x_shard = xp.asarray(x_train[rank::size][:per_rank])
    y_shard = xp.asarray(y_train[rank::size][:per_rank])
    x_test, y_test = xp.asarray(x_test), xp.asarray(y_test)
    local_batch = max(1, batch_size // size)
    model = SoftmaxRegression.create(x_train.shape[1], 10, xp=xp, seed=seed)
    collective.broadcast(model.weights, root=0)  # identical start, whatever each rank's seed did
    collective.broadcast(model.bias, root=0)
    rng = np.random.default_rng(seed + rank)
    print(f"rank {rank}/{size}: {per_rank} rows on {xp.__name__}, local batch {local_batch}")
    for epoch in range(epochs):
        order = xp.asarray(rng.permutation(per_rank))
        losses = []
        for start in range(0, per_rank - local_batch + 1, local_batch):
            batch = order[start:start + local_batch]
            loss, grads = model.loss_and_gradients(x_shard[batch], y_shard[batch])
            collective.allreduce_many(grads, op="mean")
            model.apply(grads, lr)
            losses.append(loss)
        mean_loss = float(collective.allreduce(np.array([np.mean(losses)]), op="mean")[0])
        accuracy = model.accuracy(x_test, y_test)
        tensorboard.log({"loss": mean_loss, "accuracy": accuracy}, step=epoch)
        print(f"epoch {epoch + 1}/{epochs}: loss {mean_loss:.4f} test accuracy {accuracy:.4f}")
    result: dict[str, Any] = {"accuracy": model.accuracy(x_test, y_test), "loss": mean_loss,
                              "checksum": float(model.weights.sum()) + float(model.bias.sum())}
    if rank == 0:
        result["model_file"] = model.save(os.path.join(tempfile.mkdtemp(prefix="digits-"), "model.npz"))
    return result


def train_with_dropout(lr: float = 0.5, dropout: float = 0.0, epochs: int = 10, batch_size: int = 64,
                       seed: int = 0) -> dict[str, Any]:
    """A trial for a search: inputs dropped at rate `dropout` while training; reports accuracy per epoch
    (so median early stopping can act) and returns the final test accuracy."""
    from hopsml import tensorboard

    x_train, y_train, x_test, y_test = load(seed=seed)
    model = SoftmaxRegression.create(x_train.shape[1], 10, seed=seed)
    rng = np.random.default_rng(seed)
    for epoch in range(epochs):
        order = rng.permutation(len(x_train))
        for start in range(0, len(order), batch_size):
            batch = x_train[order[start:start + batch_size]]
            if dropout:
                batch = batch * (rng.random(batch.shape) >= dropout) / (1 - dropout)
            _, grads = model.loss_and_gradients(batch.astype(np.float32), y_train[order[start:start + batch_size]])
            model.apply(grads, lr)
        tensorboard.log({"accuracy": model.accuracy(x_test, y_test)}, step=epoch)
    return {"accuracy": model.accuracy(x_test, y_test)}


def image_features(batch: dict[str, Any]) -> np.ndarray:
    """A batch of a prepared image dataset as the model's input: flattened pixels in [0, 1]."""
    images = batch["image"]
    return images.reshape(len(images), -1).astype(np.float32) / 255.0


@functools.lru_cache(maxsize=4)
def _load_model(path: str) -> SoftmaxRegression:
    return SoftmaxRegression.load(path)


def predict(model_path: str, batch: dict[str, Any]) -> np.ndarray:
    """Batch inference for `hopsml.model.predict`: the digit in each image of the batch.

    `model_path` is the folder of a model version exported by `train_on_dataset` (it holds model.npz);
    the model is loaded once per process, not per batch.
    """
    model = _load_model(os.path.join(model_path, MODEL_FILE))
    return model.probabilities(image_features(batch)).argmax(axis=1)


def train_on_dataset(dataset: str = "digits", lr: float = 0.05, epochs: int = 5, batch_size: int = 32,
                     seed: int = 0, export_as: str | None = None) -> dict[str, Any]:
    """One rank of data-parallel training on a dataset prepared by `hopsml prep images`.

    Each rank reads its own shard of the train split with `hopsml.data.reader`; shards can differ by a
    few rows, so the ranks agree on the smallest number of steps (every rank must make the same
    collective calls). The test split is read whole by every rank to measure accuracy. Rank 0 returns
    the saved model file, and with `export_as` registers it as a new version of that model (with its
    accuracy and loss, linked to this run and the dataset), ready for `hopsml.model.predict`.
    """
    from hopsml import collective, tensorboard
    from hopsml.data import reader

    train = reader(dataset, batch_size=batch_size, seed=seed, epochs=None, drop_last=True)
    steps = int(collective.allreduce(np.array([len(train)], dtype=np.int64), op="min")[0])
    shape = train.manifest.fields["image"]["shape"]
    model = SoftmaxRegression.create(int(np.prod(shape)), 10, seed=seed)
    batches = iter(train)
    print(f"rank {collective.rank()}/{collective.size()}: {train.num_rows} rows, {steps} steps per epoch")
    for epoch in range(epochs):
        losses = []
        for _ in range(steps):
            batch = next(batches)
            loss, grads = model.loss_and_gradients(image_features(batch), batch["label"])
            collective.allreduce_many(grads, op="mean")
            model.apply(grads, lr)
            losses.append(loss)
        mean_loss = float(collective.allreduce(np.array([np.mean(losses)]), op="mean")[0])
        tensorboard.log({"loss": mean_loss}, step=epoch)
        print(f"epoch {epoch + 1}/{epochs}: loss {mean_loss:.4f}")
    correct = total = 0
    for batch in reader(dataset, rank=0, world_size=1, split="test", shuffle=False):
        correct += int((model.probabilities(image_features(batch)).argmax(axis=1) == batch["label"]).sum())
        total += len(batch["label"])
    result: dict[str, Any] = {"accuracy": correct / total, "loss": mean_loss, "rows": int(train.num_rows),
                              "checksum": float(model.weights.sum()) + float(model.bias.sum())}
    if collective.rank() == 0:
        result["model_file"] = model.save(os.path.join(tempfile.mkdtemp(prefix="digits-"), MODEL_FILE))
        if export_as:
            from hopsml import model as registry

            exported = registry.export(result["model_file"], export_as,
                                       metrics={"accuracy": result["accuracy"], "loss": mean_loss},
                                       description=f"softmax regression on {dataset!r}, lr {lr}, {epochs} epochs")
            result["model_version"] = exported.version
            print(f"exported model {export_as!r} version {exported.version}")
    return result
