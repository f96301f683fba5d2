"""Data-parallel PyTorch through hopsml.collective: parameter broadcast and a bucketed gradient all-reduce.

``sync = distribute(model, optimizer)`` (a `GradientAllReduce`) does what DistributedDataParallel does,
over hopsml's authenticated collectives instead of a second rendezvous:

* rank 0's parameters and buffers are broadcast once, so every rank starts from the same model;
* the parameters are planned into buckets in reverse order of registration (roughly the order backward
  produces their gradients), identically on every rank, as DDP's reducer does: the first bucket small
  (1 MiB, or about half of a smaller model) so that communication starts early, the others about 25 MiB;
* a post-accumulate-grad hook on each parameter counts the bucket's gradients; once the buckets up to a
  full one are complete, their all-reduces start in bucket order (`Communicator.allreduce_async`: the
  communicator's background thread runs them in submission order, the same sequence on every rank) while
  backward goes on computing the earlier layers;
* ``synchronize()`` reduces the last bucket itself (the backward pass is over: nothing left to overlap, and
  no thread switch on the step's critical path), waits for the others and unpacks them; with an optimizer
  given it runs as the optimizer's step pre-hook, so ``optimizer.step()`` always sees averaged gradients.
  The collectives and their order are those of reducing bucket by bucket synchronously, so the results are
  the same bits.

CPU tensors go to the TCP ring as zero-copy numpy views (``tensor.numpy()``); CUDA tensors as cupy
arrays over DLPack, reduced with NCCL. A bucket of one contiguous gradient is reduced in place; others
are packed into one flat buffer per bucket. One backward per step: between ``backward()`` and
``synchronize()`` other collectives of the training code run after the buckets started so far (a synchronous
collective waits for the pending ones), which is the same order on every rank only if every rank makes them at
the same point; better to call them after ``optimizer.step()``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from hopsml import collective
from hopsml.errors import CollectiveError, HopsmlError, SettingsError
from hopsml.timeline import span
from hopsml.timeline.recorder import GRADIENTS
from hopsml.torch._torch import require

log = logging.getLogger(__name__)

DEFAULT_BUCKET_MB = 25.0
DEFAULT_FIRST_BUCKET_MB = 1.0  # DDP's first bucket: small, so that communication starts early in backward


def _wire_dtype(torch: Any, dtype: Any) -> Any:
    """The dtype a tensor travels as: numpy has no bfloat16, so those go as float32."""
    return torch.float32 if dtype == torch.bfloat16 else dtype


def _as_array(tensor: Any) -> Any:
    """A view of the same memory that hopsml.collective takes: numpy for CPU, cupy (DLPack) for CUDA."""
    if tensor.is_cuda:
        import cupy

        return cupy.from_dlpack(tensor)
    return tensor.numpy()


def _run_collective(torch: Any, tensor: Any, call: Any) -> None:
    """Run `call(array)` on the array view of `tensor`, ordering it after and before torch's GPU work."""
    if tensor.is_cuda:
        torch.cuda.current_stream(tensor.device).synchronize()
        call(_as_array(tensor))
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    else:
        call(_as_array(tensor))


def _flatten(torch: Any, tensors: list[Any], out: Any | None = None) -> Any:
    parts = [t.detach().reshape(-1) for t in tensors]
    if out is None:
        dtype = _wire_dtype(torch, tensors[0].dtype)
        return torch.cat([p.to(dtype) for p in parts]) if len(parts) > 1 else parts[0].to(dtype).clone()
    if all(p.dtype == out.dtype for p in parts):
        return torch.cat(parts, out=out)
    offset = 0
    for part in parts:
        out[offset:offset + part.numel()].copy_(part)
        offset += part.numel()
    return out


def _unflatten_into(flat: Any, tensors: list[Any]) -> None:
    offset = 0
    for tensor in tensors:
        count = tensor.numel()
        tensor.copy_(flat[offset:offset + count].view_as(tensor))
        offset += count


def _tensors_of(model: Any) -> list[Any]:
    """Parameters then buffers of a module, or the tensors of a state dict / iterable."""
    if hasattr(model, "parameters") and hasattr(model, "buffers"):
        return [p.detach() for p in model.parameters()] + [b.detach() for b in model.buffers()]
    values = model.values() if isinstance(model, dict) else model
    return [t.detach() for t in values]


