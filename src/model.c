/*
 * model.c - loading a Qwen3.5 GGUF: hyperparameters from metadata, every tensor bound and
 * shape-checked against them (errors name the tensor), and per-session state.
 *
 * Weights are not copied by default: a q35_tensor points into the read-only map of the file
 * (q35_model_params.no_mmap reads them into anonymous memory at the same addresses instead).
 */
#define _GNU_SOURCE /* mremap */
#include "model.h"

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "quant.h"
#include "util.h"

q35_model_params q35_model_default_params(void) {
  q35_model_params p = {0, 0, 0, 0};
  return p;
}

q35_session_params q35_session_default_params(void) {
  q35_session_params p = {4096, Q35_KV_F16, 0};
  return p;
}

/* ---- hyperparameters ---- */

static int get_u32(const gguf_file *f, const char *arch, const char *key, uint32_t *out, q35_err *err) {
  char k[128];
  snprintf(k, sizeof k, "%s.%s", arch, key);
  return gguf_get_u32(f, k, out, err);
}

static int get_u32_or(const gguf_file *f, const char *arch, const char *key, uint32_t def, uint32_t *out,
                      q35_err *err) {
  char k[128];
  snprintf(k, sizeof k, "%s.%s", arch, key);
  return gguf_get_u32_or(f, k, def, out, err);
}

