"""PyTorch on the ranks of `experiment.allreduce`.

Two ways to train data-parallel with PyTorch inside a rank, on CPU (gloo) or GPU (NCCL):

* PyTorch's own DistributedDataParallel: ``hopsml.torch.init_process_group()`` starts
  torch.distributed from the variables the launcher exports (RANK, WORLD_SIZE, MASTER_ADDR,
  MASTER_PORT), so ``DistributedDataParallel(model)`` works unchanged;
* hopsml's collectives: ``sync = hopsml.torch.distribute(model, optimizer)`` broadcasts rank 0's
  parameters and averages the gradients through :mod:`hopsml.collective`, bucketed and overlapped
  with the backward pass; the optimizer waits for the last bucket before it steps.

``hopsml.torch.data_loader("digits", ...)`` gives this rank's shard of a prepared dataset as
tensors. PyTorch is imported when a function here is called, never by ``import hopsml``.
"""

from hopsml.torch.data import ShardDataset, data_loader
from hopsml.torch.gradients import GradientAllReduce, broadcast_parameters, distribute, parameters_checksum
from hopsml.torch.process_group import destroy_process_group, init_process_group

__all__ = ["GradientAllReduce", "ShardDataset", "broadcast_parameters", "data_loader", "destroy_process_group",
           "distribute", "init_process_group", "parameters_checksum"]
