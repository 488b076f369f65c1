/*
 * quant.c - the public entry points of the weight kernels (quant.h) and their dispatch.
 *
 * Each SIMD level fills a table of function pointers (q35_kernels, quant_internal.h) with the
 * kernels it has; a level's complete table is its entries over the lower levels', down to the
 * reference (quant_ref.c). The public q35_* entry points go through the table of the active
 * level (q35_simd_active(), base/cpu.h), the _ref ones through the reference table. Both are
 * filled once (pthread_once) and read-only afterwards, so a kernel's result depends on nothing
 * but its inputs.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/quant.h"
#include "kernels/quant_internal.h"
#include "kernels/quant_lowbit.h"

/* Overlay a level's entries onto a table (NULL entries keep what is there). */
static void overlay(q35_kernels *dst, const q35_kernels *src) {
  if (src->q4_0_act) dst->q4_0_act = src->q4_0_act;
  if (src->q8_0_act) dst->q8_0_act = src->q8_0_act;
  if (src->nl_act) dst->nl_act = src->nl_act;
  if (src->q4_k_act) dst->q4_k_act = src->q4_k_act;
  if (src->q4_kr_act) dst->q4_kr_act = src->q4_kr_act;
  if (src->q6_k_act) dst->q6_k_act = src->q6_k_act;
  if (src->q6_kr_act) dst->q6_kr_act = src->q6_kr_act;
  if (src->q2_k_act) dst->q2_k_act = src->q2_k_act;
  if (src->q2_kr_act) dst->q2_kr_act = src->q2_kr_act;
  if (src->q3_k_act) dst->q3_k_act = src->q3_k_act;
  if (src->q3_kr_act) dst->q3_kr_act = src->q3_kr_act;
  for (int t = 0; t < Q35_TYPE_COUNT; t++) {
    if (src->repack[t]) dst->repack[t] = src->repack[t];
    if (src->vec_dot[t]) dst->vec_dot[t] = src->vec_dot[t];
    if (src->quantize[t]) dst->quantize[t] = src->quantize[t];
    if (src->dequantize[t]) dst->dequantize[t] = src->dequantize[t];
    /* a tile kernel must match the table's vec_dot: a level that brings a vec_dot without a
     * tile drops the lower level's tile (the loop over vec_dot takes over) */
    if (src->vec_dot[t]) dst->tile[t] = src->tile[t];
    else if (src->tile[t]) dst->tile[t] = src->tile[t];
    if (src->vec_dot[t]) dst->gemv[t] = src->gemv[t];
    else if (src->gemv[t]) dst->gemv[t] = src->gemv[t];
    if (src->vec_dot[t]) dst->gemv2[t] = src->gemv2[t];
    else if (src->gemv2[t]) dst->gemv2[t] = src->gemv2[t];
  }
}

