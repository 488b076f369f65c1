/* quant_avx2.c - the AVX2 (+FMA, F16C) kernels: quant_simd.inc compiled with maddubs/madd
 * integer dot products. Selected at run time by quant.c when the CPU has AVX2, FMA and F16C. */
#define QS_TARGET __attribute__((target("avx2,fma,f16c")))
#define QS_VNNI 0
#include "kernels/quant_simd.inc"

void q35_kernels_avx2(q35_kernels *k) { qs_fill_256(k); }
