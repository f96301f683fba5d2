"""Data-parallel PyTorch through hopsml.collective: parameter broadcast and a bucketed gradient all-reduce.

``sync = distribute(model, optimizer)`` (a `GradientAllReduce`) does what DistributedDataParallel does,
over hopsml's authenticated collectives instead of a second rendezvous:

* rank 0's parameters and buffers are broadcast once, so every rank starts from the same model;
* the parameters are planned into buckets (about 25 MiB, in reverse order of registration, which is
  roughly the order backward produces their gradients), identically on every rank;
* a post-accumulate-grad hook on each parameter counts the bucket's gradients; a full bucket wakes a
  background thread that reduces the ready buckets in their fixed order (the same collective sequence
  on every rank) while backward is still computing the earlier layers;
* ``synchronize()`` reduces, in the same order, whatever the thread has not reached yet (with a single
  bucket there is no thread at all: nothing to overlap, and no thread switch on the step's critical
  path); with an optimizer given it runs as the optimizer's step pre-hook, so ``optimizer.step()``
  always sees averaged gradients.

CPU tensors go to the TCP ring as zero-copy numpy views (``tensor.numpy()``); CUDA tensors as cupy
arrays over DLPack, reduced with NCCL. A bucket of one contiguous gradient is reduced in place; others
are packed into one flat buffer per bucket. One backward per step: between ``backward()`` and
``synchronize()`` the training code must not call other collectives (the background thread uses the
communicator then).
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

from hopsml import collective
from hopsml.collective.timeout import Timeout
from hopsml.errors import CollectiveError, HopsmlError, SettingsError
from hopsml.timeline import span
from hopsml.timeline.recorder import GRADIENTS
from hopsml.torch._torch import require

log = logging.getLogger(__name__)

DEFAULT_BUCKET_MB = 25.0
_STOP = object()


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


def broadcast_parameters(model: Any, root: int = 0, comm: collective.Communicator | None = None) -> None:
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
    events: list[Any] = field(default_factory=list)
    buffer: Any = None


def _plan(params: list[Any], bucket_bytes: int) -> list[_Bucket]:
    """Buckets of consecutive parameters (reverse registration order) of one device and dtype."""
    buckets: list[_Bucket] = []
    current: list[Any] = []
    size = 0
    for param in reversed(params):
        nbytes = param.numel() * param.element_size()
        if current and (param.dtype != current[0].dtype or param.device != current[0].device
                        or size + nbytes > bucket_bytes):
            buckets.append(_Bucket(current, sum(p.numel() for p in current)))
            current, size = [], 0
        current.append(param)
        size += nbytes
    if current:
        buckets.append(_Bucket(current, sum(p.numel() for p in current)))
    return buckets


class GradientAllReduce:
    """Averages (or sums) a model's gradients over the ranks during backward; see the module text."""

    def __init__(self, model: Any, optimizer: Any = None, *, op: str = "mean", bucket_mb: float = DEFAULT_BUCKET_MB,
                 broadcast: bool = True, root: int = 0, comm: collective.Communicator | None = None) -> None:
        torch = require()
        if op not in ("mean", "sum"):
            raise SettingsError(f"op={op!r}: gradients are combined with 'mean' (the usual) or 'sum'")
        if not bucket_mb > 0:
            raise SettingsError(f"bucket_mb={bucket_mb!r} must be a positive number of MiB (25 is a good start)")
        self._torch = torch
        self._comm = comm or collective.current()  # the thread below cannot see the caller's context
        self.op = op
        if broadcast:
            broadcast_parameters(model, root, self._comm)
        params = [p for p in model.parameters() if p.requires_grad]
        if any(p.is_sparse for p in params):
            raise SettingsError("sparse parameters are not supported by hopsml.torch; use dense ones or "
                                "torch.nn.parallel.DistributedDataParallel")
        self.buckets = _plan(params, int(bucket_mb * (1 << 20)))
        self._lock = threading.Lock()       # guards the per-step counts
        self._reducing = threading.Lock()   # one thread at a time reduces, always the next bucket in order
        self._next = 0
        self._fired: set[int] = set()
        self._wake: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._closed = False
        self._reset_counts()
        self._handles = [param.register_post_accumulate_grad_hook(self._hook(index))
                         for index, bucket in enumerate(self.buckets) for param in bucket.params]
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(lambda *_: self.synchronize()))
        # With one bucket there is nothing to overlap: synchronize() reduces it without a thread switch.
        self._thread = None
        if len(self.buckets) > 1:
            self._thread = threading.Thread(target=self._run, name="hopsml-torch-gradients", daemon=True)
            self._thread.start()
        log.debug("gradient all-reduce over %d ranks: %d parameters in %d buckets", self._comm.size,
                  len(params), len(self.buckets))

    # --- the backward side -------------------------------------------------------------------
    def _reset_counts(self) -> None:
        self._fired.clear()
        for bucket in self.buckets:
            bucket.pending = len(bucket.params)

    def _hook(self, index: int) -> Any:
        def on_gradient(param: Any) -> None:
            self._gradient_ready(index, param)
        return on_gradient

    def _gradient_ready(self, index: int, param: Any) -> None:
        bucket = self.buckets[index]
        with self._lock:
            if id(param) in self._fired:
                raise HopsmlError("a parameter got a second gradient before synchronize(): hopsml.torch reduces "
                                  "once per backward; sum the losses of micro-batches before one backward, or "
                                  "call optimizer.step() / synchronize() between backward calls")
            self._fired.add(id(param))
            if param.is_cuda:
                event = self._torch.cuda.Event()
                event.record()
                bucket.events.append(event)
            bucket.pending -= 1
            full = bucket.pending == 0
        if full and self._thread is not None:
            self._wake.put(index)

    # --- reducing, in bucket order (the same collective sequence on every rank) ---------------
    def _bucket_ready(self, index: int) -> bool:
        with self._lock:
            return self.buckets[index].pending == 0

    def _drain(self) -> None:
        """Reduce the ready buckets from the next one on, in order; stop at the first one not ready."""
        while self._next < len(self.buckets) and self._bucket_ready(self._next):
            if self._error is None:
                try:
                    self._reduce(self.buckets[self._next])
                except BaseException as exc:  # noqa: BLE001 - raised in the training thread by synchronize
                    self._error = exc
            self._next += 1

    def _run(self) -> None:
        while True:
            if self._wake.get() is _STOP:
                return
            with self._reducing:
                self._drain()

    def _reduce(self, bucket: _Bucket) -> None:
        with span("gradient bucket", GRADIENTS, params=len(bucket.params), numel=bucket.numel):
            self._reduce_bucket(bucket)

    def _reduce_bucket(self, bucket: _Bucket) -> None:
        torch = self._torch
        for event in bucket.events:
            event.synchronize()
        bucket.events.clear()
        grads = [p.grad for p in bucket.params]
        reduce = lambda array: self._comm.allreduce(array, self.op)  # noqa: E731
        single = grads[0]
        if len(grads) == 1 and single.is_contiguous() and _wire_dtype(torch, single.dtype) == single.dtype:
            _run_collective(torch, single, reduce)  # in place: no copy at all
            return
        if bucket.buffer is None:
            bucket.buffer = torch.empty(bucket.numel, dtype=_wire_dtype(torch, single.dtype), device=single.device)
        flat = _flatten(torch, grads, bucket.buffer)
        _run_collective(torch, flat, reduce)
        _unflatten_into(flat, grads)

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
        deadline = Timeout(2 * self._comm.timeout_s + 10, "the gradient all-reduce of this step")
        with span("waiting for gradients", GRADIENTS):
            if not self._reducing.acquire(timeout=deadline.remaining()):
                raise deadline.error("the reducing thread did not finish its bucket")
        try:
            self._drain()  # every bucket is ready now: whatever the thread has not done, this thread does
            error, self._error = self._error, None
            self._next = 0
            with self._lock:
                self._reset_counts()
        finally:
            self._reducing.release()
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
        if self._thread is not None:
            self._wake.put(_STOP)
            self._thread.join(timeout=self._comm.timeout_s)

    def __enter__(self) -> GradientAllReduce:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def distribute(model: Any, optimizer: Any = None, *, op: str = "mean", bucket_mb: float = DEFAULT_BUCKET_MB,
               broadcast: bool = True, root: int = 0) -> GradientAllReduce:
    """Make `model` train data-parallel over the ranks of this run (see GradientAllReduce)."""
    return GradientAllReduce(model, optimizer, op=op, bucket_mb=bucket_mb, broadcast=broadcast, root=root)


def parameters_checksum(model: Any) -> str:
    """A digest of the parameters and buffers, to show that every rank holds the same model."""
    import hashlib

    digest = hashlib.blake2b(digest_size=12)
    for tensor in _tensors_of(model):
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(require().uint8).numpy().tobytes())
    return digest.hexdigest()


__all__ = ["DEFAULT_BUCKET_MB", "GradientAllReduce", "broadcast_parameters", "distribute", "parameters_checksum"]
