/*
 * Communicators other than the world: split (keys reversing the order), dup (freed and
 * made again), MPI_COMM_SELF, split_type; collectives on them interleaved with the
 * world's, each checked against PMPI on the same data; then, at MPI_THREAD_MULTIPLE, one
 * thread on the world and one on a split communicator at the same time. Prints
 * SPLIT-CHECK-OK <rank> <size> <MPI_Allreduce calls made>.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;
static long allreduces;

#define CHECK_NAME "SPLIT-CHECK"
#include "check.h"

/* An Allreduce, Bcast and Allgather on `c`, each compared with PMPI's. */
static void round_on(MPI_Comm c, int k, const char *what) {
  int r, n;
  CHECK(MPI_Comm_rank(c, &r));
  CHECK(MPI_Comm_size(c, &n));
  double x[33], got[33], want[33];
  for (int i = 0; i < 33; i++) x[i] = rank * 1000 + i + k;
  CHECK(PMPI_Allreduce(x, want, 33, MPI_DOUBLE, MPI_MAX, c));
  CHECK(MPI_Allreduce(x, got, 33, MPI_DOUBLE, MPI_MAX, c));
  allreduces++;
  if (memcmp(got, want, sizeof got)) FAIL("%s %d: Allreduce differs from MPI's", what, k);
  int b[5];
  for (int i = 0; i < 5; i++) b[i] = r == k % n ? 7 * k + i : -1;
  CHECK(MPI_Bcast(b, 5, MPI_INT, k % n, c));
  for (int i = 0; i < 5; i++)
    if (b[i] != 7 * k + i) FAIL("%s %d: Bcast element %d is %d", what, k, i, b[i]);
  long me[2] = {rank, k}, *all = malloc(sizeof(long) * 2 * (size_t)n),
       *ref = malloc(sizeof(long) * 2 * (size_t)n);
  CHECK(PMPI_Allgather(me, 2, MPI_LONG, ref, 2, MPI_LONG, c));
  CHECK(MPI_Allgather(me, 2, MPI_LONG, all, 2, MPI_LONG, c));
  if (memcmp(all, ref, sizeof(long) * 2 * (size_t)n)) FAIL("%s %d: Allgather differs", what, k);
  free(all), free(ref);
}

struct job {
  MPI_Comm c;
  int calls;
  long bad;
};

static void *hammer(void *arg) {
  struct job *j = arg;
  int n;
  MPI_Comm_size(j->c, &n);
  for (int k = 0; k < j->calls; k++) {
    long v = k + 1, s = 0;
    if (MPI_Allreduce(&v, &s, 1, MPI_LONG, MPI_SUM, j->c) != MPI_SUCCESS || s != n * v) j->bad++;
  }
  return NULL;
}

int main(int argc, char **argv) {
  int provided = 0;
  CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  MPI_Comm halves, dup, local;
  CHECK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &halves));
  for (int k = 0; k < 20; k++) {
    round_on(halves, k, "split");
    round_on(MPI_COMM_WORLD, k, "world");
  }
  /* A dup, freed (its rcoll communicator with it), then another. */
  for (int again = 0; again < 3; again++) {
    CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    round_on(dup, again, "dup");
    CHECK(MPI_Comm_free(&dup));
  }
  round_on(MPI_COMM_SELF, 0, "self");
  CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  round_on(local, 1, "split_type");
  CHECK(MPI_Comm_free(&local));
  /* Two threads, two communicators, at once. */
  if (provided == MPI_THREAD_MULTIPLE) {
    MPI_Comm other;
    CHECK(MPI_Comm_dup(halves, &other));
    struct job a = {MPI_COMM_WORLD, 300, 0}, b = {other, 300, 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, hammer, &a);
    pthread_create(&tb, NULL, hammer, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    if (a.bad || b.bad) FAIL("concurrent Allreduce: %ld and %ld wrong", a.bad, b.bad);
    allreduces += a.calls + b.calls;
    CHECK(MPI_Comm_free(&other));
  } else {
    printf("SPLIT-CHECK-NOTE no MPI_THREAD_MULTIPLE (%d)\n", provided);
  }
  CHECK(MPI_Comm_free(&halves));
  printf("SPLIT-CHECK-OK %d %d %ld\n", rank, size, allreduces);
  fflush(stdout);
  CHECK(MPI_Finalize());
  return 0;
}
