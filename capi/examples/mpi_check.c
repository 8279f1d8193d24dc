/* An MPI program that uses rcoll for its collectives, checking every result against the MPI
 * collective on the same data.
 *
 *   mpicc mpi_check.c -I capi/include -L target/release -lrcoll -o mpi_check
 *   mpirun -np 4 ./mpi_check
 *
 * Rank 0 makes the unique id, MPI_Bcast hands it to the others (as with NCCL). Then: every
 * collective x the integer and floating types x every reduction, in place and not, with
 * counts 0, 1, 1000 and 100003; point to point around a ring; a split by color = rank % 2
 * whose groups all_reduce (nonblocking) while the parent all_reduces too; the other
 * nonblocking collectives (rcollIBroadcast, rcollIAllGather, rcollIReduceScatter), many
 * queued at once; and one rcollIAllReduce overlapped with computation. Prints
 * "MPI-CHECK-OK <rank> <size>". */
#include <mpi.h>
#include <rcoll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rcollComm_t comm;
static int rank, nranks;

#define CHECK(call)                                                                       \
  do {                                                                                    \
    rcollResult_t r_ = (call);                                                            \
    if (r_ != rcollSuccess) {                                                             \
      fprintf(stderr, "rank %d: %s:%d: %s: %s: %s\n", rank, __FILE__, __LINE__, #call,    \
              rcollGetErrorString(r_), rcollGetLastError(comm));                          \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                       \
    }                                                                                     \
  } while (0)

#define FAIL(...)                                                                         \
  do {                                                                                    \
    fprintf(stderr, "rank %d: ", rank);                                                   \
    fprintf(stderr, __VA_ARGS__);                                                         \
    fputc('\n', stderr);                                                                  \
    MPI_Abort(MPI_COMM_WORLD, 1);                                                         \
  } while (0)

struct type {
  const char *name;
  rcollDataType_t rcoll;
  MPI_Datatype mpi;
  size_t size;
  int is_float;
};

static const struct type types[] = {
    {"int8", rcollInt8, MPI_INT8_T, 1, 0},        {"uint8", rcollUint8, MPI_UINT8_T, 1, 0},
    {"int32", rcollInt32, MPI_INT32_T, 4, 0},     {"uint32", rcollUint32, MPI_UINT32_T, 4, 0},
    {"int64", rcollInt64, MPI_INT64_T, 8, 0},     {"uint64", rcollUint64, MPI_UINT64_T, 8, 0},
    {"float32", rcollFloat32, MPI_FLOAT, 4, 1},   {"float64", rcollFloat64, MPI_DOUBLE, 8, 1},
};

struct op {
  const char *name;
  rcollRedOp_t rcoll;
  MPI_Op mpi;
};

static const struct op ops[] = {
    {"sum", rcollSum, MPI_SUM}, {"prod", rcollProd, MPI_PROD}, {"max", rcollMax, MPI_MAX},
    {"min", rcollMin, MPI_MIN}, {"avg", rcollAvg, MPI_SUM},
};

/* Small values, so that sums and products of up to 4 ranks are exact in every type. */
static void fill(const struct type *t, void *buf, size_t count, int seed) {
  for (size_t i = 0; i < count; i++) {
    int v = (int)((seed * 7 + i * 13) % 3) + 1;
    switch (t->rcoll) {
      case rcollInt8: ((int8_t *)buf)[i] = (int8_t)v; break;
      case rcollUint8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
      case rcollInt32: ((int32_t *)buf)[i] = v; break;
      case rcollUint32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
      case rcollInt64: ((int64_t *)buf)[i] = v; break;
      case rcollUint64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
      case rcollFloat32: ((float *)buf)[i] = (float)v; break;
      case rcollFloat64: ((double *)buf)[i] = (double)v; break;
      default: FAIL("no fill for %s", t->name);
    }
  }
}

