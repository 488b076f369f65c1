/*
 * quant_avx512.c - the AVX-512 (F, BW, VL, VNNI) kernels. quant_simd.inc compiled with
 * VNNI (vpdpbusd / vpdpwssd on 256-bit vectors: no int16 saturation anywhere), plus
 * 512-bit kernels where the wider vectors pay (float types, Q8_0, Q4_0).
 */
#define QS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define QS_VNNI 1
#include "quant_simd.inc"

void q35_kernels_avx512(q35_kernels *k) { qs_fill_256(k); }
