"""Minimal safetensors reader and writer for PyTorch tensors (no extra packages).

Layout (the safetensors format): an 8-byte little-endian header length N, N bytes of
JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}
padded with spaces to a multiple of 8, then the tensors' bytes back to back, row-major,
little-endian. Used by tools/torch_export.py and tests/torch/make_fixtures.py.
"""
import json
import struct

import numpy as np
import torch

_TO_NAME = {
    torch.float32: "F32",
    torch.float64: "F64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
_FROM_NAME = {v: k for k, v in _TO_NAME.items()}
_ALIGN = {"BOOL": 1, "U8": 1, "I8": 1, "F16": 2, "BF16": 2, "I32": 4, "F32": 4, "I64": 8, "F64": 8}


def save(path, tensors, metadata=None):
    """Writes a dict name -> torch.Tensor (and optional str -> str metadata) to path."""
    items = []
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        dtype = _TO_NAME[t.dtype]
        if t.dtype == torch.bfloat16:
            raw = t.view(torch.int16).numpy().tobytes()
        else:
            raw = t.numpy().tobytes()
        items.append((name, dtype, list(t.shape), raw))
    # Sorted by alignment (descending), then by name, as the reference writer does.
    items.sort(key=lambda it: (-_ALIGN[it[1]], it[0]))
    header, offset = {}, 0
    for name, dtype, shape, raw in items:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in items:
            f.write(raw)


def load(path):
    """Reads a safetensors file into (dict name -> torch.Tensor, metadata dict)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = _FROM_NAME[info["dtype"]]
        buf = data[base + begin : base + end]
        if dtype == torch.bfloat16:
            arr = torch.from_numpy(np.frombuffer(buf, dtype=np.int16).copy()).view(torch.bfloat16)
        elif dtype == torch.bool:
            arr = torch.from_numpy(np.frombuffer(buf, dtype=np.bool_).copy())
        else:
            np_dtype = torch.empty((), dtype=dtype).numpy().dtype
            arr = torch.from_numpy(np.frombuffer(buf, dtype=np_dtype).copy())
        out[name] = arr.reshape(info["shape"])
    return out, metadata