/* MPI has no average: the sum divided by the ranks, truncating for integers (as rcoll). */
static void average(const struct type *t, void *buf, size_t count) {
  for (size_t i = 0; i < count; i++) {
    switch (t->rcoll) {
      case rcollInt8: ((int8_t *)buf)[i] /= nranks; break;
      case rcollUint8: ((uint8_t *)buf)[i] /= nranks; break;
      case rcollInt32: ((int32_t *)buf)[i] /= nranks; break;
      case rcollUint32: ((uint32_t *)buf)[i] /= nranks; break;
      case rcollInt64: ((int64_t *)buf)[i] /= nranks; break;
      case rcollUint64: ((uint64_t *)buf)[i] /= nranks; break;
      case rcollFloat32: ((float *)buf)[i] /= nranks; break;
      case rcollFloat64: ((double *)buf)[i] /= nranks; break;
      default: FAIL("no average for %s", t->name);
    }
  }
}

static void same(const char *what, const struct type *t, const struct op *o, size_t count,
                 const void *got, const void *want, size_t bytes) {
  if (bytes && memcmp(got, want, bytes) != 0) {
    size_t at = 0;
    while (((const char *)got)[at] == ((const char *)want)[at]) at++;
    FAIL("%s %s %s count %zu: differs from MPI at byte %zu", what, t->name, o ? o->name : "",
         count, at);
  }
}

static void reductions(const struct type *t, size_t count) {
  size_t bytes = count * t->size, all = bytes * (size_t)nranks;
  char *send = malloc(all + 1), *got = malloc(all + 1), *want = malloc(all + 1);
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    const struct op *o = &ops[k];
    /* AllReduce, out of place and in place. */
    fill(t, send, count, rank);
    CHECK(rcollAllReduce(send, got, count, t->rcoll, o->rcoll, comm));
    MPI_Allreduce(send, want, (int)count, t->mpi, o->mpi, MPI_COMM_WORLD);
    if (o->rcoll == rcollAvg) average(t, want, count);
    same("all_reduce", t, o, count, got, want, bytes);
    memcpy(got, send, bytes);
    CHECK(rcollAllReduce(got, got, count, t->rcoll, o->rcoll, comm));
    same("all_reduce in place", t, o, count, got, want, bytes);
    /* Reduce to every root. */
    for (int root = 0; root < nranks; root++) {
      memset(got, 0, bytes + 1);
      CHECK(rcollReduce(send, got, count, t->rcoll, o->rcoll, root, comm));
      MPI_Reduce(send, want, (int)count, t->mpi, o->mpi, root, MPI_COMM_WORLD);
      if (rank == root) {
        if (o->rcoll == rcollAvg) average(t, want, count);
        same("reduce", t, o, count, got, want, bytes);
      }
    }
    /* ReduceScatter: count elements per rank, out of place and in place. */
    fill(t, send, count * (size_t)nranks, rank + 1);
    CHECK(rcollReduceScatter(send, got, count, t->rcoll, o->rcoll, comm));
    MPI_Reduce_scatter_block(send, want, (int)count, t->mpi, o->mpi, MPI_COMM_WORLD);
    if (o->rcoll == rcollAvg) average(t, want, count);
    same("reduce_scatter", t, o, count, got, want, bytes);
    CHECK(rcollReduceScatter(send, send + (size_t)rank * bytes, count, t->rcoll, o->rcoll,
                             comm));
    same("reduce_scatter in place", t, o, count, send + (size_t)rank * bytes, want, bytes);
  }
  free(send);
  free(got);
  free(want);
}

