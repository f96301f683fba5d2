"""KServe v2's binary tensor data extension, as Triton's own clients send it by default: a JSON head, then each
binary input's raw little-endian bytes. Read by the protocol (the request) and by the inference log (which keeps
what the client sent as JSON)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hopsml.serving.instance.loaders import RequestError

# KServe v2 tensor types <-> numpy
V2_TYPES = {"BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
            "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64", "FP16": "float16",
            "FP32": "float32", "FP64": "float64", "BYTES": "object"}
NUMPY_V2 = {numpy_type: v2 for v2, numpy_type in V2_TYPES.items()}


def binary_inputs(tensors: list[Any], data: memoryview) -> None:
    """KServe v2's binary tensor extension: each input whose parameters give a `binary_data_size` takes that many
    bytes of what follows the JSON head, in the inputs' order, as its data (BYTES: each element a 4-byte
    little-endian length and its bytes)."""
    at = 0
    for tensor in tensors:
        size = (tensor.get("parameters") or {}).get("binary_data_size") if isinstance(tensor, dict) else None
        if size is None:
            continue
        name = tensor.get("name", "an input")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0 or at + size > len(data):
            raise RequestError(f"input {name!r}: binary_data_size {size!r} does not fit the {len(data) - at} bytes "
                               "left after the JSON head")
        chunk, at = data[at:at + size], at + size
        datatype = tensor.get("datatype")
        if datatype == "BYTES":
            items, offset = [], 0
            while offset + 4 <= len(chunk):
                length = int.from_bytes(chunk[offset:offset + 4], "little")
                items.append(bytes(chunk[offset + 4:offset + 4 + length]).decode("utf-8", "replace"))
                offset += 4 + length
            tensor["data"] = items
        elif datatype in V2_TYPES:
            dtype = np.dtype(V2_TYPES[datatype])
            if size % dtype.itemsize:
                raise RequestError(f"input {name!r}: {size} bytes are not whole {datatype} values")
            tensor["data"] = np.frombuffer(chunk, dtype=dtype.newbyteorder("<")).astype(dtype)
    if at != len(data):
        raise RequestError(f"{len(data) - at} bytes after the JSON head belong to no input; give each binary input "
                           "\"parameters\": {\"binary_data_size\": N}")