int q35_kernels_get(q35_simd level, q35_kernels *out) {
  q35_kernels_ref(out);
  q35_kernels_quantize_plain_vec(out); /* every level: the AVX2 / AVX-512 ones replace them below */
  if (level == Q35_SIMD_SCALAR) return 0;
  if (!q35_simd_supported(level) || level > q35_simd_active()) return -1;
  q35_kernels k;
  memset(&k, 0, sizeof k);
#if defined(__x86_64__) || defined(__i386__)
  if (level != Q35_SIMD_AVX2 && level != Q35_SIMD_AVX512) return -1;
  q35_kernels_avx2(&k);
  overlay(out, &k);
  if (level == Q35_SIMD_AVX512) {
    int avx2_repack[Q35_TYPE_COUNT];
    memcpy(avx2_repack, out->repack, sizeof avx2_repack);
    memset(&k, 0, sizeof k);
    q35_kernels_avx512(&k);
    overlay(out, &k);
    /* this level's own kernels read the file's blocks: nothing is repacked (a level that repacks
     * a type sets its entry after this) */
    memset(out->repack, 0, sizeof out->repack);
    /* except the IQ grid types, whose AVX2 kernels on the repacked layouts beat this level's on
     * the file's blocks in decode (in cache and streamed) with prefill within a few percent
     * (docs/PERF.md, issue 16, session 24): the level repacks them at load as AVX2 does and runs
     * the R layouts' AVX2 entries, which this level's table never overrides. Both take Q8_K and
     * give the same bits as this level's plain IQ kernels (test_quant_tile's iq_r_twin), so the
     * level's results do not change, repacked or not.
     * Q2_K and Q3_K likewise, as a whole family: this level's table sets nothing for them, so the
     * plain types keep the AVX2 kernels on Q8_KP (their activation type too) and the rows are
     * repacked as Q2_KR / Q3_KR; repacked or not, the level gives the AVX2 level's bits for them
     * (test_quant_tile's kr_twin). */
    static const int avx2_taken[] = {Q35_TYPE_IQ2_XXS, Q35_TYPE_IQ2_XS, Q35_TYPE_IQ2_S, Q35_TYPE_IQ3_XXS,
                                     Q35_TYPE_IQ3_S,   Q35_TYPE_IQ1_S,  Q35_TYPE_IQ1_M, Q35_TYPE_Q2_K,
                                     Q35_TYPE_Q3_K};
    for (size_t i = 0; i < sizeof avx2_taken / sizeof avx2_taken[0]; i++)
      out->repack[avx2_taken[i]] = avx2_repack[avx2_taken[i]];
    if (out->nl_act == Q35_TYPE_Q8_0Z) {
      /* IQ4_NL / MXFP4 with VBMI likewise (issue 16, session 25): repacked at load as at AVX2;
       * this level's gemv and tiles on the repacked rows (quant_lowbit_avx512.c) decode faster
       * than on the file's blocks, and vec_dot / gemv2 are the AVX2 level's IQ4_NLR / MXFP4R ones.
       * All compute this level's plain kernels' integers and float steps on Q8_0Z, so the same
       * bits, repacked or not (test_quant_tile's z2r_twin). */
      out->repack[Q35_TYPE_IQ4_NL] = avx2_repack[Q35_TYPE_IQ4_NL];
      out->repack[Q35_TYPE_MXFP4] = avx2_repack[Q35_TYPE_MXFP4];
    }
    if (out->q4_0_act != Q35_TYPE_Q8_0Z) {
      /* no VBMI: this level's Q4_0 takes Q8_0X, and AVX2's Q4_0R kernels read Q8_0Z, so Q4_0R
       * (never loaded at this level) keeps the reference entries, which take the table's type */
      q35_kernels r;
      q35_kernels_ref(&r);
      const int t = Q35_TYPE_Q4_0R;
      out->vec_dot[t] = r.vec_dot[t], out->tile[t] = r.tile[t], out->gemv[t] = r.gemv[t], out->gemv2[t] = r.gemv2[t];
    }
    if (out->nl_act != Q35_TYPE_Q8_0Z) {
      /* IQ4_NLR / MXFP4R likewise: AVX2's kernels read Q8_0Z, this level's IQ4_NL / MXFP4 without
       * VBMI take Q8_0X */
      q35_kernels r;
      q35_kernels_ref(&r);
      static const int rt[] = {Q35_TYPE_IQ4_NLR, Q35_TYPE_MXFP4R};
      for (int i = 0; i < 2; i++) {
        const int t = rt[i];
        out->vec_dot[t] = r.vec_dot[t], out->tile[t] = r.tile[t], out->gemv[t] = r.gemv[t], out->gemv2[t] = r.gemv2[t];
      }
    }
  }
#elif defined(__aarch64__)
  if (level != Q35_SIMD_NEON) return -1;
  q35_kernels_neon(&k);
  overlay(out, &k);
#else
  return -1;
#endif
  return 0;
}

/* The dispatch tables (the active level's and the reference): written once under pthread_once,
 * read-only afterwards. */
