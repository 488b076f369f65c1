/*
 * ppl_stats.h - the statistics of `q35 perplexity` and `q35 kld`, as llama.cpp's
 * tools/perplexity computes them (the formulas are restated in docs/PERPLEXITY.md).
 *
 * Every scored position gives the log-probabilities of a row of logits (log-softmax in double,
 * stored as float): ppl_log_probs. Perplexity accumulates the negative log-likelihood of the
 * next token; KL divergence compares a base row with a quantized row of the same position.
 */
#ifndef Q35_CLI_PPL_STATS_H
#define Q35_CLI_PPL_STATS_H

#include <stddef.h>

/* lp[i] = logits[i] - logsumexp(logits) for i < n_vocab (max-subtracted sum in double). */
void ppl_log_probs(const float *logits, int n_vocab, float *lp);

/* mean of sum/count and its standard error sqrt((sum2/count - mean^2) / (count - 1)),
 * 0 when that variance is not positive or count <= 10 (llama.cpp's mean_and_uncertainty). */
void ppl_mean_err(double sum, double sum2, size_t count, double *mean, double *err);

/* The linearly interpolated quantile of sorted values at fraction f (position f * (n - 1)). */
double ppl_percentile(const float *sorted, size_t n, double f);
/* The middle value (mean of the two middle ones for even n). */
double ppl_median(const float *sorted, size_t n);

typedef struct kld_acc {
  double sum_nll, sum_nll2;           /* quantized model's -log p(next token) */
  double sum_nll_base, sum_nll_base2; /* base model's */
  double sum_nll_nll_base;            /* cross term for the covariance of the two */
  double sum_kld, sum_kld2;
  double sum_dp, sum_dp2, sum_dp4;    /* dp = p_quant(next) - p_base(next) */
  size_t n_same_top, count;
  float *kld, *dp; /* per position, for the quantiles */
  size_t cap;      /* n_max */
} kld_acc;

/* An empty accumulator for at most n_max positions: 0, or -1 when out of memory. */
int kld_acc_init(kld_acc *a, size_t n_max);
/* Add one position (at most n_max): the two rows of log-probabilities and the next token. */
void kld_acc_add(kld_acc *a, const float *lp_base, const float *lp_quant, int n_vocab, int next);
void kld_acc_free(kld_acc *a);

typedef struct kld_result {
  size_t tokens;
  double ppl_quant, ppl_quant_err, ppl_base, ppl_base_err, ppl_cor;
  double ln_ratio, ln_ratio_err, ppl_ratio, ppl_ratio_err, ppl_diff, ppl_diff_err;
  double mean_kld, mean_kld_err, max_kld, min_kld, median_kld;
  double kld_q[8]; /* at KLD_FRACTIONS */
  double mean_dp, mean_dp_err, max_dp, min_dp, median_dp, rms_dp, rms_dp_err;
  double dp_q[10]; /* at DP_FRACTIONS */
  double top1, top1_err;
} kld_result;

#define KLD_N_Q 8
#define DP_N_Q 10
extern const double KLD_FRACTIONS[KLD_N_Q]; /* 0.999 0.99 0.95 0.90 0.10 0.05 0.01 0.001 */
extern const double DP_FRACTIONS[DP_N_Q];   /* 0.999 0.99 0.95 0.90 0.75 0.25 0.10 0.05 0.01 0.001 */

/* The summary of the positions added so far (sorts a->kld and a->dp). */
void kld_finish(kld_acc *a, kld_result *r);
/* The running values llama prints per chunk (no sorting). */
void kld_running(const kld_acc *a, kld_result *r);

#endif
