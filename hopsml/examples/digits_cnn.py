"""A small CNN on the prepared digits images (28x28 RGB, 10 classes) trained data-parallel with PyTorch.

Used by notebooks/04_pytorch_cnn.ipynb, spark_jobs/train_torch.py and bench/torch_ddp.py. One rank of
``experiment.allreduce`` runs `train`; ``mode`` picks how the gradients are averaged:

* ``"hopsml"``: ``hopsml.torch.distribute`` (hopsml.collective, bucketed, overlapped with backward);
* ``"ddp"``: ``torch.nn.parallel.DistributedDataParallel`` on ``hopsml.torch.init_process_group()``.

PyTorch is imported inside the functions, so this module imports without it.
"""

from __future__ import annotations

import time
from typing import Any

MODES = ("hopsml", "ddp")


def build_model(seed: int = 0, size: int = 28, channels: int = 3, classes: int = 10) -> Any:
    """Two 3x3 convolutions with pooling and a linear classifier (about 9k parameters for 28x28)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(channels, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(16 * (size // 4) ** 2, classes))


def inputs(batch: dict[str, Any]) -> tuple[Any, Any]:
    """(images as float NCHW in [0, 1], labels as int64) from a reader batch of tensors."""
    images = batch["image"]
    return images.permute(0, 3, 1, 2).float().div_(255.0), batch["label"].long()


def _wrap(model: object, optimizer: object, mode: str) -> tuple[Any, Any]:
    """(the module to call, what to close at the end) for the chosen gradient averaging."""
    import hopsml.torch as ht

    if mode == "hopsml":
        return model, ht.distribute(model, optimizer)
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ht.init_process_group()
        return DistributedDataParallel(model), None
    raise ValueError(f"mode={mode!r}: use one of {', '.join(MODES)}")


def accuracy(model: Any, dataset: str, split: str = "test") -> float:
    """Share of correct predictions on a whole split (read in full on this rank)."""
    import torch

    import hopsml.torch as ht

    correct = total = 0
    with torch.no_grad():
        for batch in ht.data_loader(dataset, rank=0, world_size=1, split=split, batch_size=256, shuffle=False):
            x, y = inputs(batch)
            correct += int((model(x).argmax(1) == y).sum())
            total += len(y)
    return correct / max(total, 1)


def train(dataset: str = "digits", epochs: int = 3, batch_size: int = 32, lr: float = 0.05,
          mode: str = "hopsml", seed: int = 0, threads: int = 1) -> dict[str, Any]:
    """One rank of data-parallel training on this rank's shard; returns accuracy, loss and a checksum."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    import hopsml.torch as ht
    from hopsml import collective, tensorboard

    torch.set_num_threads(threads)  # one rank per task: do not let every rank take all the cores
    model = build_model(seed)
    # equal_steps: every rank the same number of steps, so no rank waits in an all-reduce for one that ran out
    loader = ht.data_loader(dataset, batch_size=batch_size, seed=seed, epochs=epochs, equal_steps=True)
    per_epoch = loader.dataset.steps_per_epoch
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    net, sync = _wrap(model, optimizer, mode)
    steps, seconds, losses, epoch_losses = 0, 0.0, [], []
    try:
        for batch in loader:  # the reader reshuffles every epoch
            start = time.perf_counter()
            x, y = inputs(batch)
            optimizer.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()  # with mode='hopsml' this first waits for the averaged gradients
            seconds += time.perf_counter() - start
            steps += 1
            epoch_losses.append(loss.item())  # float(loss) warns: the tensor requires grad
            if steps % per_epoch == 0:
                mean = float(collective.allreduce(np.array([np.mean(epoch_losses)]), op="mean")[0])
                losses.append(mean)
                epoch_losses = []
                tensorboard.log({"loss": mean}, step=len(losses) - 1)
                print(f"epoch {len(losses)}/{epochs}: loss {mean:.4f} ({per_epoch} steps on every rank)")
    finally:
        if sync is not None:
            sync.close()
        if mode == "ddp":
            ht.destroy_process_group()
    return {"accuracy": accuracy(model, dataset), "loss": losses[-1], "steps": steps,
            "step_ms": 1000.0 * seconds / max(steps, 1), "checksum": ht.parameters_checksum(model)}