static void copies(const struct type *t, size_t count) {
  size_t bytes = count * t->size, all = bytes * (size_t)nranks;
  char *send = malloc(all + 1), *got = malloc(all + 1), *want = malloc(all + 1);
  for (int root = 0; root < nranks; root++) {
    fill(t, send, count, root + 5);
    memset(got, 0, bytes + 1);
    if (rank == root) memcpy(got, send, bytes);
    CHECK(rcollBroadcast(send, got, count, t->rcoll, root, comm));
    memcpy(want, send, bytes);
    MPI_Bcast(want, (int)count, t->mpi, root, MPI_COMM_WORLD);
    same("broadcast", t, NULL, count, got, want, bytes);
    /* In place, and a NULL send buffer on the others (it is read on the root only). */
    if (rank != root) memset(got, 0, bytes);
    CHECK(rcollBroadcast(rank == root ? got : NULL, got, count, t->rcoll, root, comm));
    same("broadcast in place", t, NULL, count, got, want, bytes);
    /* Gather and scatter. */
    fill(t, send, count, rank + root);
    CHECK(rcollGather(send, rank == root ? got : NULL, count, t->rcoll, root, comm));
    MPI_Gather(send, (int)count, t->mpi, want, (int)count, t->mpi, root, MPI_COMM_WORLD);
    if (rank == root) same("gather", t, NULL, count, got, want, all);
    fill(t, send, count * (size_t)nranks, root);
    CHECK(rcollScatter(rank == root ? send : NULL, got, count, t->rcoll, root, comm));
    MPI_Scatter(send, (int)count, t->mpi, want, (int)count, t->mpi, root, MPI_COMM_WORLD);
    same("scatter", t, NULL, count, got, want, bytes);
  }
  /* AllGather, out of place and in place. */
  fill(t, send, count, rank * 3);
  CHECK(rcollAllGather(send, got, count, t->rcoll, comm));
  MPI_Allgather(send, (int)count, t->mpi, want, (int)count, t->mpi, MPI_COMM_WORLD);
  same("all_gather", t, NULL, count, got, want, all);
  memset(got, 0, all);
  memcpy(got + (size_t)rank * bytes, send, bytes);
  CHECK(rcollAllGather(got + (size_t)rank * bytes, got, count, t->rcoll, comm));
  same("all_gather in place", t, NULL, count, got, want, all);
  /* AllToAll. */
  fill(t, send, count * (size_t)nranks, rank * 11);
  CHECK(rcollAllToAll(send, got, count, t->rcoll, comm));
  MPI_Alltoall(send, (int)count, t->mpi, want, (int)count, t->mpi, MPI_COMM_WORLD);
  same("all_to_all", t, NULL, count, got, want, all);
  /* Point to point: a ring, even ranks sending first (any size from 2). */
  if (nranks > 1) {
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    fill(t, send, count, rank);
    fill(t, want, count, prev);
    if (rank % 2 == 0) {
      CHECK(rcollSend(send, count, t->rcoll, next, comm));
      CHECK(rcollRecv(got, count, t->rcoll, prev, comm));
    } else {
      CHECK(rcollRecv(got, count, t->rcoll, prev, comm));
      CHECK(rcollSend(send, count, t->rcoll, next, comm));
    }
    same("send/recv", t, NULL, count, got, want, bytes);
  }
  free(send);
  free(got);
  free(want);
}

/* The nonblocking calls besides rcollIAllReduce, queued together before the first wait:
 * rcollIBroadcast from every root and rcollIAllGather, out of place and in place, and
 * rcollIReduceScatter for every op, out of place and in place; waited for in reverse order
 * (the first queued polled with rcollTest), each result checked against MPI's. */
enum { QUEUED = 64 };
struct queued {
  const char *what;
  const struct op *op;
  rcollRequest_t req;
  char *send, *buf; /* owned: valid until the request completes */
  const char *got;  /* where the result lands, in buf */
  char *want;       /* MPI's result */
  size_t bytes;
};

static struct queued *queue(struct queued *q, int *n, const char *what, const struct op *o,
                            size_t send_bytes, size_t buf_bytes, size_t want_bytes) {
  if (*n == QUEUED) FAIL("more than %d queued calls", QUEUED);
  struct queued *j = &q[(*n)++];
  j->what = what;
  j->op = o;
  j->send = calloc(send_bytes + 1, 1);
  j->buf = calloc(buf_bytes + 1, 1);
  j->want = calloc(want_bytes + 1, 1);
  j->got = j->buf;
  j->bytes = want_bytes;
  return j;
}

