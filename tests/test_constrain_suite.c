/* test_constrain_suite.c - the JSON Schema compiler on the JSON-Schema Test Suite (Debian
 * package json-schema-test-suite; drafts 4, 6 and 7, the required tests, not optional/).
 *
 * For each test group the schema is compiled. A refused schema must be refused with a message
 * naming what is unsupported; its tests count as "refused". Otherwise each test's instance,
 * written as compact JSON (the default whitespace policy; numbers as the suite writes them), is
 * matched byte by byte against the grammar and compared with the suite's verdict:
 *   ok            the grammar agrees with the suite
 *   false-reject  a valid instance the grammar refuses (generation covers less than the schema)
 *   false-accept  an invalid instance the grammar accepts (the grammar would let a model write it)
 * The committed baseline (tests/data/constrain_suite_baseline.txt) lists every test that is not
 * ok, with its status; the test fails when a test not listed is not ok, or a listed test got
 * worse (ok < refused = false-reject < false-accept), so the conformance can only improve. With
 * Q35_UPDATE_BASELINE=1 the baseline is rewritten. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "constrain/grammar.h"

#define SUITE "/usr/share/json-schema-test-suite/tests"

enum { OK, REFUSED, FALSE_REJECT, FALSE_ACCEPT };
static const char *const status_name[] = {"ok", "refused", "false-reject", "false-accept"};

typedef struct {
  char *id;
  int status;
} entry;

static entry *base;
static size_t n_base;
static FILE *update;
static int counts[3][4], drafts_seen;

static int base_status(const char *id) {
  for (size_t i = 0; i < n_base; i++)
    if (!strcmp(base[i].id, id)) return base[i].status;
  return OK;
}

static void load_baseline(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    char *sp = strrchr(line, ' ');
    if (line[0] == '#' || !sp) continue;
    *sp++ = 0;
    sp[strcspn(sp, "\n")] = 0;
    int st = -1;
    for (int k = 0; k < 4; k++)
      if (!strcmp(sp, status_name[k])) st = k;
    if (st < 0) continue;
    base = realloc(base, (n_base + 1) * sizeof *base);
    base[n_base++] = (entry){strdup(line), st};
  }
  fclose(f);
}

static int matches(cn_grammar *g, const char *s) {
  q35_err err;
  cn_matcher *m = cn_matcher_new(g, &err);
  if (!m) return 0;
  int32_t st = cn_start(m);
  for (const char *p = s; *p && st >= 0; p++) st = cn_step(m, st, (uint8_t)*p);
  const int ok = st >= 0 && cn_complete(m, st);
  cn_matcher_free(m);
  return ok;
}

/* v as compact JSON with each real written as the shortest decimal that reads back as it (the
 * suite's own text: jansson would write 1.1 as 1.1000000000000001). */
static void dump(FILE *f, json_t *v) {
  const char *k;
  json_t *x;
  size_t i;
  if (json_is_object(v)) {
    fputc('{', f);
    int first = 1;
    json_object_foreach(v, k, x) {
      json_t *key = json_string(k);
      fputs(first ? "" : ",", f);
      first = 0;
      dump(f, key);
      json_decref(key);
      fputc(':', f);
      dump(f, x);
    }
    fputc('}', f);
  } else if (json_is_array(v)) {
    fputc('[', f);
    json_array_foreach(v, i, x) {
      fputs(i ? "," : "", f);
      dump(f, x);
    }
    fputc(']', f);
  } else if (json_is_real(v)) {
    char num[40];
    for (int p = 1; p <= 17; p++) {
      snprintf(num, sizeof num, "%.*g", p, json_real_value(v));
      if (strtod(num, NULL) == json_real_value(v)) break;
    }
    fputs(num, f);
  } else {
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    fputs(t ? t : "", f);
    free(t);
  }
}

static char *instance_text(json_t *v) {
  char *p = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&p, &n);
  if (!f) return NULL;
  dump(f, v);
  fclose(f);
  return p;
}

