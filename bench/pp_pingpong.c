/*
 * pp_pingpong.c - what one pipeline hop costs on a given MPI transport: the one-way time (half a
 * round trip, blocking MPI_Send / MPI_Recv between two ranks) of the messages a pipeline step sends:
 * the header (584 bytes), a decode row's residual stream (4 x n_embd bytes + 24), a step of 8 and
 * of 16 rows, a prefill chunk of 256 tokens, and the reply of one sampled row (688 bytes).
 * docs/PERF.md ("Steps in flight") compares these with a decode step's compute. Built and run by
 * bench/pp_pingpong.sh.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long embd = argc > 1 ? atol(argv[1]) : 2048;
  if (size != 2 || embd < 1) {
    if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 pp_pingpong [N_EMBD]\n");
    MPI_Finalize();
    return 2;
  }
  const long row = 4 * embd + 24;
  const struct {
    const char *what;
    long bytes;
  } msg[] = {{"header", 584}, {"reply of 1 sampled row", 688}, {"1 decode row", row},
             {"8 decode rows", 8 * row}, {"16 decode rows", 16 * row}, {"prefill chunk of 256 tokens", 256 * row}};
  char *buf = malloc((size_t)(256 * row));
  memset(buf, 1, (size_t)(256 * row));
  if (rank == 0) printf("{\"n_embd\": %ld, \"messages\": [", embd);
  for (size_t k = 0; k < sizeof msg / sizeof msg[0]; k++) {
    const int n = (int)msg[k].bytes, iters = n > (1 << 20) ? 50 : 500;
    double t0 = 0;
    for (int i = -20; i < iters; i++) {
      if (i == 0) t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(buf, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(buf, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
      }
    }
    const double us = (MPI_Wtime() - t0) / iters / 2 * 1e6;
    if (rank == 0)
      printf("%s\n  {\"what\": \"%s\", \"bytes\": %d, \"one_way_us\": %.1f, \"GB_s\": %.2f}", k ? "," : "",
             msg[k].what, n, us, n / us * 1e-3);
  }
  if (rank == 0) printf("\n]}\n");
  free(buf);
  MPI_Finalize();
  return 0;
}
