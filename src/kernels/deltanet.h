/*
 * deltanet.h - one token of the gated delta rule for one value head (the hot loop of the
 * Gated DeltaNet layers during decode and prefill).
 *
 * State S is [dv][dk] fp32 (row j = value index, contiguous over the key index). For each row:
 *   S_j  *= decay;   kv = S_j . k;   d = beta * (v_j - kv);   S_j += d * k;   o_j = S_j . q
 * The dot products over dk use 16 partial sums (element a goes to lane a mod 16, with fused
 * multiply-add) reduced by a fixed tree (lane i += lane i+8, then +4, +2, +1). The scalar
 * reference, the AVX2 path (two 8-lane registers) and the AVX-512 path (one 16-lane register)
 * therefore give identical bits, and results never depend on the machine's SIMD level.
 * q35_delta_step runs at q35_simd_active() (base/cpu.h); the reference where dk % 16 != 0.
 */
#ifndef Q35_DELTANET_H
#define Q35_DELTANET_H

/* The state before the token is read from S_in, the state after it written to S_out: the same
 * buffer (in place) or two that do not overlap (a speculative pass runs from the live state into
 * the spare one, a rollback replays from the spare into the live one: model/checkpoint.c); the
 * bits are the same. */
void q35_delta_step(const float *S_in, float *S_out, int dv, int dk, const float *q, const float *k, const float *v,
                    float beta, float decay, float *o);
void q35_delta_step_ref(const float *S_in, float *S_out, int dv, int dk, const float *q, const float *k,
                        const float *v, float beta, float decay, float *o);

#endif