static q35_kernels g_kernels, g_ref_kernels;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* set once the tables are written: the per-call check stays inline (a decode step makes thousands
 * of kernel calls, and pthread_once is a call into libc each time) */
static atomic_int g_ready;

static void dispatch_init(void) {
  q35_kernels_ref(&g_ref_kernels);
  if (q35_kernels_get(q35_simd_active(), &g_kernels)) q35_kernels_ref(&g_kernels);
  atomic_store_explicit(&g_ready, 1, memory_order_release);
}

static inline void kern_init(void) {
  if (!atomic_load_explicit(&g_ready, memory_order_acquire)) pthread_once(&g_once, dispatch_init);
}

static inline const q35_kernels *kern(void) {
  kern_init();
  return &g_kernels;
}

static inline const q35_kernels *kern_ref(void) {
  kern_init();
  return &g_ref_kernels;
}


int q35_kernels_vec_dot_type(const q35_kernels *k, int type) {
  switch (type) {
  case Q35_TYPE_F32: case Q35_TYPE_F16: case Q35_TYPE_BF16: return type;
  case Q35_TYPE_Q8_0: return k->q8_0_act ? k->q8_0_act : Q35_TYPE_Q8_0Y;
  case Q35_TYPE_Q4_0: case Q35_TYPE_Q4_0R: return k->q4_0_act ? k->q4_0_act : Q35_TYPE_Q8_0X;
  case Q35_TYPE_Q5_0: return Q35_TYPE_Q8_0;
  case Q35_TYPE_Q4_K: return k->q4_k_act ? k->q4_k_act : Q35_TYPE_Q8_K;
  case Q35_TYPE_Q4_KR: return k->q4_kr_act ? k->q4_kr_act : Q35_TYPE_Q8_K;
  case Q35_TYPE_Q6_K: return k->q6_k_act ? k->q6_k_act : Q35_TYPE_Q8_K;
  case Q35_TYPE_Q6_KR: return k->q6_kr_act ? k->q6_kr_act : Q35_TYPE_Q8_K;
  case Q35_TYPE_Q5_K: case Q35_TYPE_IQ4_XS: return Q35_TYPE_Q8_K;
  default: {
    const int t = q35_lowbit_vec_dot_type(k, type);
    return t >= 0 ? t : q35_iq_vec_dot_type(k, type);
  }
  }
}

int q35_vec_dot_type(int type) { return q35_kernels_vec_dot_type(kern(), type); }

int q35_repack_type(int type) {
  const char *e = getenv("Q35_REPACK");
  if (e && !strcmp(e, "0")) return type;
#if !defined(__linux__)
  return type; /* the rewrite moves anonymous memory over the file mapping with mremap (Linux) */
#endif
  return type >= 0 && type < Q35_TYPE_COUNT && kern()->repack[type] ? kern()->repack[type] : type;
}

int q35_unrepack_type(int type) {
  switch (type) {
  case Q35_TYPE_Q4_0R: return Q35_TYPE_Q4_0;
  case Q35_TYPE_Q3_KR: return Q35_TYPE_Q3_K;
  case Q35_TYPE_IQ4_NLR: return Q35_TYPE_IQ4_NL;
  case Q35_TYPE_MXFP4R: return Q35_TYPE_MXFP4;
  case Q35_TYPE_Q5_1R: return Q35_TYPE_Q5_1;
  case Q35_TYPE_Q4_KR: return Q35_TYPE_Q4_K;
  case Q35_TYPE_Q6_KR: return Q35_TYPE_Q6_K;
  case Q35_TYPE_Q2_KR: return Q35_TYPE_Q2_K;
  case Q35_TYPE_IQ2_XXSR: return Q35_TYPE_IQ2_XXS;
  case Q35_TYPE_IQ3_XXSR: return Q35_TYPE_IQ3_XXS;
  case Q35_TYPE_IQ3_SR: return Q35_TYPE_IQ3_S;
  case Q35_TYPE_IQ2_XSR: return Q35_TYPE_IQ2_XS;
  case Q35_TYPE_IQ2_SR: return Q35_TYPE_IQ2_S;
  case Q35_TYPE_IQ1_SR: return Q35_TYPE_IQ1_S;
  case Q35_TYPE_IQ1_MR: return Q35_TYPE_IQ1_M;
  default: return type;
  }
}

