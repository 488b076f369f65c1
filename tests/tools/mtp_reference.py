#!/usr/bin/python3
"""mtp_reference.py MODEL.gguf DUMP [PEER] - float64 reference of the MTP head on an f32 GGUF,
compared with the logits q35 wrote (test_mtp_ckpt --dump) and, given PEER (mtp_peer's output:
per call int32 end + f32 logits[V]), with llama.cpp's graph_mtp on the same inputs. Prints the
largest differences; exit 1 above the tolerance.

Written from llama.cpp's graph_mtp (src/models/qwen35moe.cpp) and the GGUF specification, with a
GGUF reader of its own (f32 tensors only):
  x = eh_proj @ concat[rms(embed(t)) * enorm, rms(h) * hnorm]     (GGUF norms hold 1 + w)
  a = rms(x) * attn_norm; [q | gate] per head = attn_q @ a; k = attn_k @ a; v = attn_v @ a
  q, k: per-head rms * q_norm / k_norm, NeoX RoPE on the first n_rot dims (theta = p * base^(-2j/n_rot))
  o_h = softmax(q_h . K_g / sqrt(hd)) V_g (causal over the head's cache, g = h // (nh / nkv))
  x += attn_output @ (o * sigmoid(gate))
  f = rms(x) * post_attention_norm; x += MoE(f) (softmax router, top-k renormalized, SwiGLU
      experts, + shared expert * sigmoid(gate_inp_shexp . f)) or dense SwiGLU
  logits = output @ (rms(x) * shared_head_norm (or output_norm))
Dump: int32 n, H, V, n_calls; int32 tokens[n]; f32 hidden[n][H]; per call int32 end (pairs
0 .. end-1 done after it) then f32 logits[V] of pair end-1.
"""
import struct
import sys

import numpy as np

VT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path):
    data = open(path, "rb").read()
    assert data[:4] == b"GGUF", "not a GGUF file"
    p = 8
    n_t, n_kv = struct.unpack_from("<QQ", data, p)
    p += 16

    def string(p):
        (n,) = struct.unpack_from("<Q", data, p)
        return data[p + 8:p + 8 + n].decode("utf-8", "replace"), p + 8 + n

    def value(t, p):
        if t == 8:
            return string(p)
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, p)
            p += 12
            out = []
            for _ in range(n):
                v, p = value(et, p)
                out.append(v)
            return out, p
        return struct.unpack_from(VT[t], data, p)[0], p + struct.calcsize(VT[t])

    kv = {}
    for _ in range(n_kv):
        k, p = string(p)
        (t,) = struct.unpack_from("<I", data, p)
        kv[k], p = value(t, p + 4)
    infos = []
    for _ in range(n_t):
        name, p = string(p)
        (nd,) = struct.unpack_from("<I", data, p)
        ne = struct.unpack_from("<%dQ" % nd, data, p + 4)
        p += 4 + 8 * nd
        t, off = struct.unpack_from("<IQ", data, p)
        p += 12
        infos.append((name, ne, t, off))
    align = kv.get("general.alignment", 32)
    base = (p + align - 1) // align * align
    tensors = {}
    for name, ne, t, off in infos:
        if t != 0:
            continue  # f32 only; the test writes an f32 model
        cnt = int(np.prod(ne))
        a = np.frombuffer(data, dtype="<f4", count=cnt, offset=base + off).astype(np.float64)
        tensors[name] = a.reshape(tuple(reversed(ne)))
    return kv, tensors


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1 + np.exp(-x))


