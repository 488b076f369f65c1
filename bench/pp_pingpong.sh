#!/usr/bin/env bash
# pp_pingpong.sh - one pipeline hop's cost on this host's MPI transport (bench/pp_pingpong.c):
# two ranks bound to separate cores, shared memory (vader) as the pipeline tests run it, or any
# transport given in MPI_ARGS (e.g. MPI_ARGS="--host a,b --mca btl self,tcp" for two hosts).
# Usage: bench/pp_pingpong.sh [N_EMBD (2048; 4096 for 397B-A17B)]. Not part of ctest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(mktemp -d)/pp_pingpong
trap 'rm -rf "$(dirname "$bin")"' EXIT
mpicc -O2 -Wall -Wextra -Werror -o "$bin" "$here/pp_pingpong.c"
# shellcheck disable=SC2086
mpirun --allow-run-as-root --oversubscribe --bind-to core ${MPI_ARGS:---mca btl self,vader --mca btl_vader_single_copy_mechanism none} \
  -np 2 "$bin" "${1:-2048}"
echo "load: $(uptime)" >&2