def broadcast_parameters(model: object, root: int = 0, comm: collective.Communicator | None = None) -> None:
    """Overwrite every rank's parameters and buffers with root's (a module, state dict or tensors), in place."""
    torch = require()
    comm = comm or collective.current()
    groups: dict[tuple[str, Any], list[Any]] = {}
    for tensor in _tensors_of(model):
        if tensor.numel():
            groups.setdefault((str(tensor.device), tensor.dtype), []).append(tensor)
    with torch.no_grad():
        for tensors in groups.values():  # one collective per device and dtype, the same order on every rank
            if tensors[0].dtype == torch.bfloat16:
                flat = _flatten(torch, [t.view(torch.int16) for t in tensors])
                _run_collective(torch, flat, lambda a: comm.broadcast(a, root))
                _unflatten_into(flat, [t.view(torch.int16) for t in tensors])
                continue
            flat = _flatten(torch, tensors)
            _run_collective(torch, flat, lambda a: comm.broadcast(a, root))
            _unflatten_into(flat, tensors)


@dataclass
class _Bucket:
    params: list[Any]
    numel: int
    pending: int = 0
    buffer: Any = None
    flat: Any = None      # what travels: the single gradient itself, or `buffer` packed from the gradients
    handle: Any = None    # the asynchronous all-reduce of `flat`, while it is in flight


