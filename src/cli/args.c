/* args.c - command-line parsing shared by the q35 subcommands (see args.h). */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#ifdef Q35_MPI
#include "dist/pp.h"
#endif

static const char *pending_value; /* value of a --flag=value argument (CLI parsing only) */

int arg_is(int argc, char **argv, int *i, const char *name) {
  (void)argc;
  const char *a = argv[*i];
  size_t k = 0;
  /* leading dashes must match exactly */
  while (name[k] == '-' && a[k] == '-') k++;
  if (name[k] == '-' || (k > 0 && a[k] == '-')) return 0;
  for (; name[k]; k++) {
    char x = a[k], y = name[k];
    if (x == '-') x = '_';
    if (y == '-') y = '_';
    if (x != y) return 0;
  }
  if (a[k] == '\0') {
    pending_value = NULL;
    return 1;
  }
  if (a[k] == '=' && name[0] == '-' && name[1] == '-') {
    pending_value = a + k + 1;
    return 1;
  }
  return 0;
}

const char *arg_value(int argc, char **argv, int *i) {
  if (pending_value) {
    const char *v = pending_value;
    pending_value = NULL;
    return v;
  }
  if (*i + 1 >= argc) die("option %s needs a value", argv[*i]);
  return argv[++*i];
}

int64_t arg_int(const char *flag, const char *v, int64_t lo, int64_t hi) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end != '\0') die("%s: '%s' is not an integer", flag, v);
  if (x < lo || x > hi) die("%s: %lld is out of range [%lld, %lld]", flag, x, (long long)lo, (long long)hi);
  return x;
}

double arg_double(const char *flag, const char *v) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno == ERANGE || end == v || *end != '\0') die("%s: '%s' is not a number", flag, v);
  return x;
}

int32_t *arg_ids(const char *flag, const char *v, int32_t *n) {
  size_t cap = 16, len = 0;
  int32_t *ids = malloc(cap * sizeof *ids);
  const char *p = v;
  if (!ids) die("out of memory");
  for (;;) {
    while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
    if (!*p) break;
    char *end;
    errno = 0;
    long long x = strtoll(p, &end, 10);
    if (errno || end == p || (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n'))
      die("%s: bad token id list near '%.20s'", flag, p);
    if (x < 0 || x > INT32_MAX) die("%s: token id %lld out of range", flag, x);
    if (len == cap) {
      cap *= 2;
      ids = realloc(ids, cap * sizeof *ids);
      if (!ids) die("out of memory");
    }
    ids[len++] = (int32_t)x;
    p = end;
  }
  if (len == 0) die("%s: empty token id list", flag);
  *n = (int32_t)len;
  return ids;
}

void arg_unknown(const char *cmd, const char *arg) {
  fprintf(stderr, "q35 %s: unknown option '%s' (see q35 %s --help)\n", cmd, arg, cmd);
  exit(2);
}

void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("q35: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

q35_kv_type arg_kv(const char *v) {
  if (!strcmp(v, "f32")) return Q35_KV_F32;
  if (!strcmp(v, "f16")) return Q35_KV_F16;
  if (!strcmp(v, "q8_0")) return Q35_KV_Q8_0;
  die("--kv: '%s' is not f32, f16 or q8_0", v);
}

uint64_t arg_size(const char *flag, const char *v) {
  if (!strcmp(v, "off") || !strcmp(v, "none")) return 0;
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno == ERANGE || end == v || !(x >= 0) || v[0] == '-')
    die("%s: '%s' is not a size (e.g. 512M, 4G, 1.5GiB, 0 = no limit)", flag, v);
  double mul = 1;
  switch (*end) {
  case 'k': case 'K': mul = 1024.0; end++; break;
  case 'm': case 'M': mul = 1048576.0; end++; break;
  case 'g': case 'G': mul = 1073741824.0; end++; break;
  case 't': case 'T': mul = 1099511627776.0; end++; break;
  default: break;
  }
  if (mul > 1 && *end == 'i') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) die("%s: '%s' is not a size (e.g. 512M, 4G, 1.5GiB, 0 = no limit)", flag, v);
  x *= mul;
  if (x >= 18446744073709549568.0) die("%s: '%s' is too large", flag, v);
  return (uint64_t)x;
}

uint64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  fclose(f);
  return (uint64_t)kb * 1024;
}

uint64_t mem_budget_default(void) {
  return mem_available() / 4 * 3;
}

/* ---- model and session options ---- */

#define MAX_THREADS 1024        /* --threads upper bound */