static int load_hparams(q35_model *m, q35_err *err) {
  const gguf_file *f = m->gguf;
  q35_hparams *hp = &m->hp;
  gguf_str archs;
  if (gguf_get_str(f, "general.architecture", &archs, err)) return -1;
  char arch[32];
  if (gguf_str_eq(archs, "qwen35moe")) {
    hp->is_moe = 1;
  } else if (gguf_str_eq(archs, "qwen35")) {
    hp->is_moe = 0;
  } else {
    return q35_seterr(err, "%s: architecture '%.*s' is not supported (q35 runs qwen35moe and qwen35)", f->path,
                      (int)(archs.len > 64 ? 64 : archs.len), archs.ptr);
  }
  snprintf(arch, sizeof arch, "%s", hp->is_moe ? "qwen35moe" : "qwen35");
  uint32_t v, nextn = 0;
#define REQ(field, key)                                   \
  do {                                                    \
    if (get_u32(f, arch, key, &v, err)) return -1;        \
    hp->field = (int)v;                                   \
  } while (0)
#define OPT(field, key, def)                              \
  do {                                                    \
    if (get_u32_or(f, arch, key, def, &v, err)) return -1; \
    hp->field = (int)v;                                   \
  } while (0)
  REQ(n_layer_all, "block_count");
  REQ(n_embd, "embedding_length");
  REQ(n_head, "attention.head_count");
  REQ(n_head_kv, "attention.head_count_kv");
  REQ(head_dim, "attention.key_length");
  OPT(n_rot, "rope.dimension_count", (uint32_t)hp->head_dim);
  OPT(interval, "full_attention_interval", 4);
  REQ(conv_kernel, "ssm.conv_kernel");
  REQ(ssm_d_state, "ssm.state_size");
  REQ(ssm_n_group, "ssm.group_count");
  REQ(ssm_dt_rank, "ssm.time_step_rank");
  REQ(ssm_d_inner, "ssm.inner_size");
  OPT(n_ctx_train, "context_length", 0);
  if (hp->is_moe) {
    REQ(n_expert, "expert_count");
    REQ(n_expert_used, "expert_used_count");
    REQ(n_ff_exp, "expert_feed_forward_length");
    OPT(n_ff_shexp, "expert_shared_feed_forward_length", 0);
  } else {
    REQ(n_ff, "feed_forward_length");
  }
#undef REQ
#undef OPT
  if (get_u32_or(f, arch, "nextn_predict_layers", 0, &nextn, err)) return -1;
  uint32_t vlen;
  if (get_u32_or(f, arch, "attention.value_length", (uint32_t)hp->head_dim, &vlen, err)) return -1;
  char k[128];
  snprintf(k, sizeof k, "%s.rope.freq_base", arch);
  if (gguf_get_f32_or(f, k, 10000.0f, &hp->rope_theta, err)) return -1;
  snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", arch);
  if (gguf_get_f32_or(f, k, 1e-6f, &hp->eps, err)) return -1;

  /* sanity of the shapes before anything is sized from them */
  const char *bad = NULL;
  if ((int)nextn >= hp->n_layer_all) bad = "nextn_predict_layers must be below block_count";
  hp->n_layer = hp->n_layer_all - (int)nextn;
  if (hp->n_layer < 1 || hp->n_layer > 4096) bad = "block_count out of range";
  else if (hp->n_embd < 1 || hp->n_embd > 65536) bad = "embedding_length out of range";
  else if (hp->n_head < 1 || hp->n_head > 1024 || hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv)
    bad = "attention.head_count must be a positive multiple of attention.head_count_kv";
  else if (hp->head_dim < 2 || hp->head_dim > 4096 || (int)vlen != hp->head_dim)
    bad = "attention.key_length and value_length must be equal and in [2, 4096]";
  else if (hp->n_rot < 2 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
    bad = "rope.dimension_count must be even and at most the head dimension";
  else if (hp->interval < 1) bad = "full_attention_interval must be >= 1";
  else if (hp->conv_kernel < 1 || hp->conv_kernel > 16) bad = "ssm.conv_kernel out of range";
  else if (hp->ssm_d_state < 1 || hp->ssm_d_state > 1024 || hp->ssm_n_group < 1 || hp->ssm_dt_rank < 1 ||
           hp->ssm_dt_rank > 4096 || hp->ssm_dt_rank % hp->ssm_n_group)
    bad = "ssm.time_step_rank must be a positive multiple of ssm.group_count";
  else if (hp->ssm_d_inner != hp->ssm_dt_rank * hp->ssm_d_state)
    bad = "ssm.inner_size must equal ssm.time_step_rank * ssm.state_size (value head dim = key head dim)";
  else if (hp->is_moe && (hp->n_expert < 1 || hp->n_expert > 4096 || hp->n_expert_used < 1 ||
                          hp->n_expert_used > hp->n_expert || hp->n_ff_exp < 1 || hp->n_ff_shexp < 0))
    bad = "expert_count / expert_used_count / expert_feed_forward_length out of range";
  else if (!hp->is_moe && (hp->n_ff < 1 || hp->n_ff > 1 << 20)) bad = "feed_forward_length out of range";
  else if (!(hp->rope_theta > 0) || !(hp->eps > 0) || !isfinite(hp->rope_theta) || !isfinite(hp->eps))
    bad = "rope.freq_base and layer_norm_rms_epsilon must be positive";
  if (bad) return q35_seterr(err, "%s: bad hyperparameters: %s", f->path, bad);
  return 0;
}

/* ---- tensors ---- */

static int bind(q35_model *m, q35_tensor *t, const char *name, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                int optional, int need_f32, q35_err *err) {
  const gguf_tensor *g = gguf_find_tensor(m->gguf, name);
  memset(t, 0, sizeof *t);
  if (!g) {
    if (optional) return 0;
    return q35_seterr(err, "%s: tensor '%s' is missing", m->gguf->path, name);
  }
  int64_t want[4] = {ne0, ne1, ne2, 1};
  int64_t got_ne1 = g->ne[1], got_ne2 = g->ne[2];
  int ok = g->ne[0] == want[0] && got_ne1 == want[1] && got_ne2 == want[2] && g->ne[3] == 1;
  if (!ok) {
    char ws[96];
    if (n_dims == 1) snprintf(ws, sizeof ws, "{%lld}", (long long)ne0);
    else if (n_dims == 2) snprintf(ws, sizeof ws, "{%lld, %lld}", (long long)ne0, (long long)ne1);
    else snprintf(ws, sizeof ws, "{%lld, %lld, %lld}", (long long)ne0, (long long)ne1, (long long)ne2);
    return q35_seterr(err, "%s: tensor '%s' has shape {%lld, %lld, %lld, %lld}, expected %s from the metadata",
                      m->gguf->path, name, (long long)g->ne[0], (long long)g->ne[1], (long long)g->ne[2],
                      (long long)g->ne[3], ws);
  }
  if (need_f32 && g->type != Q35_TYPE_F32)
    return q35_seterr(err, "%s: tensor '%s' has type %s; q35 needs f32 for it (as llama.cpp's converter writes it)",
                      m->gguf->path, name, q35_type_name(g->type));
  if (!q35_type_supported(g->type))
    return q35_seterr(err, "%s: tensor '%s' has unsupported type %d", m->gguf->path, name, g->type);
  if (g->ne[0] % q35_type_block(g->type))
    return q35_seterr(err, "%s: tensor '%s': row length %lld is not a multiple of the %s block size %d",
                      m->gguf->path, name, (long long)g->ne[0], q35_type_name(g->type), q35_type_block(g->type));
  t->data = g->data;
  t->type = g->type;
  for (int i = 0; i < 4; i++) t->ne[i] = g->ne[i];
  t->nb1 = q35_row_size(g->type, g->ne[0]);
  t->nb2 = t->nb1 * (size_t)g->ne[1];
  t->name = NULL;
  return 0;
}

static int load_tensors(q35_model *m, q35_err *err) {
  const q35_hparams *hp = &m->hp;
  const int H = hp->n_embd, V = hp->n_vocab;
  char name[96];
  if (bind(m, &m->tok_embd, "token_embd.weight", 2, H, V, 1, 0, 0, err)) return -1;
  if (bind(m, &m->output_norm, "output_norm.weight", 1, H, 1, 1, 0, 1, err)) return -1;
  if (bind(m, &m->output, "output.weight", 2, H, V, 1, 1, 0, err)) return -1;
  if (!m->output.data) m->output = m->tok_embd; /* tied */
  const int hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv;
  const int Hk = hp->ssm_n_group, Hv = hp->ssm_dt_rank, dk = hp->ssm_d_state, dv = hp->ssm_d_state;
  const int C = 2 * Hk * dk + Hv * dv;
  m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
  if (!m->layers) return q35_seterr(err, "out of memory");
#define B(field, nm, nd, a, b, c, opt, f32)                                   \
  do {                                                                        \
    snprintf(name, sizeof name, "blk.%d.%s", il, nm);                         \
    if (bind(m, &L->field, name, nd, a, b, c, opt, f32, err)) return -1;      \
  } while (0)
  for (int il = 0; il < hp->n_layer; il++) {
    q35_layer *L = &m->layers[il];
    L->is_attn = (il + 1) % hp->interval == 0;
    L->attn_index = L->is_attn ? m->n_attn_layers++ : m->n_gdn_layers++;
    B(attn_norm, "attn_norm.weight", 1, H, 1, 1, 0, 1);
    B(post_norm, "post_attention_norm.weight", 1, H, 1, 1, 0, 1);
    if (L->is_attn) {
      B(wq, "attn_q.weight", 2, H, nh * hd * 2, 1, 0, 0);
      B(wk, "attn_k.weight", 2, H, nkv * hd, 1, 0, 0);
      B(wv, "attn_v.weight", 2, H, nkv * hd, 1, 0, 0);
      B(wo, "attn_output.weight", 2, nh * hd, H, 1, 0, 0);
      B(q_norm, "attn_q_norm.weight", 1, hd, 1, 1, 0, 1);
      B(k_norm, "attn_k_norm.weight", 1, hd, 1, 1, 0, 1);
    } else {
      B(wqkv, "attn_qkv.weight", 2, H, C, 1, 0, 0);
      B(wz, "attn_gate.weight", 2, H, Hv * dv, 1, 0, 0);
      B(wbeta, "ssm_beta.weight", 2, H, Hv, 1, 0, 0);
      B(walpha, "ssm_alpha.weight", 2, H, Hv, 1, 0, 0);
      B(conv, "ssm_conv1d.weight", 2, hp->conv_kernel, C, 1, 0, 1);
      B(dt_bias, "ssm_dt.bias", 1, Hv, 1, 1, 0, 1);
      B(ssm_a, "ssm_a", 1, Hv, 1, 1, 0, 1);
      B(ssm_norm, "ssm_norm.weight", 1, dv, 1, 1, 0, 1);
      B(ssm_out, "ssm_out.weight", 2, Hv * dv, H, 1, 0, 0);
    }
    if (hp->is_moe) {
      const int E = hp->n_expert, I = hp->n_ff_exp, Is = hp->n_ff_shexp;
      B(router, "ffn_gate_inp.weight", 2, H, E, 1, 0, 0);
      B(gate_up_exps, "ffn_gate_up_exps.weight", 3, H, 2 * I, E, 1, 0);
      if (!L->gate_up_exps.data) {
        B(gate_exps, "ffn_gate_exps.weight", 3, H, I, E, 0, 0);
        B(up_exps, "ffn_up_exps.weight", 3, H, I, E, 0, 0);
        if (L->gate_exps.type != L->up_exps.type)
          return q35_seterr(err, "%s: blk.%d: ffn_gate_exps and ffn_up_exps must have the same type",
                            m->gguf->path, il);
      }
      B(down_exps, "ffn_down_exps.weight", 3, I, H, E, 0, 0);
      if (Is > 0) {
        B(gate_shexp, "ffn_gate_shexp.weight", 2, H, Is, 1, 0, 0);
        B(up_shexp, "ffn_up_shexp.weight", 2, H, Is, 1, 0, 0);
        B(down_shexp, "ffn_down_shexp.weight", 2, Is, H, 1, 0, 0);
        B(shexp_gate, "ffn_gate_inp_shexp.weight", 1, H, 1, 1, 1, 0);
      }
    } else {
      B(ffn_gate, "ffn_gate.weight", 2, H, hp->n_ff, 1, 0, 0);
      B(ffn_up, "ffn_up.weight", 2, H, hp->n_ff, 1, 0, 0);
      B(ffn_down, "ffn_down.weight", 2, hp->n_ff, H, 1, 0, 0);
    }
  }
#undef B
  return 0;
}

/* Bytes of the mapping that starts at `map` mapped with PMD (2 MiB) entries, from
 * /proc/self/smaps ("FilePmdMapped:"); -1 where the kernel does not say. */
static long long file_pmd_mapped(const void *map) {
  FILE *fp = fopen("/proc/self/smaps", "r");
  if (!fp) return -1;
  char line[512];
  int in = 0;
  long long kb = -1;
  while (fgets(line, sizeof line, fp)) {
    unsigned long a, b;
    if (sscanf(line, "%lx-%lx ", &a, &b) == 2) { /* a mapping's header line; field lines fail at ':' */
      if (in) break;
      in = a == (unsigned long)(uintptr_t)map;
      continue;
    }
    if (in && sscanf(line, "FilePmdMapped: %lld kB", &kb) == 1) break;
  }
  fclose(fp);
  return kb < 0 ? -1 : kb * 1024;
}

#define HUGE_SZ ((size_t)2 << 20)

/* PAGEMAP_SCAN (Linux 6.7+; linux/fs.h), spelled out for older headers: the kernel's ABI. */
struct pm_region {
  uint64_t start, end, categories;
};
struct pm_scan {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted, category_mask,
      category_anyof_mask, return_mask;
};
#define PM_SCAN_IOCTL _IOWR('f', 16, struct pm_scan)
#define PM_PAGE_IS_HUGE (1u << 6)

typedef struct {
  size_t *off, *len; /* stretches of the map, 2 MiB aligned */
  size_t n, cap;
} ranges;

/* The stretches of [lo, hi) (2 MiB-aligned offsets into f->map) not mapped with PMD entries,
 * widened to 2 MiB boundaries; -1 where the kernel has no PAGEMAP_SCAN. */
static int small_ranges(const gguf_file *f, size_t lo, size_t hi, ranges *r) {
  r->n = 0;
  const int fd = open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) return -1;
  struct pm_region vec[256];
  struct pm_scan a;
  memset(&a, 0, sizeof a);
  a.start = (uint64_t)(uintptr_t)(f->map + lo);
  a.end = (uint64_t)(uintptr_t)(f->map + hi);
  int rc = 0;
  while (a.start < a.end) {
    a.size = sizeof a;
    a.vec = (uint64_t)(uintptr_t)vec;
    a.vec_len = sizeof vec / sizeof vec[0];
    a.category_inverted = a.category_mask = a.return_mask = PM_PAGE_IS_HUGE; /* pages NOT huge */
    const long got = ioctl(fd, PM_SCAN_IOCTL, &a);
    if (got < 0) {
      rc = -1;
      break;
    }
    for (long i = 0; i < got; i++) {
      size_t o = (size_t)(vec[i].start - (uint64_t)(uintptr_t)f->map) & ~(HUGE_SZ - 1);
      size_t e = ((size_t)(vec[i].end - (uint64_t)(uintptr_t)f->map) + HUGE_SZ - 1) & ~(HUGE_SZ - 1);
      if (o < lo) o = lo;
      if (e > hi) e = hi;
      if (e <= o) continue;
      if (r->n && r->off[r->n - 1] + r->len[r->n - 1] >= o) { /* touches the previous stretch */
        const size_t pe = r->off[r->n - 1] + r->len[r->n - 1];
        if (e > pe) r->len[r->n - 1] += e - pe;
        continue;
      }
      if (r->n == r->cap) {
        const size_t c = r->cap ? 2 * r->cap : 64;
        size_t *no = realloc(r->off, c * sizeof *no);
        if (!no) { rc = -1; break; }
        r->off = no;
        size_t *nl = realloc(r->len, c * sizeof *nl);
        if (!nl) { rc = -1; break; }
        r->len = nl;
        r->cap = c;
      }
      r->off[r->n] = o;
      r->len[r->n++] = e - o;
    }
    if (rc || a.walk_end <= a.start) break;
    a.start = a.walk_end;
  }
  close(fd);
  return rc;
}