def _plan(params: list[Any], bucket_bytes: int, first_bytes: int | None) -> list[_Bucket]:
    """Buckets of consecutive parameters (reverse registration order) of one device and dtype.

    As DDP's reducer assigns them: a bucket closes once it holds at least its cap. The first bucket in reduce
    order has the small cap `first_bytes` (DDP: 1 MiB), so the first all-reduce starts early in backward; a model
    smaller than two such buckets is split near its middle, so that its first gradients travel while backward
    computes the rest. `first_bytes` None: every bucket has the cap `bucket_bytes`."""
    total = sum(p.numel() * p.element_size() for p in params)
    cap = bucket_bytes if first_bytes is None else max(1, min(first_bytes, bucket_bytes, total // 2))
    buckets: list[_Bucket] = []
    current: list[Any] = []
    size = 0

    def close() -> None:
        nonlocal current, size, cap
        buckets.append(_Bucket(current, sum(p.numel() for p in current)))
        current, size, cap = [], 0, bucket_bytes

    for param in reversed(params):
        if current and (param.dtype != current[0].dtype or param.device != current[0].device):
            close()
        current.append(param)
        size += param.numel() * param.element_size()
        if size >= cap:
            close()
    if current:
        close()
    return buckets


class GradientAllReduce:
    """Averages (or sums) a model's gradients over the ranks during backward; see the module text."""

    def __init__(self, model: Any, optimizer: Any = None, *, op: str = "mean", bucket_mb: float = DEFAULT_BUCKET_MB,
                 first_bucket_mb: float | None = DEFAULT_FIRST_BUCKET_MB, broadcast: bool = True, root: int = 0,
                 comm: collective.Communicator | None = None) -> None:
        torch = require()
        if op not in ("mean", "sum"):
            raise SettingsError(f"op={op!r}: gradients are combined with 'mean' (the usual) or 'sum'")
        if not bucket_mb > 0:
            raise SettingsError(f"bucket_mb={bucket_mb!r} must be a positive number of MiB (25 is a good start)")
        if first_bucket_mb is not None and not first_bucket_mb > 0:
            raise SettingsError(f"first_bucket_mb={first_bucket_mb!r} must be a positive number of MiB (1 is DDP's), "
                                "or None for no smaller first bucket")
        self._torch = torch
        self._comm = comm or collective.current()  # the hooks may run where the caller's context is not set
        self.op = op
        if broadcast:
            broadcast_parameters(model, root, self._comm)
        params = [p for p in model.parameters() if p.requires_grad]
        if any(p.is_sparse for p in params):
            raise SettingsError("sparse parameters are not supported by hopsml.torch; use dense ones or "
                                "torch.nn.parallel.DistributedDataParallel")
        self.buckets = _plan(params, int(bucket_mb * (1 << 20)),
                             None if first_bucket_mb is None else int(first_bucket_mb * (1 << 20)))
        self._lock = threading.Lock()  # guards the per-step state: hooks may run on autograd's device threads
        self._next = 0                 # the next bucket to start, in order (the same sequence on every rank)
        self._fired: set[int] = set()
        self._closed = False
        self._reset_counts()
        self._handles = [param.register_post_accumulate_grad_hook(self._hook(index))
                         for index, bucket in enumerate(self.buckets) for param in bucket.params]
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(lambda *_: self.synchronize()))
        log.debug("gradient all-reduce over %d ranks: %d parameters in %d buckets", self._comm.size,
                  len(params), len(self.buckets))

    # --- the backward side -------------------------------------------------------------------
    def _reset_counts(self) -> None:
        self._fired.clear()
        self._next = 0
        for bucket in self.buckets:
            bucket.pending = len(bucket.params)
            bucket.handle = bucket.flat = None

    def _hook(self, index: int) -> Any:
        def on_gradient(param: object) -> None:
            self._gradient_ready(index, param)
        return on_gradient

    def _gradient_ready(self, index: int, param: object) -> None:
        bucket = self.buckets[index]
        with self._lock:
            if id(param) in self._fired:
                raise HopsmlError("a parameter got a second gradient before synchronize(): hopsml.torch reduces "
                                  "once per backward; sum the losses of micro-batches before one backward, or "
                                  "call optimizer.step() / synchronize() between backward calls")
            self._fired.add(id(param))
            bucket.pending -= 1
            if bucket.pending == 0:
                self._start_ready(len(self.buckets) - 1)

    # --- reducing, in bucket order (the same collective sequence on every rank) ---------------
    def _start_ready(self, stop: int) -> None:
        """Start the all-reduces of the full buckets from the next one on, in order, up to bucket `stop`
        (exclusive): the last bucket is reduced by synchronize() itself, without a thread switch. Holds _lock."""
        while self._next < stop and self.buckets[self._next].pending == 0:
            bucket = self.buckets[self._next]
            with span("gradient bucket", GRADIENTS, params=len(bucket.params), numel=bucket.numel):
                bucket.flat = self._pack(bucket)
                bucket.handle = self._comm.allreduce_async(_as_array(bucket.flat), self.op)
            self._next += 1

    def _pack(self, bucket: _Bucket) -> Any:
        """What travels for `bucket`: its one contiguous gradient in place (no copy), else its packed buffer."""
        torch = self._torch
        grads = [p.grad for p in bucket.params]
        single = grads[0]
        if len(grads) == 1 and single.is_contiguous() and _wire_dtype(torch, single.dtype) == single.dtype:
            return single
        if bucket.buffer is None:
            bucket.buffer = torch.empty(bucket.numel, dtype=_wire_dtype(torch, single.dtype), device=single.device)
        return _flatten(torch, grads, bucket.buffer)

    def _finish(self, bucket: _Bucket) -> None:
        """Wait for the bucket's all-reduce (started, or run now in order) and unpack it into the gradients."""
        if bucket.handle is not None:
            bucket.handle.wait()
        else:
            bucket.flat = self._pack(bucket)
            with span("gradient bucket", GRADIENTS, params=len(bucket.params), numel=bucket.numel):
                _run_collective(self._torch, bucket.flat, lambda array: self._comm.allreduce(array, self.op))
        if bucket.flat is not bucket.params[0].grad:
            _unflatten_into(bucket.flat, [p.grad for p in bucket.params])

    # --- the training side -------------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait until every gradient of this step is reduced (a no-op when no backward ran since the last)."""
        if self._closed:
            raise HopsmlError("this GradientAllReduce was closed; create a new one with hopsml.torch.distribute")
        with self._lock:
            if not self._fired:
                return
        # Parameters the forward pass did not use got no gradient here; every rank must still take part.
        for index, bucket in enumerate(self.buckets):
            for param in bucket.params:
                if id(param) not in self._fired:
                    if param.grad is None:
                        param.grad = self._torch.zeros_like(param)
                    self._gradient_ready(index, param)
        error: BaseException | None = None
        with span("waiting for gradients", GRADIENTS), self._lock:
            for bucket in self.buckets:  # in order: a bucket not started yet runs after those in flight
                try:
                    if error is None:
                        self._finish(bucket)
                    elif bucket.handle is not None:
                        bucket.handle.wait()  # collect it, so that no all-reduce of this step is left running
                except BaseException as exc:  # noqa: BLE001 - the first failure is raised below
                    error = error or exc
            self._reset_counts()
        if error is not None:
            if isinstance(error, HopsmlError):
                raise error
            raise CollectiveError(f"the gradient all-reduce failed: {error!r}") from error

    def close(self) -> None:
        """Remove the hooks and stop the reducing thread."""
        if self._closed:
            return
        self._closed = True
        for handle in self._handles:
            handle.remove()

    def __enter__(self) -> GradientAllReduce:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def distribute(model: object, optimizer: object = None, *, op: str = "mean", bucket_mb: float = DEFAULT_BUCKET_MB,
               first_bucket_mb: float | None = DEFAULT_FIRST_BUCKET_MB, broadcast: bool = True,
               root: int = 0) -> GradientAllReduce:
    """Make `model` train data-parallel over the ranks of this run (see GradientAllReduce)."""
    return GradientAllReduce(model, optimizer, op=op, bucket_mb=bucket_mb, first_bucket_mb=first_bucket_mb,
                             broadcast=broadcast, root=root)


def parameters_checksum(model: object) -> str:
    """A digest of the parameters and buffers, to show that every rank holds the same model."""
    import hashlib

    digest = hashlib.blake2b(digest_size=12)
    for tensor in _tensors_of(model):
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(require().uint8).numpy().tobytes())
    return digest.hexdigest()


__all__ = ["DEFAULT_BUCKET_MB", "DEFAULT_FIRST_BUCKET_MB", "GradientAllReduce", "broadcast_parameters", "distribute",
           "parameters_checksum"]