static void nonblocking(const struct type *t, size_t count) {
  size_t bytes = count * t->size, all = bytes * (size_t)nranks;
  struct queued q[QUEUED];
  int n = 0;
  for (int root = 0; root < nranks; root++) {
    struct queued *j = queue(q, &n, "ibroadcast", NULL, bytes, bytes, bytes);
    /* Only the root's send buffer may be read: the others hold other values. */
    fill(t, j->send, count, rank == root ? root + 5 : rank + 50);
    memcpy(j->want, j->send, bytes);
    MPI_Bcast(j->want, (int)count, t->mpi, root, MPI_COMM_WORLD);
    CHECK(rcollIBroadcast(j->send, j->buf, count, t->rcoll, root, comm, &j->req));
    struct queued *k = queue(q, &n, "ibroadcast in place", NULL, 0, bytes, bytes);
    memcpy(k->want, j->want, bytes);
    if (rank == root) fill(t, k->buf, count, root + 5);
    CHECK(rcollIBroadcast(rank == root ? k->buf : NULL, k->buf, count, t->rcoll, root, comm,
                          &k->req));
  }
  struct queued *g = queue(q, &n, "iall_gather", NULL, bytes, all, all);
  fill(t, g->send, count, rank * 3);
  MPI_Allgather(g->send, (int)count, t->mpi, g->want, (int)count, t->mpi, MPI_COMM_WORLD);
  CHECK(rcollIAllGather(g->send, g->buf, count, t->rcoll, comm, &g->req));
  struct queued *h = queue(q, &n, "iall_gather in place", NULL, 0, all, all);
  memcpy(h->want, g->want, all);
  fill(t, h->buf + (size_t)rank * bytes, count, rank * 3);
  CHECK(rcollIAllGather(h->buf + (size_t)rank * bytes, h->buf, count, t->rcoll, comm, &h->req));
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    const struct op *o = &ops[k];
    struct queued *j = queue(q, &n, "ireduce_scatter", o, all, bytes, bytes);
    fill(t, j->send, count * (size_t)nranks, rank + 1 + (int)k);
    MPI_Reduce_scatter_block(j->send, j->want, (int)count, t->mpi, o->mpi, MPI_COMM_WORLD);
    if (o->rcoll == rcollAvg) average(t, j->want, count);
    CHECK(rcollIReduceScatter(j->send, j->buf, count, t->rcoll, o->rcoll, comm, &j->req));
    struct queued *i = queue(q, &n, "ireduce_scatter in place", o, 0, all, bytes);
    memcpy(i->want, j->want, bytes);
    fill(t, i->buf, count * (size_t)nranks, rank + 1 + (int)k);
    i->got = i->buf + (size_t)rank * bytes;
    CHECK(rcollIReduceScatter(i->buf, i->buf + (size_t)rank * bytes, count, t->rcoll, o->rcoll,
                              comm, &i->req));
  }
  for (int k = n - 1; k >= 0; k--) {
    if (k == 0) {
      int done = 0;
      while (!done) CHECK(rcollTest(q[k].req, &done));
    } else {
      CHECK(rcollWait(q[k].req));
    }
    same(q[k].what, t, q[k].op, count, q[k].got, q[k].want, q[k].bytes);
    free(q[k].send);
    free(q[k].buf);
    free(q[k].want);
  }
}

/* Split by color = rank % 2 (key: -rank, so the order reverses); each group all_reduces,
 * nonblocking, while the parent all_reduces, blocking; checked against MPI_Comm_split. */