/* Drop the page-cache copy of [off, off + len) of the file (which this mapping maps at the same
 * offsets) and fault it in again through the mapping: with MADV_HUGEPAGE the fault path reads
 * whole 2 MiB folios, which the kernel then maps with one PMD entry each. Pages another process
 * has mapped, or dirty ones, stay as they are (fadvise leaves them). */
static void reread_range(const gguf_file *f, int fd, size_t off, size_t len) {
  madvise((void *)(f->map + off), len, MADV_DONTNEED); /* our PTEs only; a shared file map keeps its data */
  posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
#ifdef MADV_POPULATE_READ
  if (madvise((void *)(f->map + off), len, MADV_POPULATE_READ) == 0) return;
#endif
  volatile unsigned char sink = 0;
  for (size_t o = off; o < off + len; o += 4096) sink ^= f->map[o];
  (void)sink;
}

/* Map every page of the (read-only, shared) file into our page tables now: otherwise each
 * 4 KiB page costs a minor fault the first time a token touches it, which dominates the first
 * hundreds of decode steps of a large MoE model (each step reaches new experts). This copies
 * nothing; pages not yet in the page cache are read from disk here instead of mid-generation.
 *
 * Huge pages (unless params.no_huge): decode streams gigabytes of weights per token, and with
 * 4 KiB pages every 4 KiB costs a TLB fill -- a two-dimensional page walk under a hypervisor.
 * Measured on this project's 2-core VM (8-layer Q4_0 file): 50 tok/s with 4 KiB pages against
 * 69 with the same bytes copied into memory, and 73 once the file is mapped with 2 MiB entries.
 * Kernels with large page-cache folios (ext4 since 6.16, XFS, tmpfs) map a file with PMD entries
 * when its cached folios are 2 MiB: MADV_HUGEPAGE makes the fault path read 2 MiB folios, but a
 * file already cached in small folios (written by an exporter, read with read(), partly evicted
 * and read back) stays small. So: populate; find the 2 MiB ranges not PMD-mapped (PAGEMAP_SCAN;
 * on older kernels, the VMA's FilePmdMapped total decides between all and nothing); re-read one
 * as a trial, and if it came back PMD-mapped, re-read the rest the same way (the page cache
 * keeps the large folios for later loads, so this happens once per file and eviction). */
