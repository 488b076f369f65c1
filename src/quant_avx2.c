/* quant_avx2.c - AVX2 (+FMA, F16C) kernels; see quant.c for the contract. */
#include "quant_internal.h"

void q35_kernels_avx2(q35_kernels *k) { (void)k; }
