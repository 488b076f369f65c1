/* ppl_stats.c - perplexity and KL-divergence statistics (see ppl_stats.h). */
#include "ppl_stats.h"

#include <math.h>
#include <stdlib.h>


const double KLD_FRACTIONS[KLD_N_Q] = {0.999, 0.99, 0.95, 0.90, 0.10, 0.05, 0.01, 0.001};
const double DP_FRACTIONS[DP_N_Q] = {0.999, 0.99, 0.95, 0.90, 0.75, 0.25, 0.10, 0.05, 0.01, 0.001};

void ppl_log_probs(const float *logits, int n_vocab, float *lp) {
  float max = logits[0];
  for (int i = 1; i < n_vocab; i++)
    if (logits[i] > max) max = logits[i];
  double sum = 0;
  for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - max);
  const double lse = max + log(sum);
  for (int i = 0; i < n_vocab; i++) lp[i] = (float)(logits[i] - lse);
}

void ppl_mean_err(double sum, double sum2, size_t count, double *mean, double *err) {
  *mean = count ? sum / count : 0;
  *err = 0;
  if (count < 1) return;
  const double var = sum2 / count - *mean * *mean;
  if (var > 0 && count > 10) *err = sqrt(var / (count - 1));
}

double ppl_percentile(const float *sorted, size_t n, double f) {
  if (n == 0) return 0;
  if (f <= 0) return sorted[0];
  if (f >= 1) return sorted[n - 1];
  double p = f * (n - 1);
  size_t ip = (size_t)p;
  p -= ip;
  const size_t next = ip + 1 < n ? ip + 1 : n - 1;
  return (1 - p) * sorted[ip] + p * sorted[next];
}

double ppl_median(const float *sorted, size_t n) {
  if (n == 0) return 0;
  return n % 2 ? sorted[n / 2] : 0.5 * ((double)sorted[n / 2] + sorted[n / 2 - 1]);
}

/* First index of the largest value. */
static int argmax(const float *v, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (v[i] > v[best]) best = i;
  return best;
}

int kld_acc_init(kld_acc *a, size_t n_max) {
  *a = (kld_acc){.kld = malloc((n_max ? n_max : 1) * sizeof(float)),
                 .dp = malloc((n_max ? n_max : 1) * sizeof(float)),
                 .cap = n_max};
  if (a->kld && a->dp) return 0;
  kld_acc_free(a);
  return -1;
}

void kld_acc_add(kld_acc *a, const float *lp_base, const float *lp_quant, int n_vocab, int next) {
  /* KL(base || quant) = sum_i p_base(i) (log p_base(i) - log p_quant(i)) */
  double kld = 0;
  for (int i = 0; i < n_vocab; i++) kld += exp((double)lp_base[i]) * ((double)lp_base[i] - lp_quant[i]);
  const double nll = -(double)lp_quant[next], nll_base = -(double)lp_base[next];
  a->sum_nll += nll;
  a->sum_nll2 += nll * nll;
  a->sum_nll_base += nll_base;
  a->sum_nll_base2 += nll_base * nll_base;
  a->sum_nll_nll_base += nll * nll_base;
  a->sum_kld += kld;
  a->sum_kld2 += kld * kld;
  const double dp_next = exp(-nll) - exp(-nll_base);
  a->sum_dp += dp_next;
  a->sum_dp2 += dp_next * dp_next;
  a->sum_dp4 += dp_next * dp_next * dp_next * dp_next;
  a->n_same_top += argmax(lp_base, n_vocab) == argmax(lp_quant, n_vocab);
  a->kld[a->count] = (float)kld;
  a->dp[a->count] = (float)dp_next;
  a->count++;
}

void kld_acc_free(kld_acc *a) {
  free(a->kld);
  free(a->dp);
  *a = (kld_acc){0};
}

/* llama.cpp's covariance of the two mean log-likelihoods (0 below 10 positions). */
static double mean_cov(double suma, double sumb, double sumab, size_t n) {
  if (n < 10) return 0;
  return (sumab / n - (suma / n) * (sumb / n)) / (n - 1);
}

void kld_running(const kld_acc *a, kld_result *r) {
  const size_t n = a->count;
  double lq, lq_err, lb, lb_err;
  r->tokens = n;
  ppl_mean_err(a->sum_nll, a->sum_nll2, n, &lq, &lq_err);
  ppl_mean_err(a->sum_nll_base, a->sum_nll_base2, n, &lb, &lb_err);
  r->ppl_quant = exp(lq);
  r->ppl_quant_err = r->ppl_quant * lq_err;
  r->ppl_base = exp(lb);
  r->ppl_base_err = r->ppl_base * lb_err;
  const double cov = mean_cov(a->sum_nll, a->sum_nll_base, a->sum_nll_nll_base, n);
  r->ppl_cor = cov / (lq_err * lb_err); /* NaN when an error is 0; printed as null */
  r->ln_ratio = lq - lb;
  /* rounding can leave the variance of a difference of equal series slightly negative: 0 then */
  r->ln_ratio_err = sqrt(fmax(lq_err * lq_err + lb_err * lb_err - 2 * cov, 0));
  r->ppl_ratio = exp(r->ln_ratio);
  r->ppl_ratio_err = r->ppl_ratio * r->ln_ratio_err;
  r->ppl_diff = r->ppl_quant - r->ppl_base;
  const double ppl_cov = r->ppl_quant * r->ppl_base * cov;
  r->ppl_diff_err = sqrt(fmax(r->ppl_quant_err * r->ppl_quant_err + r->ppl_base_err * r->ppl_base_err - 2 * ppl_cov, 0));
  ppl_mean_err(a->sum_kld, a->sum_kld2, n, &r->mean_kld, &r->mean_kld_err);
  ppl_mean_err(a->sum_dp, a->sum_dp2, n, &r->mean_dp, &r->mean_dp_err);
  double mse, mse_err;
  ppl_mean_err(a->sum_dp2, a->sum_dp4, n, &mse, &mse_err);
  r->rms_dp = sqrt(mse);
  r->rms_dp_err = r->rms_dp > 0 ? 0.5 / r->rms_dp * mse_err : 0;
  r->top1 = n ? (double)a->n_same_top / n : 0;
  r->top1_err = n > 1 ? sqrt(r->top1 * (1 - r->top1) / (n - 1)) : 0;
}

static int cmp_float(const void *x, const void *y) {
  const float a = *(const float *)x, b = *(const float *)y;
  return (a > b) - (a < b);
}

void kld_finish(kld_acc *a, kld_result *r) {
  kld_running(a, r);
  const size_t n = a->count;
  if (!n) return;
  qsort(a->kld, n, sizeof(float), cmp_float);
  qsort(a->dp, n, sizeof(float), cmp_float);
  r->max_kld = a->kld[n - 1];
  r->min_kld = a->kld[0];
  r->median_kld = ppl_median(a->kld, n);
  for (int k = 0; k < KLD_N_Q; k++) r->kld_q[k] = ppl_percentile(a->kld, n, KLD_FRACTIONS[k]);
  r->max_dp = a->dp[n - 1];
  r->min_dp = a->dp[0];
  r->median_dp = ppl_median(a->dp, n);
  for (int k = 0; k < DP_N_Q; k++) r->dp_q[k] = ppl_percentile(a->dp, n, DP_FRACTIONS[k]);
}