int model_arg(model_args *a, int argc, char **argv, int *i) {
  if (arg_is(argc, argv, i, "-m") || arg_is(argc, argv, i, "--model") || arg_is(argc, argv, i, "--model_path")) {
    a->model = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "-t") || arg_is(argc, argv, i, "--threads")) {
    a->threads = (int)arg_int("--threads", arg_value(argc, argv, i), 0, MAX_THREADS);
  } else if ((a->takes & MODEL_ARG_CTX) && (arg_is(argc, argv, i, "--ctx") || arg_is(argc, argv, i, "-c"))) {
    a->ctx = (int32_t)arg_int("--ctx", arg_value(argc, argv, i), 1, ARG_MAX_TOKENS);
  } else if (arg_is(argc, argv, i, "--chunk")) {
    a->chunk = (int32_t)arg_int("--chunk", arg_value(argc, argv, i), 1, ARG_MAX_TOKENS);
  } else if (arg_is(argc, argv, i, "--kv")) {
    a->kv = arg_kv(arg_value(argc, argv, i));
  } else if (arg_is(argc, argv, i, "--no_mmap")) {
    a->no_mmap = 1;
  } else if (arg_is(argc, argv, i, "--no_huge_pages")) {
    a->no_huge = 1;
  } else if (arg_is(argc, argv, i, "--no_repack")) {
    a->no_repack = 1;
  } else if (arg_is(argc, argv, i, "--pp_split")) {
    a->pp_split = arg_value(argc, argv, i);
  } else if (arg_is(argc, argv, i, "--pp_timeout")) {
    a->pp_timeout = arg_double("--pp-timeout", arg_value(argc, argv, i));
    if (!(a->pp_timeout >= 0 && a->pp_timeout <= 1e6)) die("--pp-timeout must be in [0, 1000000] seconds");
    a->pp_timeout_set = 1;
  } else if (arg_is(argc, argv, i, "--pp_micro")) {
    a->pp_micro = 1 + (int)arg_int("--pp-micro", arg_value(argc, argv, i), 0, 1024); /* 0: not given */
  } else if ((a->takes & MODEL_ARG_MEM_BUDGET) && arg_is(argc, argv, i, "--mem_budget")) {
    a->mem_budget = arg_size("--mem-budget", arg_value(argc, argv, i));
    a->mem_budget_set = 1;
  } else {
    return 0;
  }
  return 1;
}

void model_args_done(model_args *a, const char *cmd) {
  if (!a->model) {
    fprintf(stderr, "q35 %s: -m MODEL.gguf is required (see q35 %s --help)\n", cmd, cmd);
    exit(2);
  }
  if ((a->takes & MODEL_ARG_MEM_BUDGET) && !a->mem_budget_set) a->mem_budget = mem_budget_default();
}

static const char *kv_name(q35_kv_type kv) {
  return kv == Q35_KV_F32 ? "f32" : kv == Q35_KV_Q8_0 ? "q8_0" : "f16";
}

void model_args_help(FILE *f, const model_args *a) {
  fprintf(f, "model and session:\n"
             "  -m, --model, --model_path FILE   the GGUF model\n"
             "  -t, --threads N                  worker threads (default: all cores)\n");
  if (a->takes & MODEL_ARG_CTX) fprintf(f, "  -c, --ctx N                      %s\n", a->ctx_help);
  fprintf(f,
          "  --kv f16|f32|q8_0                KV cache type (default %s)\n"
          "  --chunk N                        %s\n"
          "  --no-mmap                        read the weights into memory instead of mapping the file\n"
          "  --no-huge-pages                  map the file in the kernel's default pages (default: 2 MiB pages)\n"
          "  --no-repack                      keep the weights in the file's layout (default at the AVX2 level:\n"
          "                                   Q4_0, Q4_K, Q6_K, Q2_K, Q3_K, IQ4_NL, MXFP4, IQ2_XXS, IQ3_XXS, IQ1_S,\n"
          "                                   IQ1_M weights\n"
          "                                   repacked at load for its kernels; the same bits either way)\n"
          "  --pp-split B:E,B:E,...           under mpirun (a -DQ35_MPI=ON build): each rank's layers\n"
          "                                   (default: ranges of about equal bytes)\n"
          "  --pp-timeout S                   under mpirun: a rank that makes no progress for S seconds inside\n"
          "                                   a step or command (stopped, hung) ends the job (default 60, 0 = never)\n"
          "  --pp-micro N                     under mpirun: a step of at least N rows and 4N tokens runs as N\n"
          "                                   micro-batches so the ranks overlap (default: N = ranks; 0 or 1 = off)\n",
          kv_name(a->kv), a->chunk_help);
  if (a->takes & MODEL_ARG_MEM_BUDGET) fprintf(f, "  --mem-budget SIZE                %s\n", a->mem_budget_help);
}

