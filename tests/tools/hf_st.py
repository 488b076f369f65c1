"""Minimal safetensors reading/writing with numpy (test tooling for q35 export).

write(path, {name: (array_float32, dtype)}) with dtype in BF16/F16/F32 (or any other safetensors
dtype name with a raw numpy array, for bad-input tests); read(path) -> {name: float64 array}.
"""
import json
import struct

import numpy as np


def to_bf16_bits(a):
    x = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (x + 0x7FFF + ((x >> 16) & 1)) >> 16
    return r.astype(np.uint16)


def from_bf16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def encode(a, dtype):
    if dtype == "BF16":
        return to_bf16_bits(a).tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(a, dtype=np.float16).tobytes()
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype=np.float32).tobytes()
    return np.ascontiguousarray(a).tobytes()  # raw (I64, ...)


def write(path, tensors, metadata=None):
    header = {}
    blobs = []
    off = 0
    for name, (arr, dtype) in tensors.items():
        b = encode(arr, dtype)
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        b0, b1 = d["data_offsets"]
        raw = data[base + b0:base + b1]
        dt = d["dtype"]
        if dt == "BF16":
            a = from_bf16_bits(np.frombuffer(raw, dtype="<u2"))
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        elif dt == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        else:
            raise ValueError(f"{path}: {name}: dtype {dt}")
        out[name] = a.astype(np.float64).reshape(d["shape"])
    return out


def read_dir(d):
    import os
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for f in files:
        out.update(read(os.path.join(d, f)))
    return out