static void record(int d, const char *id, int st) {
  counts[d][st]++;
  const int was = base_status(id);
  if (update && st != OK) fprintf(update, "%s %s\n", id, status_name[st]);
  /* ranks: ok < refused = false-reject (coverage gaps) < false-accept (unsafe) */
  static const int rank[4] = {0, 1, 1, 2};
  if (!update) CHECK(rank[st] <= rank[was], "%s: %s (baseline: %s)", id, status_name[st], status_name[was]);
  if (!update && rank[st] < rank[was]) fprintf(stderr, "improved: %s now %s (update the baseline)\n", id, status_name[st]);
}

static void run_group(int d, const char *file, size_t gi, json_t *group) {
  json_t *schema = json_object_get(group, "schema"), *tests = json_object_get(group, "tests");
  char *text = json_dumps(schema, JSON_ENCODE_ANY | JSON_COMPACT | JSON_PRESERVE_ORDER);
  q35_err err;
  char *gbnf = NULL;
  cn_grammar *g = NULL;
  int empty = 0;
  const int refused = cn_schema_to_gbnf(text, strlen(text), 0, 0, &gbnf, &err) != 0;
  if (refused && getenv("Q35_SUITE_VERBOSE")) fprintf(stderr, "refused %s group %zu: %s\n", file, gi, err.msg);
  if (refused) CHECK(strstr(err.msg, "json schema:") != NULL, "%s group %zu: %s", file, gi, err.msg);
  else if (!(g = cn_gbnf_compile(gbnf, strlen(gbnf), &err))) /* an empty language is refused: no instance fits */
    empty = strstr(err.msg, "matches no string") != NULL;
  CHECK(refused || g || empty, "%s group %zu: the grammar does not compile: %s", file, gi, err.msg);
  size_t ti;
  json_t *t;
  json_array_foreach(tests, ti, t) {
    char id[512];
    snprintf(id, sizeof id, "draft%d/%s#%zu#%zu", d == 0 ? 4 : d == 1 ? 6 : 7, file, gi, ti);
    int st = REFUSED;
    if (!refused && (g || empty)) {
      char *inst = instance_text(json_object_get(t, "data"));
      const int valid = json_is_true(json_object_get(t, "valid")), acc = inst && g && matches(g, inst);
      st = acc == valid ? OK : valid ? FALSE_REJECT : FALSE_ACCEPT;
      free(inst);
    } else if (!refused) {
      st = FALSE_REJECT;
    }
    record(d, id, st);
  }
  cn_grammar_free(g);
  free(gbnf);
  free(text);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void run_draft(int d, const char *dir) {
  DIR *dh = opendir(dir);
  if (!dh) return;
  drafts_seen++;
  char *names[256];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dh)) && n < 256)
    if (strstr(e->d_name, ".json")) names[n++] = strdup(e->d_name);
  closedir(dh);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  for (int i = 0; i < n; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    CHECK(doc != NULL, "%s: %s", path, je.text);
    size_t gi;
    json_t *group;
    json_array_foreach(doc, gi, group) run_group(d, names[i], gi, group);
    json_decref(doc);
    free(names[i]);
  }
}

int main(void) {
  const char *src = getenv("Q35_SRC");
  char bpath[1024];
  snprintf(bpath, sizeof bpath, "%s/tests/data/constrain_suite_baseline.txt", src ? src : ".");
  if (getenv("Q35_UPDATE_BASELINE")) {
    update = fopen(bpath, "w");
    if (update) fprintf(update, "# test_constrain_suite baseline: tests not ok (regenerate with Q35_UPDATE_BASELINE=1)\n");
  } else {
    load_baseline(bpath);
  }
  run_draft(0, SUITE "/draft4");
  run_draft(1, SUITE "/draft6");
  run_draft(2, SUITE "/draft7");
  if (!drafts_seen) {
    fprintf(stderr, "FAIL: %s is missing (install the Debian package json-schema-test-suite)\n", SUITE);
    return 1;
  }
  for (int d = 0; d < 3; d++)
    fprintf(stderr, "draft%d: ok %d, refused %d, false-reject %d, false-accept %d\n", d == 0 ? 4 : d == 1 ? 6 : 7,
            counts[d][OK], counts[d][REFUSED], counts[d][FALSE_REJECT], counts[d][FALSE_ACCEPT]);
  if (update) fclose(update);
  return check_done("test_constrain_suite");
}