static long long prefault(const gguf_file *f, int huge, int progress) {
  const size_t size = f->size;
  if (huge) madvise((void *)f->map, size, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_READ
  if (madvise((void *)f->map, size, MADV_POPULATE_READ) != 0)
#endif
  {
    /* older kernels: touch one byte per page */
    volatile unsigned char sink = 0;
    const long page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    for (size_t off = 0; off < size; off += (size_t)page) sink ^= f->map[off];
    (void)sink;
  }
  if (!huge || ((uintptr_t)f->map & (HUGE_SZ - 1))) return file_pmd_mapped(f->map);
  /* the whole 2 MiB ranges inside the file, from the one after the header on */
  const size_t lo = (f->data_offset + HUGE_SZ - 1) & ~(HUGE_SZ - 1), hi = size & ~(HUGE_SZ - 1);
  long long pmd = file_pmd_mapped(f->map);
  if (pmd < 0 || hi < lo + 2 * HUGE_SZ) return pmd;
  ranges r = {0};
  if (small_ranges(f, lo, hi, &r) != 0) { /* no PAGEMAP_SCAN: all or nothing, on the total */
    r.n = 0;
    if ((size_t)pmd < (hi - lo) / 2 && (r.off || (r.off = malloc(sizeof *r.off))) &&
        (r.len || (r.len = malloc(sizeof *r.len)))) {
      r.off[0] = lo;
      r.len[0] = hi - lo;
      r.n = 1;
    }
  }
  const int fd = r.n ? open(f->path, O_RDONLY) : -1;
  if (fd >= 0) {
    /* the trial: the first small range's first 2 MiB */
    const long long before = file_pmd_mapped(f->map);
    reread_range(f, fd, r.off[0], HUGE_SZ);
    if (file_pmd_mapped(f->map) >= before + (long long)HUGE_SZ) {
      if (progress) {
        size_t total = 0;
        for (size_t i = 0; i < r.n; i++) total += r.len[i];
        if (total >= ((size_t)64 << 20))
          fprintf(stderr, "re-reading %.2f GiB of the file cached in small pages, in 2 MiB pages (once; "
                          "--no-huge-pages skips this)\n", (double)total / (1u << 30));
      }
      if (r.len[0] > HUGE_SZ) reread_range(f, fd, r.off[0] + HUGE_SZ, r.len[0] - HUGE_SZ);
      for (size_t i = 1; i < r.n; i++) reread_range(f, fd, r.off[i], r.len[i]);
    }
    close(fd);
    pmd = file_pmd_mapped(f->map);
  }
  free(r.off);
  free(r.len);
  return pmd;
}

/* --no-mmap: the file's bytes into anonymous memory, then moved over the file mapping at the same
 * address with mremap, so every pointer into the map stays valid. It was the fast mode on this
 * project's VMs while the file mapping used 4 KiB pages (1-thread decode 26 -> 54 tok/s); with
 * the 2 MiB-page mapping (prefault) the default mmap decodes as fast or faster, without a copy. */
static int load_into_memory(gguf_file *f, const char *path, q35_err *err) {
  const size_t size = f->size;
  uint8_t *a = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a == MAP_FAILED) {
    q35_seterr(err, "%s: cannot allocate %.2f GiB to read the weights into memory (--no-mmap)", path,
               (double)size / (1u << 30));
    return -1;
  }
  /* no MADV_HUGEPAGE: on a 2-core VM khugepaged's background collapsing took a core from the
   * forward pass (2-thread decode fell 5x). Asking before the reads and withdrawing the advice
   * after them (2 MiB pages from the faults, nothing left for khugepaged) got 99% of the copy in
   * 2 MiB pages but decoded slower than 4 KiB pages here (8-layer Q4_0: 30-54 vs 51-66 tok/s,
   * alternating runs); the file mapping's 2 MiB page-cache folios are the fast path. */
  int fd = open(path, O_RDONLY);
  size_t done = 0;
  while (fd >= 0 && done < size) {
    const ssize_t r = pread(fd, a + done, size - done > (1u << 30) ? (1u << 30) : size - done, (off_t)done);
    if (r <= 0) break;
    done += (size_t)r;
  }
  if (fd >= 0) close(fd);
  if (done != size) {
    munmap(a, size);
    q35_seterr(err, "%s: reading the weights into memory failed after %zu of %zu bytes", path, done, size);
    return -1;
  }
  if (mprotect(a, size, PROT_READ) != 0 ||
      mremap(a, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)(uintptr_t)f->map) == MAP_FAILED) {
    munmap(a, size);
    q35_seterr(err, "%s: cannot move the weights read into memory over the file mapping", path);
    return -1;
  }
  return 0;
}

