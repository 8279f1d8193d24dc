/*
 * Collectives on MPI_Alloc_mem memory, which the shim gives and registers with rcoll
 * (zero-copy sends over verbs). Each result compared with PMPI's on the same data: an
 * MPI_Allreduce of 1 MiB of floats out of place and in place, an MPI_Bcast, an
 * MPI_Allgather and an MPI_Iallreduce completed by MPI_Wait, all on MPI_Alloc_mem
 * buffers, then the memory freed by MPI_Free_mem, allocated again and used again; a
 * zero-byte MPI_Alloc_mem (MPI's own) freed too. Prints ALLOC-CHECK-OK <rank> <size>.
 * `alloc_mem_check malloc`: the same calls on malloc's memory (one MPI_Alloc_mem made and
 * freed unused), for comparison: nothing registered, nothing zero-copy over verbs.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, use_malloc;

#define CHECK_NAME "ALLOC-CHECK"
#include "check.h"

enum { N = 1 << 18 }; /* floats: 1 MiB */

static float *alloc_mem(void) {
  float *p = NULL;
  if (use_malloc) return malloc(N * sizeof(float));
  CHECK(MPI_Alloc_mem((MPI_Aint)(N * sizeof(float)), MPI_INFO_NULL, &p));
  if (p == NULL) FAIL("MPI_Alloc_mem gave NULL");
  return p;
}

static void same(const float *got, const float *want, const char *what) {
  if (memcmp(got, want, N * sizeof(float)) != 0) FAIL("%s differs from MPI's", what);
}

static void round_of_calls(int round) {
  float *a = alloc_mem(), *b = alloc_mem();
  float *want = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) a[i] = (float)((rank * 13 + i + round) % 97);
  CHECK(PMPI_Allreduce(a, want, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  CHECK(MPI_Allreduce(a, b, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  same(b, want, "MPI_Allreduce");
  memcpy(b, a, N * sizeof(float));
  CHECK(MPI_Allreduce(MPI_IN_PLACE, b, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  same(b, want, "MPI_Allreduce in place");
  MPI_Request req;
  CHECK(MPI_Iallreduce(a, b, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req));
  CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
  same(b, want, "MPI_Iallreduce");
  /* Broadcast of the root's a, every rank's a then compared with PMPI's broadcast. */
  memcpy(want, a, N * sizeof(float));
  CHECK(PMPI_Bcast(want, N, MPI_FLOAT, size - 1, MPI_COMM_WORLD));
  CHECK(MPI_Bcast(a, N, MPI_FLOAT, size - 1, MPI_COMM_WORLD));
  same(a, want, "MPI_Bcast");
  /* Every rank's block of N / size floats. */
  const int per = N / size;
  for (int i = 0; i < per; i++) a[i] = (float)(rank * 1000 + i % 1000);
  memset(want, 0, N * sizeof(float));
  memset(b, 0, N * sizeof(float));
  CHECK(PMPI_Allgather(a, per, MPI_FLOAT, want, per, MPI_FLOAT, MPI_COMM_WORLD));
  CHECK(MPI_Allgather(a, per, MPI_FLOAT, b, per, MPI_FLOAT, MPI_COMM_WORLD));
  same(b, want, "MPI_Allgather");
  free(want);
  if (use_malloc) {
    free(a), free(b);
    return;
  }
  CHECK(MPI_Free_mem(a));
  CHECK(MPI_Free_mem(b));
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  use_malloc = argc > 1 && strcmp(argv[1], "malloc") == 0;
  round_of_calls(0);
  round_of_calls(1); /* fresh allocations, perhaps at the addresses just freed */
  void *none = NULL;
  CHECK(MPI_Alloc_mem(0, MPI_INFO_NULL, &none));
  CHECK(MPI_Free_mem(none));
  if (use_malloc) {
    float *unused = NULL;
    CHECK(MPI_Alloc_mem(64, MPI_INFO_NULL, &unused));
    CHECK(MPI_Free_mem(unused));
  }
  printf("ALLOC-CHECK-OK %d %d\n", rank, size);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
