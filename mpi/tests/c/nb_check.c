/*
 * Nonblocking collectives: MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather,
 * MPI_Ireduce_scatter_block, MPI_Ibarrier, out of place and in place, several in flight
 * at once with a forwarded one (MPI_MAXLOC) among them, overlapped with computation, and
 * completed by each of MPI_Wait, MPI_Test, MPI_Waitall, MPI_Testall, MPI_Waitany,
 * MPI_Waitsome, MPI_Testany and MPI_Testsome, and one freed by MPI_Request_free;
 * every result compared with PMPI's blocking call on the same data. Then nonblocking
 * calls on a split communicator interleaved with blocking ones on the world.
 *   nb_check          MPI_Init_thread(MPI_THREAD_MULTIPLE): rcoll's progress thread
 *                     completes the shim's requests
 *   nb_check single   MPI_Init: the completion calls do (no other thread may call MPI)
 * Prints NB-CHECK-OK <rank> <size> <rounds>.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define CHECK_NAME "NB-CHECK"
#include "check.h"

enum { N_REQ = 7 };

static volatile double sink;

static void compute(void) {
  double x = 0;
  for (int i = 0; i < 20000; i++) x += (double)i * 0.5;
  sink = x;
}

/* Completes `reqs` the way `how` says (0 Wait each, 1 Test loops, 2 Waitall, 3 Testall
 * loop, 4 Waitany, 5 Waitsome, 6 Testany and Testsome loops), computing between tests. */
static void complete(MPI_Request *reqs, int n, int how) {
  int flag = 0, done = 0, idx, outcount, indices[N_REQ];
  switch (how) {
    case 0:
      for (int i = n - 1; i >= 0; i--) CHECK(MPI_Wait(&reqs[i], MPI_STATUS_IGNORE));
      break;
    case 1:
      for (int i = 0; i < n; i++) {
        do {
          compute();
          CHECK(MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE));
        } while (!flag);
      }
      break;
    case 2:
      CHECK(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
      break;
    case 3:
      do {
        compute();
        CHECK(MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE));
      } while (!flag);
      break;
    case 4:
      while (done < n) {
        CHECK(MPI_Waitany(n, reqs, &idx, MPI_STATUS_IGNORE));
        if (idx == MPI_UNDEFINED) FAIL("Waitany: MPI_UNDEFINED with %d left", n - done);
        done++;
      }
      break;
    case 5:
      while (done < n) {
        CHECK(MPI_Waitsome(n, reqs, &outcount, indices, MPI_STATUSES_IGNORE));
        if (outcount == MPI_UNDEFINED || outcount < 1) FAIL("Waitsome: %d with %d left", outcount, n - done);
        done += outcount;
      }
      break;
    default:
      while (done < n) {
        compute();
        if (done % 2 == 0) {
          CHECK(MPI_Testany(n, reqs, &idx, &flag, MPI_STATUS_IGNORE));
          if (flag && idx != MPI_UNDEFINED) done++;
        } else {
          CHECK(MPI_Testsome(n, reqs, &outcount, indices, MPI_STATUSES_IGNORE));
          if (outcount != MPI_UNDEFINED) done += outcount;
        }
      }
  }
  for (int i = 0; i < n; i++)
    if (reqs[i] != MPI_REQUEST_NULL) FAIL("request %d not freed by completion %d", i, how);
}