q35_model_params model_args_model_params(const model_args *a) {
  q35_model_params mp = q35_model_default_params();
  mp.n_threads = a->threads;
  mp.no_mmap = a->no_mmap;
  mp.no_huge = a->no_huge;
  mp.no_repack = a->no_repack;
  return mp;
}

q35_model *model_args_load(const model_args *a, const q35_model_params *mp, q35_err *err) {
#ifdef Q35_MPI
  if (a->pp_timeout_set) q35_pp_set_timeout(a->pp_timeout);
  if (a->pp_micro) q35_pp_set_micro(a->pp_micro - 1);
  return q35_pp_load(a->model, mp, a->pp_split, err);
#else
  if (a->pp_split || a->pp_timeout_set || a->pp_micro) {
    q35_seterr(err, "%s needs a build with MPI (cmake -DQ35_MPI=ON) run under mpirun",
               a->pp_split ? "--pp-split" : a->pp_timeout_set ? "--pp-timeout" : "--pp-micro");
    return NULL;
  }
  return q35_model_load(a->model, mp, err);
#endif
}

int model_args_serve_stage(int argc, char **argv) {
  model_args ma = {.takes = MODEL_ARG_CTX | MODEL_ARG_MEM_BUDGET};
  for (int i = 1; i < argc; i++) model_arg(&ma, argc, argv, &i); /* the rest is rank 0's */
  if (!ma.model) {
    fprintf(stderr, "q35 %s: -m MODEL.gguf is required\n", argv[0]);
    return 2;
  }
  const q35_model_params mp = model_args_model_params(&ma);
  q35_err err;
  model_args_load(&ma, &mp, &err); /* serves the stage and exits */
  fprintf(stderr, "q35 %s: %s\n", argv[0], err.msg);
  return 1;
}

q35_session_params model_args_session_params(const model_args *a) {
  q35_session_params sp = q35_session_default_params();
  sp.n_ctx = a->ctx;
  sp.kv_type = a->kv;
  sp.mem_budget = a->mem_budget;
  return sp;
}

const char *model_args_session_hint(const model_args *a, q35_model *m, char *buf, size_t n) {
  const q35_session_params sp = model_args_session_params(a);
  buf[0] = 0;
  if (sp.mem_budget && q35_session_state_bytes(m, &sp, NULL) > sp.mem_budget)
    snprintf(buf, n, " (lower --ctx %d or raise --mem-budget)", (int)sp.n_ctx);
  return buf;
}

/* ---- sampling flags ---- */

#define FLOAT_MAX 3.4028234663852886e38 /* FLT_MAX */

/* A float flag value: a number within float range (inf and nan pass: validation names them). */
static float arg_float(const char *flag, const char *v) {
  const double d = arg_double(flag, v);
  if (isfinite(d) && fabs(d) > FLOAT_MAX) die("%s: %s is out of float range", flag, v);
  return (float)d;
}

/* The float-valued sampling flags: name, alias, field. */
static const struct {
  const char *flag, *alias;
  size_t field;
} float_flags[] = {
    {"--top_p", NULL, offsetof(q35_sampling, top_p)},
    {"--min_p", NULL, offsetof(q35_sampling, min_p)},
    {"--presence_penalty", NULL, offsetof(q35_sampling, presence_penalty)},
    {"--frequency_penalty", NULL, offsetof(q35_sampling, frequency_penalty)},
    {"--repetition_penalty", "--repeat_penalty", offsetof(q35_sampling, repetition_penalty)},
};

int sampling_arg(q35_sampling *p, int argc, char **argv, int *i) {
  if (arg_is(argc, argv, i, "--temperature") || arg_is(argc, argv, i, "--temp")) {
    p->temperature = arg_float("--temperature", arg_value(argc, argv, i));
    if (p->temperature == -1.0f) p->temperature = 0.0f; /* ExecuTorch's greedy spelling */
    return 1;
  }
  if (arg_is(argc, argv, i, "--top_k")) {
    p->top_k = arg_int("--top_k", arg_value(argc, argv, i), INT64_MIN, INT64_MAX);
    return 1;
  }
  for (size_t k = 0; k < sizeof float_flags / sizeof float_flags[0]; k++)
    if (arg_is(argc, argv, i, float_flags[k].flag) ||
        (float_flags[k].alias && arg_is(argc, argv, i, float_flags[k].alias))) {
      *(float *)((char *)p + float_flags[k].field) = arg_float(float_flags[k].flag, arg_value(argc, argv, i));
      return 1;
    }
  return 0;
}