/* The _ref entry points take activations in q35_vec_dot_type's layout; where that is not the
 * reference table's own (Q8_0Z for Q4_0 or Q8_0), they read the same Q8_0 blocks into the
 * reference's layout first. Returns x itself or a malloc'ed copy in *tmp (NULL on allocation failure). */
static const void *ref_act(int type, int64_t n, const void *x, size_t xs, int nc, size_t *rxs, void **tmp) {
  *tmp = NULL;
  *rxs = xs;
  const int have = q35_kernels_vec_dot_type(kern(), type), want = q35_kernels_vec_dot_type(kern_ref(), type);
  if (have == want) return x;
  const size_t rs = q35_row_size(want, n);
  uint8_t *o = malloc(rs * (size_t)(nc > 0 ? nc : 1));
  if (!o) return NULL;
  q35_act_convert(have, x, xs, want, o, rs, n, nc);
  *tmp = o;
  *rxs = rs;
  return o;
}

static inline int type_ok(int type) { return type >= 0 && type < Q35_TYPE_COUNT; }

/* Unknown types: dequantize writes zeros, quantize writes nothing, vec_dot returns NaN
 * (callers check q35_type_supported first; these are no-crash fallbacks). */
void q35_dequantize_row(int type, const void *src, float *dst, int64_t n) {
  const q35_kernels *k = kern();
  if (type_ok(type) && k->dequantize[type]) k->dequantize[type](src, dst, n);
  else memset(dst, 0, (size_t)n * sizeof *dst);
}

void q35_dequantize_row_ref(int type, const void *src, float *dst, int64_t n) {
  const q35_kernels *k = kern_ref();
  if (type_ok(type) && k->dequantize[type]) k->dequantize[type](src, dst, n);
  else memset(dst, 0, (size_t)n * sizeof *dst);
}

void q35_quantize_row(int type, const float *src, void *dst, int64_t n) {
  const q35_kernels *k = kern();
  if (type_ok(type) && k->quantize[type]) k->quantize[type](src, dst, n);
}

void q35_quantize_row_ref(int type, const float *src, void *dst, int64_t n) {
  const q35_kernels *k = kern_ref();
  if (type_ok(type) && k->quantize[type]) k->quantize[type](src, dst, n);
}

int q35_type_quantizable(int type) { return type_ok(type) && kern_ref()->quantize[type] != NULL; }

int q35_quantize_row_weighted(int type, const float *src, void *dst, int64_t n, const float *qw) {
  if (!type_ok(type) || !kern_ref()->quantize[type]) return -1;
  if (!qw) {
    q35_quantize_row(type, src, dst, n);
    return 0;
  }
  if (!q35_lowbit_quantize_weighted(type, src, dst, n, qw)) return 0;
  if (!q35_iq_quantize_weighted(type, src, dst, n, qw)) return 0;
  return q35_weights_quantize_weighted(type, src, dst, n, qw);
}

int q35_type_requires_imatrix(int type) {
  return type == Q35_TYPE_IQ2_XXS || type == Q35_TYPE_IQ2_XS || type == Q35_TYPE_IQ1_S;
}

float q35_vec_dot(int type, int64_t n, const void *w, const void *x) {
  const q35_kernels *k = kern();
  return type_ok(type) && k->vec_dot[type] ? k->vec_dot[type](n, w, x) : NAN;
}

float q35_vec_dot_ref(int type, int64_t n, const void *w, const void *x) {
  const q35_kernels *k = kern_ref();
  if (!type_ok(type) || !k->vec_dot[type]) return NAN;
  void *tmp;
  size_t rxs;
  const void *rx = ref_act(type, n, x, 0, 1, &rxs, &tmp);
  const float v = rx ? k->vec_dot[type](n, w, rx) : NAN;
  free(tmp);
  return v;
}