static void round_of(MPI_Comm c, int k, int in_place, int how) {
  int r, n;
  CHECK(MPI_Comm_rank(c, &r));
  CHECK(MPI_Comm_size(c, &n));
  const int count = k % 3 == 0 ? 1 : k % 3 == 1 ? 13 : 20000;
  double *x = malloc(sizeof(double) * (size_t)count * (size_t)n);
  double *sum = malloc(sizeof(double) * (size_t)count), *sum_ref = malloc(sizeof(double) * (size_t)count);
  int *b = malloc(sizeof(int) * (size_t)count), *b_ref = malloc(sizeof(int) * (size_t)count);
  long *g = malloc(sizeof(long) * (size_t)count * (size_t)n),
       *g_ref = malloc(sizeof(long) * (size_t)count * (size_t)n), *mine = malloc(sizeof(long) * (size_t)count);
  unsigned *rs_in = malloc(sizeof(unsigned) * (size_t)count * (size_t)n),
           *rs = malloc(sizeof(unsigned) * (size_t)count * (size_t)n),
           *rs_ref = malloc(sizeof(unsigned) * (size_t)count);
  int loc[2] = {r * 7 + k, r}, loc_out[2], loc_ref[2];
  for (int i = 0; i < count * n; i++) x[i] = (double)((r * 5 + i + k) % 17);
  for (int i = 0; i < count; i++) b_ref[i] = 31 * k + i, mine[i] = r * 1000L + i + k;
  for (int i = 0; i < count * n; i++) rs_in[i] = (unsigned)(r + 1) << (i % 20);
  /* the references */
  CHECK(PMPI_Allreduce(x, sum_ref, count, MPI_DOUBLE, MPI_SUM, c));
  CHECK(PMPI_Allgather(mine, count, MPI_LONG, g_ref, count, MPI_LONG, c));
  CHECK(PMPI_Reduce_scatter_block(rs_in, rs_ref, count, MPI_UNSIGNED, MPI_BOR, c));
  CHECK(PMPI_Allreduce(loc, loc_ref, 1, MPI_2INT, MPI_MAXLOC, c));
  /* all in flight at once */
  MPI_Request reqs[N_REQ];
  const int root = k % n;
  for (int i = 0; i < count; i++) b[i] = r == root ? b_ref[i] : -1;
  if (in_place) {
    memcpy(sum, x, sizeof(double) * (size_t)count);
    CHECK(MPI_Iallreduce(MPI_IN_PLACE, sum, count, MPI_DOUBLE, MPI_SUM, c, &reqs[0]));
    memcpy(g + (size_t)r * (size_t)count, mine, sizeof(long) * (size_t)count);
    CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, count, MPI_LONG, c, &reqs[2]));
    memcpy(rs, rs_in, sizeof(unsigned) * (size_t)count * (size_t)n);
    CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, rs, count, MPI_UNSIGNED, MPI_BOR, c, &reqs[3]));
  } else {
    CHECK(MPI_Iallreduce(x, sum, count, MPI_DOUBLE, MPI_SUM, c, &reqs[0]));
    CHECK(MPI_Iallgather(mine, count, MPI_LONG, g, count, MPI_LONG, c, &reqs[2]));
    CHECK(MPI_Ireduce_scatter_block(rs_in, rs, count, MPI_UNSIGNED, MPI_BOR, c, &reqs[3]));
  }
  CHECK(MPI_Ibcast(b, count, MPI_INT, root, c, &reqs[1]));
  CHECK(MPI_Ibarrier(c, &reqs[4]));
  CHECK(MPI_Iallreduce(loc, loc_out, 1, MPI_2INT, MPI_MAXLOC, c, &reqs[5]));
  CHECK(MPI_Iallreduce(MPI_IN_PLACE, NULL, 0, MPI_INT, MPI_SUM, c, &reqs[6]));
  compute();
  complete(reqs, N_REQ, how);
  if (memcmp(sum, sum_ref, sizeof(double) * (size_t)count)) FAIL("round %d: Iallreduce differs", k);
  if (memcmp(b, b_ref, sizeof(int) * (size_t)count)) FAIL("round %d: Ibcast differs", k);
  if (memcmp(g, g_ref, sizeof(long) * (size_t)count * (size_t)n)) FAIL("round %d: Iallgather differs", k);
  if (memcmp(rs, rs_ref, sizeof(unsigned) * (size_t)count)) FAIL("round %d: Ireduce_scatter_block differs", k);
  if (memcmp(loc_out, loc_ref, sizeof loc_ref)) FAIL("round %d: MAXLOC Iallreduce differs", k);
  free(x), free(sum), free(sum_ref), free(b), free(b_ref), free(g), free(g_ref), free(mine);
  free(rs_in), free(rs), free(rs_ref);
}

int main(int argc, char **argv) {
  int provided = MPI_THREAD_SINGLE;
  if (argc > 1 && strcmp(argv[1], "single") == 0)
    CHECK(MPI_Init(&argc, &argv));
  else
    CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  int rounds = 0;
  for (int k = 0; k < 35; k++, rounds++) round_of(MPI_COMM_WORLD, k, k % 2, k % 7);
  /* A request freed at once: its barrier still happens. */
  MPI_Request freed;
  CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &freed));
  CHECK(MPI_Request_free(&freed));
  if (freed != MPI_REQUEST_NULL) FAIL("MPI_Request_free left the request");
  CHECK(MPI_Barrier(MPI_COMM_WORLD));
  /* A split communicator's nonblocking calls between blocking ones on the world. */
  MPI_Comm halves;
  CHECK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &halves));
  for (int k = 0; k < 10; k++, rounds++) {
    MPI_Request req;
    double v = rank + k, s = 0, w = rank, ws = 0;
    int hn;
    CHECK(MPI_Comm_size(halves, &hn));
    CHECK(MPI_Iallreduce(&v, &s, 1, MPI_DOUBLE, MPI_MAX, halves, &req));
    CHECK(MPI_Allreduce(&w, &ws, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    double want = 0;
    for (int q = rank % 2; q < size; q += 2) want = q + k > want ? q + k : want;
    if (s != want || ws != size * (size - 1) / 2.0) FAIL("split round %d: %g %g", k, s, ws);
    round_of(halves, k, k % 2, (k + 2) % 7);
  }
  CHECK(MPI_Comm_free(&halves));
  printf("NB-CHECK-OK %d %d %d %d\n", rank, size, rounds, provided == MPI_THREAD_MULTIPLE);
  fflush(stdout);
  CHECK(MPI_Finalize());
  return 0;
}
