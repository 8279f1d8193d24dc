/*
 * Calls the shim forwards to MPI, each result checked: MPI_MAXLOC, a derived datatype in a
 * reduction, a user-defined op, MPI_SHORT (no rcoll type), an intercommunicator,
 * unequal MPI_Reduce_scatter counts, MPI_Allgatherv; and 4 served MPI_Allreduce calls, an
 * MPI_LAND (served: logical ops on integers) and an MPI_Bcast of a strided datatype
 * (served: packed). The test compares the stats lines
 * (RCOLL_MPI_STATS=1) with what this program called. Prints FORWARD-CHECK-OK <rank> <size>.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define CHECK_NAME "FORWARD-CHECK"
#include "check.h"

static void max_abs(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  int *a = in, *b = inout;
  for (int i = 0; i < *len; i++)
    if (abs(a[i]) > abs(b[i])) b[i] = a[i];
}

static void pair_sum(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  int *a = in, *b = inout;
  for (int i = 0; i < 2 * *len; i++) b[i] += a[i];
}

int main(int argc, char **argv) {
  CHECK(MPI_Init(&argc, &argv));
  CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  const int n = size, last = size - 1;

  /* 4 served */
  for (int k = 0; k < 4; k++) {
    long v = rank + k, s = 0;
    CHECK(MPI_Allreduce(&v, &s, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
    if (s != (long)n * (n - 1) / 2 + (long)n * k) FAIL("served Allreduce %d: %ld", k, s);
  }
  /* MPI_MAXLOC, 3 times: the largest value is rank (size-1)'s */
  for (int k = 0; k < 3; k++) {
    int in[2] = {rank * 10 + k, rank}, out[2];
    CHECK(MPI_Allreduce(in, out, 1, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD));
    if (out[0] != last * 10 + k || out[1] != last) FAIL("MAXLOC: %d at %d", out[0], out[1]);
  }
  /* A derived datatype (a pair of ints), twice, with an op summing pairs (MPI defines its
   * own ops on predefined types only) */
  MPI_Datatype pair;
  MPI_Op pairs;
  CHECK(MPI_Type_contiguous(2, MPI_INT, &pair));
  CHECK(MPI_Type_commit(&pair));
  CHECK(MPI_Op_create(pair_sum, 1, &pairs));
  for (int k = 0; k < 2; k++) {
    int in[4] = {rank, 1, k, 2}, out[4];
    CHECK(MPI_Allreduce(in, out, 2, pair, pairs, MPI_COMM_WORLD));
    if (out[0] != n * (n - 1) / 2 || out[1] != n || out[2] != n * k || out[3] != 2 * n)
      FAIL("derived-type Allreduce: %d %d %d %d", out[0], out[1], out[2], out[3]);
  }
  CHECK(MPI_Type_free(&pair));
  CHECK(MPI_Op_free(&pairs));
  /* A user-defined op */
  MPI_Op op;
  CHECK(MPI_Op_create(max_abs, 1, &op));
  int u = rank % 2 ? -(rank + 1) : rank + 1, uo = 0;
  CHECK(MPI_Allreduce(&u, &uo, 1, MPI_INT, op, MPI_COMM_WORLD));
  if (abs(uo) != n) FAIL("user op: %d", uo);
  CHECK(MPI_Op_free(&op));
  /* MPI_LAND */
  int t = rank >= 0, to = 0;
  CHECK(MPI_Allreduce(&t, &to, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
  if (to != 1) FAIL("LAND: %d", to);
  /* MPI_SHORT: no rcoll type */
  short sh = (short)(rank + 1), sho = 0;
  CHECK(MPI_Allreduce(&sh, &sho, 1, MPI_SHORT, MPI_SUM, MPI_COMM_WORLD));
  if (sho != n * (n + 1) / 2) FAIL("MPI_SHORT sum: %d", sho);
  /* An intercommunicator between the two halves (one group each when size is 2) */
  MPI_Comm half, inter;
  const int color = rank < (n + 1) / 2;
  CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, rank, &half));
  CHECK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, color ? (n + 1) / 2 : 0, 7, &inter));
  int iv = rank, io = -1, other = 0;
  CHECK(MPI_Allreduce(&iv, &io, 1, MPI_INT, MPI_SUM, inter));
  /* the sum over the other group */
  for (int r = 0; r < n; r++)
    if ((r < (n + 1) / 2) != color) other += r;
  if (io != other) FAIL("intercommunicator Allreduce: %d, not %d", io, other);
  CHECK(MPI_Comm_free(&inter));
  CHECK(MPI_Comm_free(&half));
  /* A non-contiguous datatype: every other int of 8 */
  MPI_Datatype every_other;
  CHECK(MPI_Type_vector(4, 1, 2, MPI_INT, &every_other));
  CHECK(MPI_Type_commit(&every_other));
  int v8[8];
  for (int i = 0; i < 8; i++) v8[i] = rank == 0 ? i : -1;
  CHECK(MPI_Bcast(v8, 1, every_other, 0, MPI_COMM_WORLD));
  for (int i = 0; i < 8; i++)
    if (v8[i] != (rank == 0 || i % 2 == 0 ? i : -1))
      FAIL("vector Bcast: element %d is %d", i, v8[i]);
  CHECK(MPI_Type_free(&every_other));
  /* MPI_Reduce_scatter with unequal counts: rank r receives r + 1 elements */
  int *counts = malloc(sizeof(int) * (size_t)n), total = 0;
  for (int r = 0; r < n; r++) counts[r] = r + 1, total += r + 1;
  int *rs = malloc(sizeof(int) * (size_t)total), rso[64];
  for (int i = 0; i < total; i++) rs[i] = i;
  CHECK(MPI_Reduce_scatter(rs, rso, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0, start = rank * (rank + 1) / 2; i <= rank; i++)
    if (rso[i] != n * (start + i)) FAIL("Reduce_scatter: element %d is %d", i, rso[i]);
  /* MPI_Allgatherv: rank r gives r + 1 ints */
  int mine[64], *all = malloc(sizeof(int) * (size_t)total), *displs = malloc(sizeof(int) * (size_t)n);
  for (int r = 0, d = 0; r < n; r++) displs[r] = d, d += counts[r];
  for (int i = 0; i <= rank; i++) mine[i] = rank * 100 + i;
  CHECK(MPI_Allgatherv(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD));
  for (int r = 0; r < n; r++)
    for (int i = 0; i <= r; i++)
      if (all[displs[r] + i] != r * 100 + i) FAIL("Allgatherv: rank %d's %d", r, i);
  free(counts), free(rs), free(all), free(displs);
  printf("FORWARD-CHECK-OK %d %d\n", rank, size);
  fflush(stdout);
  CHECK(MPI_Finalize());
  return 0;
}
