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

#include <stddef.h>

/* The state before the token is read from S_in, the state after it written to S_out: the same
 * buffer (in place) or two that do not overlap (a speculative pass runs from the live state into
 * the spare one, a rollback replays from the spare into the live one: model/checkpoint.c); the
 * bits are the same. */
void q35_delta_step(const float *S_in, float *S_out, int dv, int dk, const float *q, const float *k, const float *v,
                    float beta, float decay, float *o);
void q35_delta_step_ref(const float *S_in, float *S_out, int dv, int dk, const float *q, const float *k,
                        const float *v, float beta, float decay, float *o);

/* n consecutive tokens of one head: token i's q, k, v at q + i ld, k + i ld, v + i ld, its beta
 * and decay at beta[i], decay[i], its output at o + i ldo; the state before token 0 is read from
 * S_in, the state after token n - 1 is in S_out (the same buffer or two that do not overlap, as
 * q35_delta_step). The same bits as n q35_delta_step calls: the rows of S are independent, so the
 * SIMD paths run every token on a window of rows (4 groups of 4 rows at AVX2, of 8 at AVX-512)
 * before the next window, which keeps those rows in L1 over the n tokens instead of streaming the
 * whole [dv][dk] state (64 KiB at dk = dv = 128) from L2 for each token. */
void q35_delta_steps(const float *S_in, float *S_out, int dv, int dk, int n, const float *q, const float *k,
                     const float *v, size_t ld, const float *beta, const float *decay, float *o, size_t ldo);
/* the reference: n q35_delta_step_ref calls in token order */
void q35_delta_steps_ref(const float *S_in, float *S_out, int dv, int dk, int n, const float *q, const float *k,
                         const float *v, size_t ld, const float *beta, const float *decay, float *o, size_t ldo);

#endif
