#!/usr/bin/python3
"""Independent float64 forward pass of a Qwen3.5 model straight from its Hugging Face checkpoint.

usage: hf_reference.py MODEL_DIR --tokens 1,2,3 -o OUT.bin

Written from Hugging Face's modelling code for qwen3_5 / qwen3_5_moe (the model notes, docs/DESIGN.md), on
the checkpoint's own tensors and head order -- no GGUF conventions at all:
  - unit-offset RMSNorm x / sqrt(mean(x^2) + eps) * (1 + w) for input/post-attention/final/q/k
    norms; the DeltaNet output norm is a gated RMSNorm with plain w, times silu(z);
  - gated attention: q_proj rows per head are [query (head_dim) | gate (head_dim)], q/k norms
    before partial NeoX RoPE on the first head_dim * partial_rotary_factor dims, grouped GQA
    (query head h -> kv head h // (n_head / n_kv)), output * sigmoid(gate) before o_proj;
  - Gated DeltaNet: causal depthwise conv (conv1d [C, 1, K]) + silu on q|k|v, q and k L2
    normalized (x / sqrt(sum x^2 + 1e-6)), q scaled by dk^-0.5, value head h uses key head
    h // (Hv / Hk) (repeat_interleave), beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias),
    S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q;
  - MoE: softmax router, top-k renormalized, experts from fused gate_up_proj [E, 2I, H] (chunk(2):
    gate first) / down_proj [E, H, I] or per-expert tensors; shared expert * sigmoid(gate);
    dense models: SwiGLU mlp;
  - logits = norm(x) @ lm_head^T (embed_tokens when lm_head is absent).
Writes little-endian float32 logits, T x V, position major (the `q35 logits --all` format).
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_st  # noqa: E402


def rms(x, w, eps, offset):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * ((1.0 + w) if offset else w)


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def l2n(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + 1e-6)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("-o", required=True)
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    tc = cfg.get("text_config", cfg)
    W = hf_st.read_dir(a.model)
    P = "model.language_model." if "model.language_model.embed_tokens.weight" in W else "model."
    ids = np.array([int(t) for t in a.tokens.replace(",", " ").split()])
    T = len(ids)
    H = tc["hidden_size"]
    L = tc["num_hidden_layers"]
    nh, nkv, hd = tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    eps = tc["rms_norm_eps"]
    rp = tc.get("rope_parameters") or {}
    theta = rp.get("rope_theta", tc.get("rope_theta", 10000.0))
    partial = tc.get("partial_rotary_factor", rp.get("partial_rotary_factor", 0.25))
    n_rot = int(hd * partial)
    Hk, Hv = tc["linear_num_key_heads"], tc["linear_num_value_heads"]
    dk, dv, K = tc["linear_key_head_dim"], tc["linear_value_head_dim"], tc["linear_conv_kernel_dim"]
    if "layer_types" in tc:
        full = [t == "full_attention" for t in tc["layer_types"]]
    else:
        iv = tc.get("full_attention_interval", 4)
        full = [(i + 1) % iv == 0 for i in range(L)]
    moe = "num_experts" in tc

    x = W[P + "embed_tokens.weight"][ids]
    pos = np.arange(T, dtype=np.float64)
    inv = theta ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    ang = pos[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :]

    def rope(q):  # [T, heads, hd]
        r, rest = q[..., :n_rot], q[..., n_rot:]
        half = n_rot // 2
        rot = np.concatenate([-r[..., half:], r[..., :half]], axis=-1)
        return np.concatenate([r * cos + rot * sin, rest], axis=-1)

    for il in range(L):
        p = f"{P}layers.{il}."
        h = rms(x, W[p + "input_layernorm.weight"], eps, True)
        if full[il]:
            qg = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, nh, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:].reshape(T, nh * hd)
            k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd)
            v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
            q = rope(rms(q, W[p + "self_attn.q_norm.weight"], eps, True))
            k = rope(rms(k, W[p + "self_attn.k_norm.weight"], eps, True))
            g = nh // nkv
            o = np.zeros((T, nh, hd))
            mask = np.triu(np.full((T, T), -np.inf), 1)
            for hh in range(nh):
                s = q[:, hh] @ k[:, hh // g].T / np.sqrt(hd) + mask
                s = np.exp(s - s.max(axis=-1, keepdims=True))
                s /= s.sum(axis=-1, keepdims=True)
                o[:, hh] = s @ v[:, hh // g]
            o = o.reshape(T, nh * hd) * sigmoid(gate)
            x = x + o @ W[p + "self_attn.o_proj.weight"].T
        else:
            qkv = h @ W[p + "linear_attn.in_proj_qkv.weight"].T  # [T, C]
            cw = W[p + "linear_attn.conv1d.weight"].reshape(qkv.shape[1], K)
            xp = np.concatenate([np.zeros((K - 1, qkv.shape[1])), qkv], axis=0)
            y = np.zeros_like(qkv)
            for t in range(T):
                y[t] = np.sum(cw.T * xp[t:t + K], axis=0)
            y = silu(y)
            q = y[:, :Hk * dk].reshape(T, Hk, dk)
            k = y[:, Hk * dk:2 * Hk * dk].reshape(T, Hk, dk)
            v = y[:, 2 * Hk * dk:].reshape(T, Hv, dv)
            z = (h @ W[p + "linear_attn.in_proj_z.weight"].T).reshape(T, Hv, dv)
            b = h @ W[p + "linear_attn.in_proj_b.weight"].T
            aa = h @ W[p + "linear_attn.in_proj_a.weight"].T
            beta = sigmoid(b)
            gdec = -np.exp(W[p + "linear_attn.A_log"]) * softplus(aa + W[p + "linear_attn.dt_bias"])
            q = l2n(q) / np.sqrt(dk)
            k = l2n(k)
            R = Hv // Hk
            S = np.zeros((Hv, dk, dv))
            o = np.zeros((T, Hv, dv))
            for t in range(T):
                for hh in range(Hv):
                    kk, qq = k[t, hh // R], q[t, hh // R]
                    S[hh] *= np.exp(gdec[t, hh])
                    kv = S[hh].T @ kk
                    delta = beta[t, hh] * (v[t, hh] - kv)
                    S[hh] += np.outer(kk, delta)
                    o[t, hh] = S[hh].T @ qq
            o = rms(o, W[p + "linear_attn.norm.weight"], eps, False) * silu(z)
            x = x + o.reshape(T, Hv * dv) @ W[p + "linear_attn.out_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"], eps, True)
        if moe:
            E, topk, I = tc["num_experts"], tc["num_experts_per_tok"], tc["moe_intermediate_size"]
            logits = h @ W[p + "mlp.gate.weight"].T
            pr = np.exp(logits - logits.max(axis=-1, keepdims=True))
            pr /= pr.sum(axis=-1, keepdims=True)
            out = np.zeros_like(h)
            fused = (p + "mlp.experts.gate_up_proj") in W
            for t in range(T):
                sel = np.argsort(-pr[t], kind="stable")[:topk]
                wts = pr[t, sel] / pr[t, sel].sum()
                for e, we in zip(sel, wts):
                    if fused:
                        gu = W[p + "mlp.experts.gate_up_proj"][e] @ h[t]
                        gt, up = gu[:I], gu[I:]
                        dn = W[p + "mlp.experts.down_proj"][e]
                    else:
                        gt = W[p + f"mlp.experts.{e}.gate_proj.weight"] @ h[t]
                        up = W[p + f"mlp.experts.{e}.up_proj.weight"] @ h[t]
                        dn = W[p + f"mlp.experts.{e}.down_proj.weight"]
                    out[t] += we * (dn @ (silu(gt) * up))
            if (p + "mlp.shared_expert.gate_proj.weight") in W:
                sh = (silu(h @ W[p + "mlp.shared_expert.gate_proj.weight"].T) *
                      (h @ W[p + "mlp.shared_expert.up_proj.weight"].T)) @ W[p + "mlp.shared_expert.down_proj.weight"].T
                sg = sigmoid(h @ W[p + "mlp.shared_expert_gate.weight"].reshape(-1, H).T)
                out = out + sg * sh
            x = x + out
        else:
            x = x + (silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)) @ \
                W[p + "mlp.down_proj.weight"].T
    x = rms(x, W[P + "norm.weight"], eps, True)
    lm = W.get("lm_head.weight")
    if lm is None or tc.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)):
        lm = W[P + "embed_tokens.weight"]
    (x @ lm.T).astype("<f4").tofile(a.o)
    return 0


if __name__ == "__main__":
    sys.exit(main())
