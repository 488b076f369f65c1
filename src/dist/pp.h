/*
 * pp.h - pipeline parallelism over MPI (the -DQ35_MPI=ON build of the q35 command).
 *
 * Under `mpirun -np N q35 COMMAND -m M.gguf`, every rank runs the same command line. Rank r loads
 * the contiguous layer range of its stage only (q35_model_params.layer_begin / layer_end); rank 0
 * runs the command (tokenization, output, scheduling) on a model whose forward pass hands the
 * residual stream on to rank 1 (q35_model.next); ranks 1 .. N-1 never return from q35_pp_load:
 * they serve their stage until rank 0 frees its model, then exit. docs/DESIGN.md has the protocol.
 */
#ifndef Q35_DIST_PP_H
#define Q35_DIST_PP_H

#include "q35.h"

/* MPI_Init_thread (MPI_THREAD_SERIALIZED: one thread at a time calls MPI); errors return instead of
 * aborting inside MPI, and are reported by name. */
void q35_pp_init(int *argc, char ***argv);
/* The model for this rank: with one rank, q35_model_load (split, if given, must be the whole
 * model). With N ranks, the stage's layers: split "0:2,2:4" (N ranges, contiguous from 0 to the
 * last layer) or, when NULL, ranges of about equal bytes. Ranks above 0 do not return. A failure
 * on any rank ends the whole job with a message naming the rank. */
q35_model *q35_pp_load(const char *path, const q35_model_params *mp, const char *split, q35_err *err);
/* Seconds a rank waits inside a command (for a reply, a payload, a send to complete) before it
 * ends the job as hung (default 60; 0: forever). Every rank gets the same command line. */
void q35_pp_set_timeout(double seconds);
/* Micro-batches of a step with at least n rows and 4n tokens (default: one per rank; 0 or 1: none). */
void q35_pp_set_micro(int n);
/* The job's ranks (1 outside mpirun), and this process's rank. */
int q35_pp_ranks(void);
int q35_pp_rank(void);
/* At the end of main: stops the later stages if the model was not freed, then MPI_Finalize. */
void q35_pp_finalize(void);

#endif
