/* commands.h - the q35 subcommands; each lives in src/cli/cmd_NAME.c. */
#ifndef Q35_CLI_COMMANDS_H
#define Q35_CLI_COMMANDS_H

int cmd_run(int argc, char **argv);           /* generate (ids or text) */
int cmd_logits(int argc, char **argv);        /* parity tool: write logits */
int cmd_sample(int argc, char **argv);        /* sample rows of logits from a file */
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_chat_template(int argc, char **argv);
int cmd_export(int argc, char **argv);        /* HF checkpoint -> GGUF; --tiny-test */
int cmd_serve(int argc, char **argv);         /* OpenAI-compatible HTTP server */
int cmd_bench(int argc, char **argv);
int cmd_schema_check(int argc, char **argv); /* token masks of a constraint over lines of a file */
int cmd_perplexity(int argc, char **argv);    /* llama-perplexity's perplexity */
int cmd_kld(int argc, char **argv);           /* KL divergence of a quantization from its base */
int cmd_imatrix(int argc, char **argv);      /* importance matrix of a model over a text */

#endif
