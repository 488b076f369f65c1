#!/usr/bin/python3
"""gguf_bytes.py - bytes one decoded token reads from a qwen35moe / qwen35 GGUF (the roofline).

    /usr/bin/python3 bench/gguf_bytes.py MODEL.gguf [--depth N] [--kv f16|f32|q8_0] [--json]

Reads only the GGUF header (metadata and tensor infos) and counts what one decode step has to
read from memory:
  - every tensor of every layer in full (attention / DeltaNet projections, norms, router,
    shared expert, conv1d, ...), except
  - expert tensors (names with "_exps"): n_expert_used / n_expert of their bytes,
  - token_embd: one row (unless the output matrix is tied to it: then all of it, once),
  - output.weight and output_norm in full;
plus the state read per token:
  - DeltaNet (recurrent) layers: the f32 state S (v_heads x k_dim x v_dim) and the conv state
    ((kernel-1) x conv channels), each read once (and written back once: reported separately,
    not counted in the roofline),
  - attention layers: the KV cache at context depth N (K and V, kv_heads x head_dim per
    position, at the --kv type's size).
Activations (a few hundred KB) are left out. Numbers are bytes (10^9 = GB).
"""
import json
import struct
import sys

# ggml type id -> (name, block elements, block bytes)
TYPES = {
    0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 9: ("q8_1", 32, 36),
    10: ("q2_k", 256, 84), 11: ("q3_k", 256, 110), 12: ("q4_k", 256, 144),
    13: ("q5_k", 256, 176), 14: ("q6_k", 256, 210), 15: ("q8_k", 256, 292),
    16: ("iq2_xxs", 256, 66), 17: ("iq2_xs", 256, 74), 18: ("iq3_xxs", 256, 98), 19: ("iq1_s", 256, 50),
    20: ("iq4_nl", 32, 18), 21: ("iq3_s", 256, 110), 22: ("iq2_s", 256, 82), 29: ("iq1_m", 256, 56),
    39: ("mxfp4", 32, 17), 23: ("iq4_xs", 256, 136), 24: ("i8", 1, 1), 25: ("i16", 1, 2),
    26: ("i32", 1, 4), 27: ("i64", 1, 8), 28: ("f64", 1, 8), 30: ("bf16", 1, 2),
}
KV_BYTES = {"f32": 4.0, "f16": 2.0, "q8_0": 34.0 / 32.0}


class Reader:
    def __init__(self, f):
        self.f = f

    def take(self, fmt):
        n = struct.calcsize("<" + fmt)
        b = self.f.read(n)
        if len(b) != n:
            raise ValueError("truncated GGUF header")
        return struct.unpack("<" + fmt, b)

    def string(self):
        (n,) = self.take("Q")
        b = self.f.read(n)
        if len(b) != n:
            raise ValueError("truncated GGUF string")
        return b.decode("utf-8", "replace")

    SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(self, t):
        if t in self.SCALAR:
            return self.take(self.SCALAR[t])[0]
        if t == 8:
            return self.string()
        if t == 9:
            (et, n) = self.take("IQ")
            if et in self.SCALAR and n > 64:  # skip long arrays (the vocabulary) cheaply
                self.f.seek(n * struct.calcsize("<" + self.SCALAR[et]), 1)
                return None
            return [self.value(et) for _ in range(n)]
        raise ValueError("unknown GGUF value type %d" % t)


