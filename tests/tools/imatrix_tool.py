#!/usr/bin/python3
"""Test tooling for importance matrices, independent of q35's code.

  imatrix_tool.py write MODEL.gguf OUT.gguf SEED
      an imatrix GGUF in llama.cpp's format (tools/imatrix/imatrix.cpp: NAME.in_sum2 f32
      {n_per_row, n_mat}, NAME.counts f32 {1, n_mat}; imatrix.datasets, imatrix.chunk_count,
      imatrix.chunk_size) for every 2-D/3-D weight of MODEL that llama-quantize quantizes,
      random positive sums (log-uniform over 1/16..16 times the count) and counts 1..100
      (one expert of each 3-D tensor gets count 0).
  imatrix_tool.py write-dat MODEL.gguf OUT.dat SEED
      the same entries (same draws as write with SEED) in llama.cpp's legacy .dat format
      (common/imatrix-loader.cpp: i32 n_entries; per entry i32 name length, name, i32 ncall,
      i32 nval, nval f32; then i32 chunk count, i32 length + dataset name), with ncall = 1 and
      the values the weights the GGUF gives (sum / count, 1 where the count is 0), so that both
      files mean the same importance
  imatrix_tool.py werr LIB_DIR SRC.gguf A.gguf B.gguf TENSOR IMATRIX.gguf
      the importance-weighted squared error sum_j w_j (x_j - q_j)^2 of TENSOR in A and in B
      against SRC (bf16/f32), each expert with its own weights, dequantized with ggml's own
      dequantize_row_* (libggml-base.so); prints "A_err B_err" (summed over experts)
  imatrix_tool.py check MODEL.gguf IMATRIX.gguf TOKENS CHUNK
      checks an imatrix computed over TOKENS (comma-separated ids) in chunks of CHUNK of an f32
      MoE MODEL whose layer 0 is a DeltaNet layer against a float64 recomputation: the input of
      blk.0's attn_qkv / attn_gate / ssm_alpha / ssm_beta is rmsnorm(token_embd[token]) *
      blk.0.attn_norm, so their in_sum2 must be the sum of its squares over the tokens and their
      counts the number of tokens (output.weight too); every expert tensor: one count per expert, summing to
      tokens x experts_used; the keys are llama.cpp's
"""
import ctypes
import json
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def info(path):
    out = subprocess.run([sys.executable, os.path.join(HERE, "hf_gguf_info.py"), path], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def draws(model, seed):
    """(name, n_per_row, sums [n_mat, n_per_row], counts [n_mat]) for every quantized weight"""
    d = info(model)
    rng = np.random.default_rng(int(seed))
    out = []
    for name, t in sorted(d["tensors"].items()):
        ne = t["ne"]
        if len(ne) < 2 or not name.endswith("weight") or "_norm.weight" in name or "ffn_gate_inp" in name \
                or "ssm_conv1d" in name or name == "token_embd.weight":
            continue
        n_mat = ne[2] if len(ne) > 2 else 1
        counts = rng.integers(1, 101, n_mat).astype(np.float32)
        if n_mat > 1:
            counts[n_mat // 2] = 0
        sums = (np.exp(rng.uniform(np.log(1 / 16), np.log(16), (n_mat, ne[0]))) * counts[:, None]).astype(np.float32)
        out.append((name, ne[0], sums, counts))
    return out


def write_dat(model, out, seed):
    with open(out, "wb") as f:
        entries = draws(model, seed)
        f.write(struct.pack("<i", len(entries)))
        for name, _, sums, counts in entries:
            w = np.where(counts[:, None] > 0, sums / np.maximum(counts[:, None], np.float32(1)), np.float32(1))
            w = w.astype(np.float32).reshape(-1)
            b = name.encode()
            f.write(struct.pack("<i", len(b)) + b + struct.pack("<ii", 1, w.size) + w.tobytes())
        f.write(struct.pack("<i", 10) + struct.pack("<i", 13) + b"synthetic.txt")


def write(model, out, seed):
    tensors = []
    for name, n_per_row, sums, counts in draws(model, seed):
        n_mat = len(counts)
        tensors.append((name + ".in_sum2", [n_per_row, n_mat], sums))
        tensors.append((name + ".counts", [1, n_mat], counts))
    kv = gguf_str("imatrix.datasets") + struct.pack("<II", 9, 8) + struct.pack("<Q", 1) + gguf_str("synthetic.txt")
    kv += gguf_str("imatrix.chunk_count") + struct.pack("<II", 4, 10)
    kv += gguf_str("imatrix.chunk_size") + struct.pack("<II", 4, 512)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 3) + kv
    off, infos, blobs = 0, b"", []
    for name, ne, a in tensors:
        infos += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        infos += struct.pack("<IQ", 0, off)
        blob = a.tobytes()
        blob += b"\0" * ((-len(blob)) % 32)
        blobs.append(blob)
        off += len(blob)
    meta = head + infos
    meta += b"\0" * ((-len(meta)) % 32)
    with open(out, "wb") as f:
        f.write(meta)
        for b in blobs:
            f.write(b)


TYPE_NAME = {0: "f32", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 10: "q2_K", 11: "q3_K", 12: "q4_K",
             13: "q5_K", 14: "q6_K", 16: "iq2_xxs", 17: "iq2_xs", 18: "iq3_xxs", 19: "iq1_s", 20: "iq4_nl",
             21: "iq3_s", 22: "iq2_s", 23: "iq4_xs", 29: "iq1_m", 39: "mxfp4"}
BLOCK = {2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 10: (256, 84), 11: (256, 110),
         12: (256, 144), 13: (256, 176), 14: (256, 210), 16: (256, 66), 17: (256, 74), 18: (256, 98),
         19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82), 23: (256, 136), 29: (256, 56), 39: (32, 17)}