def main():
    kv, T = read_gguf(sys.argv[1])
    arch = kv["general.architecture"]
    g = lambda k: kv[arch + "." + k]
    L = g("block_count") - g("nextn_predict_layers")
    nh, nkv, hd, nrot = g("attention.head_count"), g("attention.head_count_kv"), g("attention.key_length"), g(
        "rope.dimension_count")
    eps, base = g("attention.layer_norm_rms_epsilon"), g("rope.freq_base")
    b = lambda n: T["blk.%d.%s.weight" % (L, n)]
    raw = open(sys.argv[2], "rb").read()
    n, H, V, n_calls = struct.unpack_from("<4i", raw, 0)
    p = 16
    toks = np.frombuffer(raw, "<i4", n, p)
    p += 4 * n
    hid = np.frombuffer(raw, "<f4", n * H, p).astype(np.float64).reshape(n, H)
    p += 4 * n * H
    embd = T.get("blk.%d.nextn.embed_tokens.weight" % L, T["token_embd.weight"])
    x = np.concatenate([rms(embd[toks], b("nextn.enorm"), eps), rms(hid, b("nextn.hnorm"), eps)], axis=1)
    x = x @ b("nextn.eh_proj").T
    a = rms(x, b("attn_norm"), eps)
    qg = (a @ b("attn_q").T).reshape(n, nh, 2 * hd)
    q, gate = qg[:, :, :hd], qg[:, :, hd:]
    k = (a @ b("attn_k").T).reshape(n, nkv, hd)
    v = (a @ b("attn_v").T).reshape(n, nkv, hd)
    q, k = rms(q, b("attn_q_norm"), eps), rms(k, b("attn_k_norm"), eps)
    half = nrot // 2
    th = np.arange(n)[:, None] * base ** (-2.0 * np.arange(half) / nrot)[None, :]
    c, s = np.cos(th)[:, None, :], np.sin(th)[:, None, :]
    for z in (q, k):
        x0, x1 = z[:, :, :half].copy(), z[:, :, half:nrot].copy()
        z[:, :, :half], z[:, :, half:nrot] = x0 * c - x1 * s, x1 * c + x0 * s
    o = np.zeros((n, nh, hd))
    for h in range(nh):
        kg, vg = k[:, h // (nh // nkv)], v[:, h // (nh // nkv)]
        sc = q[:, h] @ kg.T / np.sqrt(hd)
        sc[np.triu_indices(n, 1)] = -np.inf
        w = np.exp(sc - sc.max(axis=1, keepdims=True))
        o[:, h] = (w / w.sum(axis=1, keepdims=True)) @ vg
    o = o * (1 / (1 + np.exp(-gate)))
    x = x + o.reshape(n, nh * hd) @ b("attn_output").T
    f = rms(x, b("post_attention_norm"), eps)
    if "blk.%d.ffn_gate_inp.weight" % L in T:
        K = g("expert_used_count")
        r = f @ b("ffn_gate_inp").T
        pr = np.exp(r - r.max(axis=1, keepdims=True))
        pr /= pr.sum(axis=1, keepdims=True)
        y = np.zeros_like(x)
        for t in range(n):
            sel = np.argsort(-pr[t], kind="stable")[:K]
            ws = pr[t, sel] / pr[t, sel].sum()
            for e, we in zip(sel, ws):
                hmid = silu(b("ffn_gate_exps")[e] @ f[t]) * (b("ffn_up_exps")[e] @ f[t])
                y[t] += we * (b("ffn_down_exps")[e] @ hmid)
        if "blk.%d.ffn_up_shexp.weight" % L in T:
            sh = (silu(f @ b("ffn_gate_shexp").T) * (f @ b("ffn_up_shexp").T)) @ b("ffn_down_shexp").T
            y += sh * (1 / (1 + np.exp(-(f @ T["blk.%d.ffn_gate_inp_shexp.weight" % L]))))[:, None]
    else:
        y = (silu(f @ b("ffn_gate").T) * (f @ b("ffn_up").T)) @ b("ffn_down").T
    x = x + y
    hn = T.get("blk.%d.nextn.shared_head_norm.weight" % L, T["output_norm.weight"])
    out = T.get("blk.%d.nextn.shared_head_head.weight" % L, T.get("output.weight", T["token_embd.weight"]))
    ref = rms(x, hn, eps) @ out.T
    def calls(buf, p):
        out = []
        for _ in range(n_calls):
            (end,) = struct.unpack_from("<i", buf, p)
            out.append((end, np.frombuffer(buf, "<f4", V, p + 4).astype(np.float64)))
            p += 4 + 4 * V
        return out

    def compare(what, got, want):
        worst = 0.0
        for (end, a), (end2, b) in zip(got, want):
            if end != end2:
                print("%s: call ends differ (%d, %d)" % (what, end, end2))
                return 1.0
            worst = max(worst, np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b))))
            if np.argmax(a) != np.argmax(b):
                print("%s: argmax differs after pair %d" % (what, end - 1))
                worst = max(worst, 1.0)
        print("%s: %d calls, %d pairs, max relative difference %.3g" % (what, n_calls, n, worst))
        return worst

    q35 = calls(raw, p)
    want = [(e, ref[e - 1]) for e, _ in q35]
    worst = compare("q35 head vs float64 reference", q35, want)
    if len(sys.argv) > 3:
        peer = calls(open(sys.argv[3], "rb").read(), 0)
        worst = max(worst, compare("q35 head vs llama.cpp graph_mtp", q35, peer),
                    compare("llama.cpp graph_mtp vs float64 reference", peer, want))
    sys.exit(0 if worst < 1e-4 else 1)


main()