def read_header(path):
    with open(path, "rb") as f:
        r = Reader(f)
        magic = f.read(4)
        if magic != b"GGUF":
            raise ValueError("%s: not a GGUF file" % path)
        (version, n_tensors, n_kv) = r.take("IQQ")
        if version != 3:
            raise ValueError("%s: GGUF version %d, expected 3" % (path, version))
        kv = {}
        for _ in range(n_kv):
            k = r.string()
            (t,) = r.take("I")
            kv[k] = r.value(t)
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            (nd,) = r.take("I")
            ne = list(r.take("Q" * nd))
            (t, _off) = r.take("IQ")
            if t not in TYPES:
                raise ValueError("%s: tensor %s has unknown type %d" % (path, name, t))
            _, be, bb = TYPES[t]
            n = 1
            for d in ne:
                n *= d
            tensors.append({"name": name, "ne": ne, "type": TYPES[t][0], "bytes": n // be * bb})
        return kv, tensors


def decode_bytes(path, depth=0, kv_type="f16"):
    kv, tensors = read_header(path)
    arch = kv.get("general.architecture", "")
    g = lambda k, d=None: kv.get("%s.%s" % (arch, k), d)
    n_layer = g("block_count")
    n_expert = g("expert_count", 0) or 0
    n_used = g("expert_used_count", 0) or 0
    names = {t["name"] for t in tensors}
    tied = "output.weight" not in names
    parts = {"attention": 0, "deltanet": 0, "moe_experts": 0, "shared_expert": 0, "router": 0,
             "norms_other": 0, "output": 0, "embedding_row": 0}
    by_type = {}
    attn_layers = set()
    rec_layers = set()
    for t in tensors:
        nm, b = t["name"], t["bytes"]
        if nm.startswith("blk."):
            layer = int(nm.split(".")[1])
            if ".attn_q.weight" in nm:
                attn_layers.add(layer)
            if ".ssm_" in nm:
                rec_layers.add(layer)
    for t in tensors:
        nm, b = t["name"], t["bytes"]
        if nm == "token_embd.weight":
            rows = t["ne"][1]
            part, used = "embedding_row", b // rows
            if tied:
                part, used = "output", b
        elif nm == "output.weight" or nm == "output_norm.weight":
            part, used = "output", b
        elif nm.startswith("blk."):
            layer = int(nm.split(".")[1])
            if layer >= n_layer:
                continue  # MTP / nextn layers are not run by decode
            if "_exps" in nm:
                part, used = "moe_experts", b * n_used // max(n_expert, 1)
            elif "shexp" in nm:
                part, used = "shared_expert", b
            elif "ffn_gate_inp" in nm:
                part, used = "router", b
            elif nm.endswith("norm.weight") and ".ssm_norm" not in nm and "attn_q_norm" not in nm \
                    and "attn_k_norm" not in nm:
                part, used = "norms_other", b
            elif layer in attn_layers:
                part, used = "attention", b
            elif layer in rec_layers:
                part, used = "deltanet", b
            else:
                part, used = "norms_other", b  # dense FFN and anything else
        else:
            part, used = "norms_other", b
        parts[part] += used
        by_type[t["type"]] = by_type.get(t["type"], 0) + used
    weights = sum(parts.values())
    # state
    v_heads = g("ssm.time_step_rank", 0) or 0
    k_dim = g("ssm.state_size", 0) or 0
    k_heads = g("ssm.group_count", 0) or 0
    inner = g("ssm.inner_size", 0) or 0
    conv_k = g("ssm.conv_kernel", 4) or 4
    v_dim = inner // v_heads if v_heads else 0
    delta_state = len(rec_layers) * (v_heads * k_dim * v_dim * 4 + (conv_k - 1) * (2 * k_heads * k_dim + inner) * 4)
    kv_heads = g("attention.head_count_kv", 0)
    if isinstance(kv_heads, list):
        kv_heads = max(kv_heads)
    head_dim = g("attention.key_length", 0) or 0
    head_dim_v = g("attention.value_length", head_dim) or head_dim
    kv_cache = int(len(attn_layers) * depth * (kv_heads or 0) * (head_dim + head_dim_v) * KV_BYTES[kv_type])
    return {
        "file": path, "arch": arch, "n_layer": n_layer, "n_attn_layers": len(attn_layers),
        "n_deltanet_layers": len(rec_layers), "n_expert": n_expert, "n_expert_used": n_used,
        "tied_output": tied, "weights_bytes": weights, "parts_bytes": parts, "weights_by_type": by_type,
        "deltanet_state_bytes": delta_state, "depth": depth, "kv_type": kv_type, "kv_cache_bytes": kv_cache,
        "decode_bytes": weights + delta_state + kv_cache,
        "file_tensor_bytes": sum(t["bytes"] for t in tensors),
    }


def main(argv):
    path, depth, kv_type, as_json = None, 0, "f16", False
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--depth" and i + 1 < len(argv):
            depth = int(argv[i + 1]); i += 1
        elif a == "--kv" and i + 1 < len(argv):
            kv_type = argv[i + 1]; i += 1
            if kv_type not in KV_BYTES:
                print("gguf_bytes: --kv must be f32, f16 or q8_0", file=sys.stderr); return 2
        elif a == "--json":
            as_json = True
        elif a in ("-h", "--help"):
            print(__doc__); return 0
        elif path is None:
            path = a
        else:
            print("gguf_bytes: unexpected argument %r" % a, file=sys.stderr); return 2
        i += 1
    if not path:
        print("usage: gguf_bytes.py MODEL.gguf [--depth N] [--kv f16|f32|q8_0] [--json]", file=sys.stderr)
        return 2
    try:
        r = decode_bytes(path, depth, kv_type)
    except (OSError, ValueError) as e:
        print("gguf_bytes: %s" % e, file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(r))
    else:
        print("%s: %.3f GB per decoded token (weights %.3f GB, DeltaNet state %.1f MB, KV cache at depth %d %.1f MB)"
              % (path, r["decode_bytes"] / 1e9, r["weights_bytes"] / 1e9, r["deltanet_state_bytes"] / 1e6, depth,
                 r["kv_cache_bytes"] / 1e6))
        for k, v in r["parts_bytes"].items():
            print("  %-14s %8.1f MB" % (k, v / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