def tensor_f32(lib, path, d, name):
    t = d["tensors"][name]
    ne = t["ne"]
    n = int(np.prod(ne))
    with open(path, "rb") as f:
        f.seek(t["offset"])
        if t["type"] == 0:
            return np.frombuffer(f.read(4 * n), dtype=np.float32).reshape(ne[::-1])
        if t["type"] == 30:
            raw = np.frombuffer(f.read(2 * n), dtype=np.uint16).astype(np.uint32) << 16
            return raw.view(np.float32).reshape(ne[::-1])
        blk, size = BLOCK[t["type"]]
        raw = f.read(n // blk * size)
    out = np.empty(n, dtype=np.float32)
    fn = getattr(lib, "dequantize_row_" + TYPE_NAME[t["type"]])
    fn(ctypes.c_char_p(raw), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(n))
    return out.reshape(ne[::-1])


def werr(libdir, src, a, b, name, imatrix):
    lib = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"))
    di = info(imatrix)
    w = tensor_f32(lib, imatrix, di, name + ".in_sum2")
    c = tensor_f32(lib, imatrix, di, name + ".counts").reshape(-1)
    w = np.where(c[:, None] > 0, w / np.maximum(c[:, None], 1), 1.0)
    x = tensor_f32(lib, src, info(src), name).astype(np.float64)
    errs = []
    for path in (a, b):
        q = tensor_f32(lib, path, info(path), name).astype(np.float64)
        if x.ndim == 2:
            errs.append(float(((x - q) ** 2 * w[0]).sum()))
        else:
            errs.append(float(sum(((x[e] - q[e]) ** 2 * w[e]).sum() for e in range(x.shape[0]))))
    print("%.9g %.9g" % tuple(errs))


def check(model, imatrix, tokens, chunk):
    dm, di = info(model), info(imatrix)
    toks = [int(t) for t in tokens.split(",")]
    n = len(toks) // int(chunk) * int(chunk)
    toks = toks[:n]
    kv = di["kv"]
    assert kv.get("imatrix.chunk_count") == n // int(chunk), kv
    assert kv.get("imatrix.chunk_size") == int(chunk), kv
    assert isinstance(kv.get("imatrix.datasets"), list), kv
    arch = dm["kv"]["general.architecture"]
    eps = dm["kv"][arch + ".attention.layer_norm_rms_epsilon"]
    k_used = dm["kv"][arch + ".expert_used_count"]
    lib = None
    emb = tensor_f32(lib, model, dm, "token_embd.weight").astype(np.float64)
    wn = tensor_f32(lib, model, dm, "blk.0.attn_norm.weight").astype(np.float64)
    x = emb[toks]
    h = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * wn
    ref = (h * h).sum(axis=0)
    for name in ("attn_qkv", "attn_gate", "ssm_alpha", "ssm_beta"):
        s = tensor_f32(lib, imatrix, di, "blk.0.%s.weight.in_sum2" % name).reshape(-1)
        c = tensor_f32(lib, imatrix, di, "blk.0.%s.weight.counts" % name).reshape(-1)
        assert c.tolist() == [n], (name, c)
        err = np.abs(s - ref).max() / ref.max()
        assert err < 1e-5, (name, err)
    c = tensor_f32(lib, imatrix, di, "output.weight.counts").reshape(-1)
    assert c.tolist() == [n], ("output.weight", c)
    experts = [t for t in di["tensors"] if "_exps.weight.counts" in t]
    assert experts, "no expert tensors"
    for t in experts:
        c = tensor_f32(lib, imatrix, di, t).reshape(-1)
        e = dm["tensors"][t[:-len(".counts")]]["ne"][2]
        assert len(c) == e and c.sum() == n * k_used, (t, c.tolist(), e)
        s = tensor_f32(lib, imatrix, di, t[:-len(".counts")] + ".in_sum2")
        assert s.shape[0] == e and np.all(s >= 0) and np.all((s.sum(axis=1) > 0) == (c > 0)), t
    print("ok: %d tokens, %d tensors" % (n, len(di["tensors"]) // 2))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(*sys.argv[2:5])
    elif sys.argv[1] == "write-dat":
        write_dat(*sys.argv[2:5])
    elif sys.argv[1] == "werr":
        werr(*sys.argv[2:8])
    elif sys.argv[1] == "check":
        check(*sys.argv[2:6])
    else:
        sys.exit(__doc__)