q35_model *q35_model_load(const char *path, const q35_model_params *params, q35_err *err) {
  q35_model_params dp = q35_model_default_params();
  if (!params) params = &dp;
  double t0 = q35_now();
  q35_model *m = calloc(1, sizeof *m);
  if (!m) {
    q35_seterr(err, "out of memory");
    return NULL;
  }
  if (params->progress) fprintf(stderr, "loading %s ...\n", path);
  m->gguf = gguf_open(path, err);
  if (!m->gguf) goto fail;
  if (params->no_mmap && load_into_memory(m->gguf, path, err)) goto fail;
  if (load_hparams(m, err)) goto fail;
  {
    const gguf_tensor *te = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te) {
      q35_seterr(err, "%s: tensor 'token_embd.weight' is missing", path);
      goto fail;
    }
    m->hp.n_vocab = (int)te->ne[1];
    const gguf_kv *tok = gguf_find(m->gguf, "tokenizer.ggml.tokens");
    if (tok && tok->type == GGUF_ARRAY && tok->arr_n != (uint64_t)te->ne[1]) {
      q35_seterr(err, "%s: the vocabulary has %llu tokens but token_embd.weight has %lld rows", path,
                 (unsigned long long)tok->arr_n, (long long)te->ne[1]);
      goto fail;
    }
  }
  if (load_tensors(m, err)) goto fail;
  if (!params->no_mmap) m->huge_bytes = prefault(m->gguf, !params->no_huge, params->progress);
  int nt = params->n_threads;
  if (nt <= 0) nt = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (nt <= 0) nt = 1;
  if (nt > 256) nt = 256;
  m->pool = q35_pool_new(nt);
  if (!m->pool) {
    q35_seterr(err, "cannot start %d threads", nt);
    goto fail;
  }
  snprintf(m->desc, sizeof m->desc, "%s: %d layers (%d attention, %d DeltaNet), embd %d, vocab %d%s, %s FFN weights",
           m->hp.is_moe ? "qwen35moe" : "qwen35", m->hp.n_layer, m->n_attn_layers, m->n_gdn_layers, m->hp.n_embd,
           m->hp.n_vocab, m->output.data == m->tok_embd.data ? ", tied output" : "",
           q35_type_name(m->hp.is_moe ? m->layers[0].down_exps.type : m->layers[0].ffn_down.type));
  if (params->progress) fprintf(stderr, "loaded %s in %.2f s\n", m->desc, q35_now() - t0);
  return m;