void q35_tile_run(const q35_kernels *k, int type, int64_t n, const void *w, size_t ws, int nr, const void *x,
                  size_t xs, int nc, float *out, size_t ors, size_t ocs) {
  if (nr <= 0 || nc <= 0) return;
  /* one column: the 1 x 1 kernels stream faster than the R x 1 tiles (same bits either way) */
  if (type_ok(type) && k->tile[type] && nc > 1) {
    k->tile[type](n, w, ws, nr, x, xs, nc, out, ors, ocs);
    return;
  }
  if (type_ok(type) && k->gemv[type] && nc == 1) {
    k->gemv[type](n, w, ws, nr, x, xs, 1, out, ors, ocs);
    return;
  }
  const q35_vec_dot_fn f = type_ok(type) ? k->vec_dot[type] : NULL;
  for (int r = 0; r < nr; r++)
    for (int c = 0; c < nc; c++)
      out[(size_t)r * ors + (size_t)c * ocs] =
          f ? f(n, (const char *)w + (size_t)r * ws, (const char *)x + (size_t)c * xs) : NAN;
}

void q35_vec_dot_rows(int type, int64_t n, const void *w, size_t w_stride, int nr, const void *x, float *out) {
  const q35_kernels *k = kern();
  if (nr <= 0) return;
  if (type_ok(type) && k->gemv[type]) {
    k->gemv[type](n, w, w_stride, nr, x, 0, 1, out, 1, 0);
    return;
  }
  const q35_vec_dot_fn f = type_ok(type) ? k->vec_dot[type] : NULL;
  for (int r = 0; r < nr; r++) out[r] = f ? f(n, (const char *)w + (size_t)r * w_stride, x) : NAN;
}

void q35_vec_dot_rows2(int type, int64_t n, const void *wa, const void *wb, size_t w_stride, int nr, const void *x,
                       float *oa, float *ob, size_t out_stride) {
  const q35_kernels *k = kern();
  if (nr <= 0) return;
  if (type_ok(type) && k->gemv2[type]) {
    k->gemv2[type](n, wa, wb, w_stride, nr, x, oa, ob, out_stride);
    return;
  }
  q35_tile_run(k, type, n, wa, w_stride, nr, x, 0, 1, oa, out_stride, 0);
  q35_tile_run(k, type, n, wb, w_stride, nr, x, 0, 1, ob, out_stride, 0);
}

int q35_vec_dot_has_rows2(int type) { return type_ok(type) && kern()->gemv2[type] != NULL; }

void q35_vec_dot_tile(int type, int64_t n, const void *w, size_t w_stride, int nr, const void *x,
                      size_t x_stride, int nc, float *out, size_t out_stride) {
  q35_tile_run(kern(), type, n, w, w_stride, nr, x, x_stride, nc, out, out_stride, 1);
}

void q35_vec_dot_tile_ex(int type, int64_t n, const void *w, size_t w_stride, int nr, const void *x,
                         size_t x_stride, int nc, float *out, size_t out_rs, size_t out_cs) {
  q35_tile_run(kern(), type, n, w, w_stride, nr, x, x_stride, nc, out, out_rs, out_cs);
}

void q35_vec_dot_tile_ref(int type, int64_t n, const void *w, size_t w_stride, int nr, const void *x,
                          size_t x_stride, int nc, float *out, size_t out_stride) {
  void *tmp;
  size_t rxs;
  const void *rx = ref_act(type, n, x, x_stride, nc, &rxs, &tmp);
  if (!rx) {
    for (int r = 0; r < nr; r++)
      for (int c = 0; c < nc; c++) out[(size_t)r * out_stride + c] = NAN;
    return;
  }
  q35_tile_run(kern_ref(), type, n, w, w_stride, nr, rx, rxs, nc, out, out_stride, 1);
  free(tmp);
}
