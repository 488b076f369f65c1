/*
 * mapping.c - how the weight file sits in memory: the read-only file mapping populated with
 * 2 MiB pages where the kernel can (prefault), or, with no_mmap, a copy in anonymous memory
 * moved over the mapping's address so every tensor pointer stays valid.
 */
#define _GNU_SOURCE /* mremap */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/util.h"
#include "model/model.h"

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

/* The same summed over every mapping that starts in [map, map + size) (a stage's kept pieces). */
static long long pmd_mapped_within(const uint8_t *map, size_t size) {
  FILE *fp = fopen("/proc/self/smaps", "r");
  if (!fp) return -1;
  char line[512];
  int in = 0;
  long long kb, total = -1;
  while (fgets(line, sizeof line, fp)) {
    unsigned long a, b;
    if (sscanf(line, "%lx-%lx ", &a, &b) == 2) {
      in = a >= (unsigned long)(uintptr_t)map && a < (unsigned long)(uintptr_t)(map + size);
      continue;
    }
    if (in && sscanf(line, "FilePmdMapped: %lld kB", &kb) == 1) total = (total < 0 ? 0 : total) + kb;
  }
  fclose(fp);
  return total < 0 ? -1 : total * 1024;
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
#ifdef POSIX_FADV_DONTNEED
  posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
#else
  (void)fd;
#endif
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
 * 4 KiB pages every 4 KiB costs a TLB fill -- a two-dimensional page walk under a hypervisor
 * (docs/PERF.md has the figures). Kernels with large page-cache folios (ext4 since 6.16, XFS, tmpfs) map a file with PMD entries
 * when its cached folios are 2 MiB: MADV_HUGEPAGE makes the fault path read 2 MiB folios, but a
 * file already cached in small folios (written by an exporter, read with read(), partly evicted
 * and read back) stays small. So: populate; find the 2 MiB ranges not PMD-mapped (PAGEMAP_SCAN;
 * on older kernels, the VMA's FilePmdMapped total decides between all and nothing); re-read one
 * as a trial, and if it came back PMD-mapped, re-read the rest the same way (the page cache
 * keeps the large folios for later loads, so this happens once per file and eviction). */
long long q35_map_prefault(const gguf_file *f, int huge, int progress) {
  const size_t size = f->size;
#ifdef MADV_HUGEPAGE
  if (huge) madvise((void *)f->map, size, MADV_HUGEPAGE);
#else
  huge = 0; /* no transparent huge pages here (macOS): the populate below is all there is */
#endif
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
                          "no_huge skips this)\n", (double)total / (1u << 30));
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

/* [lo, hi) of the file (page-aligned offsets; hi may pass the end of the file within its last page)
 * into anonymous memory, then moved over the file mapping at the same address with mremap, so
 * every pointer into the map stays valid. 0, or -1 with err. */
static int copy_range(gguf_file *f, const char *path, size_t lo, size_t hi, q35_err *err) {
  const size_t size = hi - lo, end = hi < f->size ? hi : f->size;
  uint8_t *const at = (uint8_t *)(uintptr_t)(f->map + lo);
#if defined(__linux__)
  uint8_t *a = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
#else
  /* no mremap (macOS): anonymous memory over the file mapping's address at once (MAP_FIXED
   * replaces it), read into there */
  uint8_t *a = mmap(at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
#endif
  if (a == MAP_FAILED) {
    q35_seterr(err, "%s: cannot allocate %.2f GiB to read the weights into memory (no_mmap)", path,
               (double)size / (1u << 30));
    return -1;
  }
  /* no MADV_HUGEPAGE: khugepaged's background collapsing takes a core from the forward pass, and
   * 2 MiB anonymous pages taken at fault time (advice given before the reads, withdrawn after)
   * did not decode faster than 4 KiB ones (docs/PERF.md); the file mapping's 2 MiB page-cache
   * folios are the fast path. */
  int fd = open(path, O_RDONLY);
  size_t done = lo;
  while (fd >= 0 && done < end) {
    const ssize_t r = pread(fd, a + (done - lo), end - done > (1u << 30) ? (1u << 30) : end - done, (off_t)done);
    if (r <= 0) break;
    done += (size_t)r;
  }
  if (fd >= 0) close(fd);
  if (done != end) {
    munmap(a, size);
    q35_seterr(err, "%s: reading the weights into memory failed after %zu of %zu bytes", path, done - lo, end - lo);
    return -1;
  }
  if (mprotect(a, size, PROT_READ) != 0 ||
#if defined(__linux__)
      mremap(a, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED
#else
      a != at
#endif
  ) {
    munmap(a, size);
    q35_seterr(err, "%s: cannot move the weights read into memory over the file mapping", path);
    return -1;
  }
  return 0;
}

/* [lo, hi) of f's mapping (page-aligned offsets; hi may pass the end of the file within its last
 * page) rewritten: copied into anonymous memory, fn(arg, copy, orig) rewrites parts of the copy
 * (copy and orig both stand for f->map + lo; fn writes every byte of [wlo, whi), which is not
 * copied first: the rest is), and the copy moves over the mapping at the same
 * address, read-only, as copy_range does. The copy sits at the mapping's offset within a 2 MiB
 * page with 2 MiB pages advised while it is written (withdrawn after: no khugepaged collapsing
 * later), so the move keeps them where both ends allow. With drop, the file's cached pages of the
 * range are dropped afterwards (nothing maps them any more). 0, or -1 with err. */
int q35_map_rewrite(gguf_file *f, size_t lo, size_t hi, size_t wlo, size_t whi, int drop, int huge,
                    void (*fn)(void *arg, uint8_t *copy, const uint8_t *orig), void *arg, q35_err *err) {
  const size_t size = hi - lo, end = hi < f->size ? hi : f->size;
  if (wlo < lo) wlo = lo;
  if (whi > end) whi = end;
  if (whi < wlo) whi = wlo;
  uint8_t *const at = (uint8_t *)(uintptr_t)(f->map + lo);
#if defined(__linux__)
  uint8_t *r = mmap(NULL, size + HUGE_SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r == MAP_FAILED) {
    q35_seterr(err, "%s: cannot allocate %.2f GiB to repack weights into", f->path, (double)size / (1u << 30));
    return -1;
  }
  /* a: the first address at or after r with at's offset within a 2 MiB page; the slack goes */
  uint8_t *a = r + (((uintptr_t)at - (uintptr_t)r) & (HUGE_SZ - 1));
  if (a > r) munmap(r, (size_t)(a - r));
  if (r + HUGE_SZ > a) munmap(a + size, (size_t)(r + HUGE_SZ - a));
#ifdef MADV_HUGEPAGE
  if (huge) madvise(a, size, MADV_HUGEPAGE);
#endif
  memcpy(a, at, wlo - lo);
  memcpy(a + (whi - lo), at + (whi - lo), end - whi);
  fn(arg, a, at);
#ifdef MADV_NOHUGEPAGE
  if (huge) madvise(a, size, MADV_NOHUGEPAGE);
#endif
  if (mprotect(a, size, PROT_READ) != 0 || mremap(a, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
    munmap(a, size);
    q35_seterr(err, "%s: cannot move the repacked weights over the file mapping", f->path);
    return -1;
  }
  if (drop) {
    const int fd = open(f->path, O_RDONLY);
    if (fd >= 0) {
      posix_fadvise(fd, (off_t)lo, (off_t)(end - lo), POSIX_FADV_DONTNEED);
      close(fd);
    }
  }
  return 0;
#else
  (void)size, (void)end, (void)at, (void)drop, (void)huge, (void)fn, (void)arg, (void)wlo, (void)whi;
  q35_seterr(err, "%s: repacking weights needs mremap (Linux)", f->path);
  return -1;
#endif
}

/* --no-mmap: the file's bytes into anonymous memory at the file mapping's address. The default
 * file mapping in 2 MiB pages (q35_map_prefault) decodes at least as fast, without the copy. */
int q35_map_into_memory(gguf_file *f, const char *path, q35_err *err) { return copy_range(f, path, 0, f->size, err); }

/* [off, off + len) of f's mapping no longer maps the file: an inaccessible reservation takes its
 * place (no memory; a read faults). Not munmap: the hole's addresses would go to the next mmap
 * (a large malloc, another file), which gguf_close's munmap of the whole range would then take
 * away from its owner. */
static void drop_range(gguf_file *f, size_t off, size_t len) {
  void *p = (void *)(uintptr_t)(f->map + off);
  if (mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
    madvise(p, len, MADV_DONTNEED); /* (no address space for it: at least drop our pages) */
}

/* A pipeline stage's mapping: the tensor data of the other stages is dropped (page-aligned holes
 * between the kept ranges, reserved but inaccessible), so the stage's resident memory is its own
 * weights, and a stray read of another stage's tensor faults instead of reading the file behind
 * the stage's back. The header (metadata, the tokenizer's strings, the tensor names) stays. Kept
 * ranges are populated, in 2 MiB pages when huge, or with copy (no_mmap) read into anonymous
 * memory at their addresses, so only the stage's share of the file is ever copied. */
long long q35_map_keep(gguf_file *f, const size_t *off, const size_t *len, size_t n, int huge, int copy,
                       q35_err *err) {
  const size_t page = sysconf(_SC_PAGESIZE) > 0 ? (size_t)sysconf(_SC_PAGESIZE) : 4096;
  size_t from = (f->data_offset + page - 1) & ~(page - 1); /* first byte not yet kept or dropped */
  for (size_t i = 0; i <= n;) {
    const size_t lo = i < n ? off[i] & ~(page - 1) : (f->size + page - 1) & ~(page - 1);
    if (lo > from) drop_range(f, from, lo - from);
    if (i == n) break;
    size_t hi = (off[i] + len[i] + page - 1) & ~(page - 1);
    for (i++; i < n && (off[i] & ~(page - 1)) <= hi; i++) { /* ranges that share a page: one piece */
      const size_t e = (off[i] + len[i] + page - 1) & ~(page - 1);
      if (e > hi) hi = e;
    }
    if (hi > from) from = hi;
    if (copy) {
      if (copy_range(f, f->path, lo, hi, err)) return -2;
      continue;
    }
    void *p = (void *)(f->map + lo);
    const size_t plen = hi - lo;
#ifdef MADV_HUGEPAGE
    if (huge) madvise(p, plen, MADV_HUGEPAGE);
#else
    (void)huge;
#endif
#ifdef MADV_POPULATE_READ
    if (madvise(p, plen, MADV_POPULATE_READ) == 0) continue;
#endif
    volatile unsigned char sink = 0;
    for (size_t o = 0; o < plen; o += page) sink ^= ((const unsigned char *)p)[o];
    (void)sink;
  }
  return copy ? 0 : pmd_mapped_within(f->map, f->size);
}