fail:
  q35_model_free(m);
  return NULL;
}

void q35_model_free(q35_model *m) {
  if (!m) return;
  if (m->pool) q35_pool_free(m->pool);
  q35_model_free_step(m);
  free(m->layers);
  free(m->scratch);
  gguf_close(m->gguf);
  free(m);
}

int32_t q35_model_n_vocab(const q35_model *m) { return m->hp.n_vocab; }
int32_t q35_model_n_threads(const q35_model *m) { return q35_pool_size(m->pool); }
const char *q35_model_desc(const q35_model *m) { return m->desc; }
long long q35_model_huge_bytes(const q35_model *m) { return m->huge_bytes; }

/* ---- sessions ---- */

static const char *fmt_bytes(char *b, size_t n, uint64_t x) {
  if (x >= (1ull << 30)) snprintf(b, n, "%.2f GiB", x / 1073741824.0);
  else if (x >= (1ull << 20)) snprintf(b, n, "%.2f MiB", x / 1048576.0);
  else snprintf(b, n, "%llu bytes", (unsigned long long)x);
  return b;
}

uint64_t q35_session_state_bytes(const q35_model *m, const q35_session_params *p, uint64_t *recurrent) {
  const q35_hparams *hp = &m->hp;
  if (recurrent) *recurrent = 0;
  if (p->n_ctx < 1 || (p->kv_type != Q35_KV_F32 && p->kv_type != Q35_KV_F16 && p->kv_type != Q35_KV_Q8_0)) return 0;
  const uint64_t kv_row = q35_row_size(p->kv_type, (int64_t)hp->n_head_kv * hp->head_dim);
  const uint64_t C = 2 * (uint64_t)hp->ssm_n_group * hp->ssm_d_state + (uint64_t)hp->ssm_d_inner;
  const uint64_t rec = ((uint64_t)(hp->conv_kernel - 1) * C + (uint64_t)hp->ssm_dt_rank * hp->ssm_d_state *
                        hp->ssm_d_state) * sizeof(float) * (uint64_t)m->n_gdn_layers;
  if (recurrent) *recurrent = rec;
  return 2 * kv_row * (uint64_t)p->n_ctx * (uint64_t)m->n_attn_layers + rec;
}

