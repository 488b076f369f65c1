/* quant_avx512.c - AVX-512 (F, BW, VL, VNNI) kernels; see quant.c for the contract. */
#include "quant_internal.h"

void q35_kernels_avx512(q35_kernels *k) { (void)k; }