static void split(void) {
  rcollComm_t child = NULL;
  CHECK(rcollCommSplit(comm, rank % 2, -rank, &child));
  if (!child) FAIL("no communicator from the split");
  MPI_Comm mchild;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &mchild);
  int crank, csize, mrank, msize;
  CHECK(rcollCommUserRank(child, &crank));
  CHECK(rcollCommCount(child, &csize));
  MPI_Comm_rank(mchild, &mrank);
  MPI_Comm_size(mchild, &msize);
  if (crank != mrank || csize != msize)
    FAIL("split: rank %d of %d, MPI says %d of %d", crank, csize, mrank, msize);
  enum { N = 300000 };
  int64_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *w = malloc(N * sizeof *w);
  for (int i = 0; i < N; i++) a[i] = b[i] = rank + i;
  rcollRequest_t req;
  CHECK(rcollIAllReduce(a, a, N, rcollInt64, rcollSum, child, &req));
  CHECK(rcollAllReduce(b, b, N, rcollInt64, rcollSum, comm)); /* while the child runs */
  CHECK(rcollWait(req));
  for (int i = 0; i < N; i++) w[i] = rank + i;
  MPI_Allreduce(MPI_IN_PLACE, w, N, MPI_INT64_T, MPI_SUM, mchild);
  if (memcmp(a, w, N * sizeof *a)) FAIL("split: the group's all_reduce differs from MPI");
  for (int i = 0; i < N; i++) w[i] = rank + i;
  MPI_Allreduce(MPI_IN_PLACE, w, N, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (memcmp(b, w, N * sizeof *b)) FAIL("split: the parent's all_reduce differs from MPI");
  /* A color no one else has: a group of one; RCOLL_SPLIT_NOCOLOR: none. */
  rcollComm_t alone = NULL, none = (rcollComm_t)1;
  CHECK(rcollCommSplit(comm, rank, 0, &alone));
  CHECK(rcollCommCount(alone, &csize));
  if (csize != 1) FAIL("split: a group of %d for a color of one", csize);
  CHECK(rcollCommSplit(comm, RCOLL_SPLIT_NOCOLOR, 0, &none));
  if (none != NULL) FAIL("split: a communicator for RCOLL_SPLIT_NOCOLOR");
  CHECK(rcollCommDestroy(alone));
  CHECK(rcollCommDestroy(child));
  MPI_Comm_free(&mchild);
  free(a);
  free(b);
  free(w);
}

/* rcollIAllReduce of 8 Mi floats while this thread computes; polled with rcollTest. */
static void overlap(void) {
  enum { N = 8 << 20 };
  float *v = malloc(N * sizeof *v);
  for (int i = 0; i < N; i++) v[i] = (float)(rank + 1);
  rcollRequest_t req;
  CHECK(rcollIAllReduce(v, v, N, rcollFloat32, rcollSum, comm, &req));
  double x = 0;
  int done = 0, polls = 0;
  while (!done) {
    for (int i = 0; i < 100000; i++) x += (double)i * 1e-9;
    CHECK(rcollTest(req, &done));
    polls++;
  }
  float want = (float)(nranks * (nranks + 1) / 2);
  for (int i = 0; i < N; i++)
    if (v[i] != want) FAIL("overlapped all_reduce: %g at %d, want %g", v[i], i, want);
  if (x < 0) FAIL("unreachable");
  free(v);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  rcollUniqueId id;
  if (rank == 0) CHECK(rcollGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  CHECK(rcollCommInitRank(&comm, nranks, id, rank));
  int n, r;
  CHECK(rcollCommCount(comm, &n));
  CHECK(rcollCommUserRank(comm, &r));
  if (n != nranks || r != rank) FAIL("rank %d of %d, MPI says %d of %d", r, n, rank, nranks);
  size_t counts[] = {0, 1, 1000, 100003};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
      reductions(&types[t], counts[c]);
      copies(&types[t], counts[c]);
    }
  }
  size_t queued_counts[] = {1, 100003};
  for (size_t c = 0; c < sizeof queued_counts / sizeof queued_counts[0]; c++)
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
      nonblocking(&types[t], queued_counts[c]);
  CHECK(rcollBarrier(comm));
  split();
  overlap();
  CHECK(rcollCommDestroy(comm));
  printf("MPI-CHECK-OK %d %d\n", rank, nranks);
  MPI_Finalize();
  return 0;
}