q35_session *q35_session_new(q35_model *m, const q35_session_params *params, q35_err *err) {
  q35_session_params dp = q35_session_default_params();
  if (!params) params = &dp;
  const q35_hparams *hp = &m->hp;
  if (params->n_ctx < 1 || params->n_ctx > (1 << 24)) {
    q35_seterr(err, "context size %d is out of range [1, %d]", params->n_ctx, 1 << 24);
    return NULL;
  }
  int kvt = params->kv_type;
  if (kvt != Q35_KV_F32 && kvt != Q35_KV_F16 && kvt != Q35_KV_Q8_0) {
    q35_seterr(err, "KV cache type %d is not supported (f32, f16, q8_0)", kvt);
    return NULL;
  }
  const int64_t kv_width = (int64_t)hp->n_head_kv * hp->head_dim;
  if (kvt == Q35_KV_Q8_0 && hp->head_dim % 32) {
    q35_seterr(err, "KV cache type q8_0 needs the head dimension (%d) to be a multiple of 32", hp->head_dim);
    return NULL;
  }
  const uint64_t need = q35_session_state_bytes(m, params, NULL);
  if (params->mem_budget && need > params->mem_budget) {
    char a[32], b[32];
    q35_seterr(err, "the session needs %s of KV/state for --ctx %d, the memory budget is %s; lower --ctx or raise "
               "--mem-budget", fmt_bytes(a, sizeof a, need), params->n_ctx, fmt_bytes(b, sizeof b, params->mem_budget));
    return NULL;
  }
  q35_session *s = calloc(1, sizeof *s);
  if (!s) goto oom;
  s->model = m;
  s->params = *params;
  s->kv_row_bytes = q35_row_size(kvt, kv_width);
  s->k_cache = calloc((size_t)m->n_attn_layers + 1, sizeof(void *));
  s->v_cache = calloc((size_t)m->n_attn_layers + 1, sizeof(void *));
  s->conv_state = calloc((size_t)m->n_gdn_layers + 1, sizeof(float *));
  s->ssm_state = calloc((size_t)m->n_gdn_layers + 1, sizeof(float *));
  if (!s->k_cache || !s->v_cache || !s->conv_state || !s->ssm_state) goto oom;
  const size_t kv_bytes = s->kv_row_bytes * (size_t)params->n_ctx;
  for (int i = 0; i < m->n_attn_layers; i++) {
    s->k_cache[i] = q35_alloc64(kv_bytes, 0);
    s->v_cache[i] = q35_alloc64(kv_bytes, 0);
    if (!s->k_cache[i] || !s->v_cache[i]) goto oom;
    s->bytes += 2 * kv_bytes;
  }
  const int C = 2 * hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
  const size_t conv_n = (size_t)(hp->conv_kernel - 1) * C, ssm_n = (size_t)hp->ssm_dt_rank * hp->ssm_d_state *
                                                                      hp->ssm_d_state;
  for (int i = 0; i < m->n_gdn_layers; i++) {
    s->conv_state[i] = q35_alloc64((conv_n + 1) * sizeof(float), 1);
    s->ssm_state[i] = q35_alloc64(ssm_n * sizeof(float), 1);
    if (!s->conv_state[i] || !s->ssm_state[i]) goto oom;
    s->bytes += (conv_n + ssm_n) * sizeof(float);
  }
  return s;
oom:
  q35_session_free(s);
  q35_seterr(err, "out of memory allocating the session state (context %d)", params->n_ctx);
  return NULL;
}

