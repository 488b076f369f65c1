#!/usr/bin/python3
"""Damage a Hugging Face checkpoint in one specific way (bad-input tests for q35 export).

usage: hf_corrupt.py FILE.safetensors MODE [TENSOR]
  drop TENSOR          remove the tensor
  reshape TENSOR       transpose / change its shape (same element count when possible)
  dtype TENSOR         store it as I64
  extra                add an unexpected tensor 'model.language_model.layers.0.mlp.bogus.weight'
  truncate             cut the last 1000 bytes off the file
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_st  # noqa: E402


def main():
    path, mode = sys.argv[1], sys.argv[2]
    if mode == "truncate":
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size - 1000)
        return 0
    W = hf_st.read(path)
    T = {k: (v.astype(np.float32), "F32") for k, v in W.items()}
    if mode == "drop":
        del T[sys.argv[3]]
    elif mode == "reshape":
        a = T[sys.argv[3]][0]
        T[sys.argv[3]] = (a.reshape(-1)[:-1].copy() if a.ndim == 1 else a.T.copy() if a.shape[0] != a.shape[-1]
                          else a[:-1].copy(), "F32")
    elif mode == "dtype":
        T[sys.argv[3]] = (T[sys.argv[3]][0].astype(np.int64), "I64")
    elif mode == "extra":
        T["model.language_model.layers.0.mlp.bogus.weight"] = (np.zeros((4, 4), np.float32), "F32")
    else:
        print(f"unknown mode {mode}", file=sys.stderr)
        return 2
    hf_st.write(path, T)
    return 0


if __name__ == "__main__":
    sys.exit(main())
