"""This rank's shard of a prepared dataset for PyTorch: an IterableDataset and a DataLoader over it.

The dataset is named as :func:`hopsml.data.readers.reader` takes it: a prepared dataset's name, or a feature
view's written training dataset, ``data_loader("fv:fraud:1/td2", split="train")``.

Each item is already a batch (the rank reader cuts them, see :mod:`hopsml.data.readers`): a dict of
tensors that share memory with the numpy arrays the reader produced. The reader reads ahead in a
thread and decodes a whole row group at a time, so the DataLoader needs no worker processes; it is
built with ``num_workers=0`` and ``batch_size=None`` (no re-batching). Pass ``equal_steps=True``
when every step ends in an all-reduce (DDP or hopsml.torch), so no rank runs out of batches first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from hopsml.torch._torch import require

try:
    from torch.utils.data import IterableDataset as _IterableDataset
except ImportError:  # without PyTorch the class still imports; using it raises require()'s message
    _IterableDataset = object  # type: ignore[assignment,misc]


def _tensor(torch: Any, values: np.ndarray, device: object) -> Any:
    if values.dtype == object:  # strings stay numpy
        return values
    tensor = torch.from_numpy(values if values.flags.writeable else values.copy())
    return tensor if device is None else tensor.to(device, non_blocking=True)


class ShardDataset(_IterableDataset):
    """This rank's batches of ``dataset`` as ``{field: tensor}``; ``reader_kwargs`` go to hopsml.data.reader."""

    def __init__(self, dataset: str, *, transform: Callable[[dict[str, Any]], Any] | None = None,
                 device: object = None, **reader_kwargs: Any) -> None:
        require()
        from hopsml.data.readers import reader

        super().__init__()
        self.reader = reader(dataset, **reader_kwargs)  # takes the rank of the run it is created in
        self.transform = transform
        self.device = device

    def __iter__(self) -> Iterator[Any]:
        torch = require()
        for batch in self.reader:
            tensors = {name: _tensor(torch, values, self.device) for name, values in batch.items()}
            yield self.transform(tensors) if self.transform is not None else tensors

    @property
    def steps_per_epoch(self) -> int:
        """Batches per epoch on this rank (with equal_steps: on every rank)."""
        return len(self.reader)

    def __len__(self) -> int:
        """Batches over all epochs (what one pass of the DataLoader yields); epochs=None has no length."""
        if self.reader.epochs is None:
            raise TypeError("a reader with epochs=None repeats forever and has no length; use steps_per_epoch")
        return self.steps_per_epoch * self.reader.epochs


def data_loader(dataset: str, *, transform: Callable[[dict[str, Any]], Any] | None = None, device: object = None,
                pin_memory: bool = False, **reader_kwargs: object) -> Any:
    """A torch DataLoader over this rank's shard (see ShardDataset); e.g. batch_size=64, equal_steps=True."""
    torch = require()
    return torch.utils.data.DataLoader(ShardDataset(dataset, transform=transform, device=device, **reader_kwargs),
                                       batch_size=None, num_workers=0, pin_memory=pin_memory)