void q35_session_reset(q35_session *s) {
  const q35_hparams *hp = &s->model->hp;
  const int C = 2 * hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
  for (int i = 0; i < s->model->n_gdn_layers; i++) {
    memset(s->conv_state[i], 0, (size_t)(hp->conv_kernel - 1) * C * sizeof(float));
    memset(s->ssm_state[i], 0, (size_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state * sizeof(float));
  }
  s->pos = 0;
}

void q35_session_free(q35_session *s) {
  if (!s) return;
  q35_model *m = s->model;
  for (int i = 0; m && i < m->n_attn_layers; i++) {
    if (s->k_cache) free(s->k_cache[i]);
    if (s->v_cache) free(s->v_cache[i]);
  }
  for (int i = 0; m && i < m->n_gdn_layers; i++) {
    if (s->conv_state) free(s->conv_state[i]);
    if (s->ssm_state) free(s->ssm_state[i]);
  }
  free(s->k_cache);
  free(s->v_cache);
  free(s->conv_state);
  free(s->ssm_state);
  free(s);
}

int32_t q35_session_pos(const q35_session *s) { return s->pos; }
int32_t q35_session_n_ctx(const q35_session *s) { return s->params.n_ctx; }
size_t q35_session_bytes(const q35_session *s) { return s->bytes; }

int q35_session_eval(q35_session *s, const int32_t *tokens, int32_t n, int32_t chunk, float *logits, int all,
                     q35_err *err) {
  if (n < 1) return q35_seterr(err, "no tokens to evaluate");
  if (chunk <= 0 || chunk > n) chunk = n;
  const int V = s->model->hp.n_vocab;
  /* validate everything before the first chunk runs, so a refused call leaves the session as it was */
  if ((int64_t)s->pos + n > s->params.n_ctx)
    return q35_seterr(err, "%d tokens at position %d exceed the context limit of %d tokens (raise --ctx)", n, s->pos,
                      s->params.n_ctx);
  for (int32_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= V) return q35_seterr(err, "token id %d is out of range [0, %d)", tokens[i], V);
  for (int32_t i = 0; i < n; i += chunk) {
    int32_t c = n - i < chunk ? n - i : chunk;
    int last = i + c == n;
    q35_fwd_row r = {s, tokens + i, c, 0, NULL};
    if (logits && all) {
      r.want = 2;
      r.logits = logits + (size_t)i * V;
    } else if (logits && last) {
      r.want = 1;
      r.logits = logits;
    }
    if (q35_forward(s->model, &r, 1, err)) return -1;
  }
  return 0;
}

/* ---- snapshots ---- */

struct q35_snapshot {
  const q35_model *model;
  int32_t pos;
  size_t conv_n, ssm_n; /* floats per DeltaNet layer */
  float *data;          /* [n_gdn][conv_n + ssm_n] */
};

q35_snapshot *q35_session_snapshot(const q35_session *s, q35_err *err) {
  const q35_hparams *hp = &s->model->hp;
  const int C = 2 * hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
  q35_snapshot *p = calloc(1, sizeof *p);
  if (!p) goto oom;
  p->model = s->model;
  p->pos = s->pos;
  p->conv_n = (size_t)(hp->conv_kernel - 1) * C;
  p->ssm_n = (size_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state;
  const int n = s->model->n_gdn_layers;
  p->data = malloc((p->conv_n + p->ssm_n) * (size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p->data) goto oom;
  for (int i = 0; i < n; i++) {
    float *d = p->data + (p->conv_n + p->ssm_n) * i;
    memcpy(d, s->conv_state[i], p->conv_n * sizeof(float));
    memcpy(d + p->conv_n, s->ssm_state[i], p->ssm_n * sizeof(float));
  }
  return p;
oom:
  q35_snapshot_free(p);
  q35_seterr(err, "out of memory (session snapshot)");
  return NULL;
}

int q35_session_restore(q35_session *s, const q35_snapshot *p, q35_err *err) {
  if (p->model != s->model) return q35_seterr(err, "the snapshot belongs to another model");
  if (p->pos > s->params.n_ctx) return q35_seterr(err, "the snapshot's position %d is past the context", p->pos);
  for (int i = 0; i < s->model->n_gdn_layers; i++) {
    const float *d = p->data + (p->conv_n + p->ssm_n) * i;
    memcpy(s->conv_state[i], d, p->conv_n * sizeof(float));
    memcpy(s->ssm_state[i], d + p->conv_n, p->ssm_n * sizeof(float));
  }
  s->pos = p->pos;
  return 0;
}

int32_t q35_snapshot_pos(const q35_snapshot *p) { return p->pos; }
size_t q35_snapshot_bytes(const q35_snapshot *p) {
  return sizeof *p + (p->conv_n + p->ssm_n) * (size_t)p->model->n_gdn_layers * sizeof(float);
}
void q35_snapshot_free(q35_snapshot *p) {
  if (!p) return;
  free(p->data);
  free(p);
}
