"""The one place that imports PyTorch for hopsml.torch, with an error that says how to install it."""

from __future__ import annotations

from types import ModuleType

from hopsml.errors import HopsmlError


def require() -> ModuleType:
    """The torch module, or a HopsmlError naming the pip command."""
    try:
        import torch
    except ImportError as exc:
        raise HopsmlError("hopsml.torch needs PyTorch in the Python environment of the Spark executors; "
                          "install it with 'pip install torch' (CPU or CUDA build)") from exc
    return torch
