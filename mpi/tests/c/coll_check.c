/*
 * Every served collective x datatype x op x in-place form, each result compared with a
 * reference: for the reductions, the op applied here to every rank's data (each rank can
 * compute the others'; MPICH 4.0.2 as Debian builds it gets MPI_MIN and MPI_MAX on
 * MPI_UINT8_T and MPI_UNSIGNED_CHAR wrong above 127, so MPI's own result is no reference
 * there), for the data movements the MPI library's own (PMPI_*). Run with the shim
 * preloaded (the MPI_* calls here are then the shim's) on 2, 3 and 4 ranks; prints
 * COLL-CHECK-OK <rank> <size> at the end, and exits non-zero at the first difference.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define CHECK_NAME "COLL-CHECK"
#include "check.h"

typedef struct {
  MPI_Datatype t;
  const char *name;
  int is_float, is_signed;
  size_t size;
} dtype_t;

/* Stores v as element i of a buffer of type d. */
static void put(const dtype_t *d, void *buf, size_t i, long long v) {
  char *p = (char *)buf + i * d->size;
  if (d->is_float) {
    if (d->size == 4) { float f = (float)v; memcpy(p, &f, 4); }
    else { double f = (double)v; memcpy(p, &f, 8); }
    return;
  }
  switch (d->size) {
    case 1: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case 2: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
    case 4: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    default: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
  }
}

/* Data that keeps each op exact and free of overflow on up to 4 ranks. */
static long long value(const dtype_t *d, MPI_Op op, int r, size_t i) {
  long long base = (long long)r * 31 + (long long)i * 17 + 7;
  if (op == MPI_SUM) return d->is_signed || d->is_float ? base % 30 - 15 : base % 30;
  if (op == MPI_PROD) {
    if ((d->is_signed || d->is_float) && base % 5 == 0) return -1;
    return base % 3 == 0 ? 2 : 1;
  }
  if (op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR) /* zeros among the truths */
    return base % 3 == 0 ? 0 : d->is_signed ? base % 5 - 2 : base % 5;
  if (op == MPI_MIN || op == MPI_MAX)
    return d->is_signed || d->is_float ? base % 251 - 125 : base % 251;
  return (long long)((unsigned long long)base * 2654435761ull >> 3); /* bits */
}

static void fill(const dtype_t *d, MPI_Op op, void *buf, size_t n, int r, size_t offset) {
  for (size_t i = 0; i < n; i++) put(d, buf, i, value(d, op, r, offset + i));
}

/* One step of `op` on two values as value() makes them: exact in a long long (no sum or
 * product leaves the type's range; the bitwise ops commute with put()'s truncation). */
static long long combine(MPI_Op op, long long a, long long b) {
  if (op == MPI_SUM) return a + b;
  if (op == MPI_PROD) return a * b;
  if (op == MPI_MIN) return a < b ? a : b;
  if (op == MPI_MAX) return a > b ? a : b;
  if (op == MPI_BAND) return a & b;
  if (op == MPI_BOR) return a | b;
  if (op == MPI_BXOR) return a ^ b;
  if (op == MPI_LAND) return a && b;
  if (op == MPI_LOR) return a || b;
  return !a != !b; /* MPI_LXOR */
}

/* What reducing every rank's fill(d, op, ., n, r, offset) with `op` gives. */
static void reduced(const dtype_t *d, MPI_Op op, void *buf, size_t n, size_t offset) {
  for (size_t i = 0; i < n; i++) {
    long long acc = value(d, op, 0, offset + i);
    for (int r = 1; r < size; r++) acc = combine(op, acc, value(d, op, r, offset + i));
    put(d, buf, i, acc);
  }
}

static void same(const void *got, const void *want, size_t bytes, const char *what,
                 const dtype_t *d, const char *opname, size_t count, int in_place) {
  if (memcmp(got, want, bytes) != 0) {
    size_t at = 0;
    while (at < bytes && ((const char *)got)[at] == ((const char *)want)[at]) at++;
    FAIL("%s %s %s count %zu%s: differs from the reference at byte %zu of %zu", what, d->name, opname,
         count, in_place ? " in place" : "", at, bytes);
  }
}

static const dtype_t reduce_types[] = {
    {MPI_INT8_T, "MPI_INT8_T", 0, 1, 1},
    {MPI_UINT8_T, "MPI_UINT8_T", 0, 0, 1},
    {MPI_INT32_T, "MPI_INT32_T", 0, 1, 4},
    {MPI_UINT32_T, "MPI_UINT32_T", 0, 0, 4},
    {MPI_INT64_T, "MPI_INT64_T", 0, 1, 8},
    {MPI_UINT64_T, "MPI_UINT64_T", 0, 0, 8},
    {MPI_SIGNED_CHAR, "MPI_SIGNED_CHAR", 0, 1, 1},
    {MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR", 0, 0, 1},
    {MPI_INT, "MPI_INT", 0, 1, sizeof(int)},
    {MPI_UNSIGNED, "MPI_UNSIGNED", 0, 0, sizeof(unsigned)},
    {MPI_LONG, "MPI_LONG", 0, 1, sizeof(long)},
    {MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG", 0, 0, sizeof(unsigned long)},
    {MPI_LONG_LONG, "MPI_LONG_LONG", 0, 1, sizeof(long long)},
    {MPI_UNSIGNED_LONG_LONG, "MPI_UNSIGNED_LONG_LONG", 0, 0, sizeof(unsigned long long)},
    {MPI_FLOAT, "MPI_FLOAT", 1, 1, sizeof(float)},
    {MPI_DOUBLE, "MPI_DOUBLE", 1, 1, sizeof(double)},
};

static const struct {
  MPI_Op op;
  const char *name;
  int integers_only;
} ops[] = {
    {MPI_SUM, "MPI_SUM", 0},   {MPI_PROD, "MPI_PROD", 0}, {MPI_MIN, "MPI_MIN", 0},
    {MPI_MAX, "MPI_MAX", 0},   {MPI_BAND, "MPI_BAND", 1}, {MPI_BOR, "MPI_BOR", 1},
    {MPI_BXOR, "MPI_BXOR", 1}, {MPI_LAND, "MPI_LAND", 1}, {MPI_LOR, "MPI_LOR", 1},
    {MPI_LXOR, "MPI_LXOR", 1},
};

static long calls;

static void reductions(const dtype_t *d, MPI_Op op, const char *opname, size_t count) {
  const size_t es = d->size, all = count * (size_t)size;
  char *send = malloc(all * es + 1), *got = malloc(all * es + 1), *want = malloc(all * es + 1);
  int *counts = malloc(sizeof(int) * (size_t)size);
  const int n = (int)count;
  for (int i = 0; i < size; i++) counts[i] = n;
  for (int in_place = 0; in_place < 2; in_place++) {
    /* Allreduce */
    fill(d, op, send, count, rank, 0);
    reduced(d, op, want, count, 0);
    if (in_place) {
      memcpy(got, send, count * es);
      CHECK(MPI_Allreduce(MPI_IN_PLACE, got, n, d->t, op, MPI_COMM_WORLD));
    } else {
      memset(got, 0x5a, count * es);
      CHECK(MPI_Allreduce(send, got, n, d->t, op, MPI_COMM_WORLD));
    }
    same(got, want, count * es, "MPI_Allreduce", d, opname, count, in_place);
    /* Reduce, every root; a non-root's receive buffer NULL */
    for (int root = 0; root < size; root++) {
      fill(d, op, send, count, rank, (size_t)root);
      reduced(d, op, want, count, (size_t)root);
      if (in_place && rank == root) {
        memcpy(got, send, count * es);
        CHECK(MPI_Reduce(MPI_IN_PLACE, got, n, d->t, op, root, MPI_COMM_WORLD));
      } else {
        memset(got, 0x5a, count * es);
        CHECK(MPI_Reduce(send, rank == root ? got : NULL, n, d->t, op, root, MPI_COMM_WORLD));
      }
      if (rank == root) same(got, want, count * es, "MPI_Reduce", d, opname, count, in_place);
    }
    /* Reduce_scatter_block and Reduce_scatter with equal counts */
    for (int v = 0; v < 2; v++) {
      const char *what = v ? "MPI_Reduce_scatter" : "MPI_Reduce_scatter_block";
      fill(d, op, send, all, rank, 3);
      reduced(d, op, want, count, 3 + (size_t)rank * count);
      if (in_place) {
        memcpy(got, send, all * es);
        CHECK(v ? MPI_Reduce_scatter(MPI_IN_PLACE, got, counts, d->t, op, MPI_COMM_WORLD)
                : MPI_Reduce_scatter_block(MPI_IN_PLACE, got, n, d->t, op, MPI_COMM_WORLD));
      } else {
        memset(got, 0x5a, count * es);
        CHECK(v ? MPI_Reduce_scatter(send, got, counts, d->t, op, MPI_COMM_WORLD)
                : MPI_Reduce_scatter_block(send, got, n, d->t, op, MPI_COMM_WORLD));
      }
      same(got, want, count * es, what, d, opname, count, in_place);
      /* In place, the blocks after the first keep the input, as MPI libraries leave them
       * (mpi4py's tests check it). */
      if (in_place && memcmp(got + count * es, send + count * es, (all - count) * es) != 0)
        FAIL("%s %s %s count %zu in place: the input after the first block changed", what,
             d->name, opname, count);
    }
    calls += 3 + size;
  }
  free(send), free(got), free(want), free(counts);
}

static const dtype_t move_types[] = {
    {MPI_BYTE, "MPI_BYTE", 0, 0, 1},
    {MPI_CHAR, "MPI_CHAR", 0, 1, 1},
    {MPI_SHORT, "MPI_SHORT", 0, 1, sizeof(short)},
    {MPI_INT, "MPI_INT", 0, 1, sizeof(int)},
    {MPI_UINT64_T, "MPI_UINT64_T", 0, 0, 8},
    {MPI_FLOAT, "MPI_FLOAT", 1, 1, sizeof(float)},
    {MPI_DOUBLE, "MPI_DOUBLE", 1, 1, sizeof(double)},
};

static void movements(const dtype_t *d, size_t count) {
  const size_t es = d->size, all = count * (size_t)size, bytes = count * es;
  char *send = malloc(all * es), *got = malloc(all * es), *want = malloc(all * es);
  const int n = (int)count;
  const MPI_Op bits = MPI_BXOR; /* any pattern */
  for (int in_place = 0; in_place < 2; in_place++) {
    for (int root = 0; root < size; root++) {
      /* Bcast: one buffer */
      fill(d, bits, want, count, root, 1);
      if (rank == root) memcpy(got, want, bytes); else memset(got, 0x5a, bytes);
      CHECK(MPI_Bcast(got, n, d->t, root, MPI_COMM_WORLD));
      same(got, want, bytes, "MPI_Bcast", d, "", count, 0);
      /* Gather */
      fill(d, bits, send, count, rank, (size_t)root);
      CHECK(PMPI_Gather(send, n, d->t, want, n, d->t, root, MPI_COMM_WORLD));
      memset(got, 0x5a, all * es);
      if (in_place && rank == root) {
        memcpy(got + (size_t)root * bytes, send, bytes);
        CHECK(MPI_Gather(MPI_IN_PLACE, n, d->t, got, n, d->t, root, MPI_COMM_WORLD));
      } else {
        CHECK(MPI_Gather(send, n, d->t, rank == root ? got : NULL, n, d->t, root,
                         MPI_COMM_WORLD));
      }
      if (rank == root) same(got, want, all * es, "MPI_Gather", d, "", count, in_place);
      /* Scatter */
      fill(d, bits, send, all, rank, (size_t)root + 5);
      CHECK(PMPI_Scatter(send, n, d->t, want, n, d->t, root, MPI_COMM_WORLD));
      if (in_place && rank == root) {
        CHECK(MPI_Scatter(send, n, d->t, MPI_IN_PLACE, n, d->t, root, MPI_COMM_WORLD));
        memcpy(got, send + (size_t)root * bytes, bytes);
      } else {
        memset(got, 0x5a, bytes);
        CHECK(MPI_Scatter(rank == root ? send : NULL, n, d->t, got, n, d->t, root,
                          MPI_COMM_WORLD));
      }
      same(got, want, bytes, "MPI_Scatter", d, "", count, in_place);
    }
    /* Allgather */
    fill(d, bits, send, count, rank, 2);
    CHECK(PMPI_Allgather(send, n, d->t, want, n, d->t, MPI_COMM_WORLD));
    memset(got, 0x5a, all * es);
    if (in_place) {
      memcpy(got + (size_t)rank * bytes, send, bytes);
      CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, got, n, d->t, MPI_COMM_WORLD));
    } else {
      CHECK(MPI_Allgather(send, n, d->t, got, n, d->t, MPI_COMM_WORLD));
    }
    same(got, want, all * es, "MPI_Allgather", d, "", count, in_place);
    /* Alltoall */
    fill(d, bits, send, all, rank, 4);
    CHECK(PMPI_Alltoall(send, n, d->t, want, n, d->t, MPI_COMM_WORLD));
    if (in_place) {
      memcpy(got, send, all * es);
      CHECK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, got, n, d->t, MPI_COMM_WORLD));
    } else {
      memset(got, 0x5a, all * es);
      CHECK(MPI_Alltoall(send, n, d->t, got, n, d->t, MPI_COMM_WORLD));
    }
    same(got, want, all * es, "MPI_Alltoall", d, "", count, in_place);
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    calls += 3 * size + 3;
  }
  free(send), free(got), free(want);
}

/* Types that differ between ranks but agree in bytes, buffers rcoll must stage. */
static void odd_cases(void) {
  /* Bcast: the root sends 6 MPI_INT, the others receive 3 of a contiguous pair of ints. */
  MPI_Datatype pair;
  CHECK(MPI_Type_contiguous(2, MPI_INT, &pair));
  CHECK(MPI_Type_commit(&pair));
  int ints[6], want[6];
  for (int i = 0; i < 6; i++) want[i] = 1000 + i, ints[i] = rank == 0 ? want[i] : -1;
  if (rank == 0) CHECK(MPI_Bcast(ints, 6, MPI_INT, 0, MPI_COMM_WORLD));
  else CHECK(MPI_Bcast(ints, 3, pair, 0, MPI_COMM_WORLD));
  if (memcmp(ints, want, sizeof ints)) FAIL("Bcast of MPI_INT into pairs of ints differs");
  CHECK(MPI_Type_free(&pair));
  /* A root gathering columns of a matrix (a vector type resized to one double) while the
   * others send plain doubles, and scattering them back; an Allgather and an Alltoall of
   * strided data on every rank; each against PMPI's. */
  {
    enum { ROWS = 5 };
    const int cols = size;
    MPI_Datatype column, col1;
    CHECK(MPI_Type_vector(ROWS, 1, cols, MPI_DOUBLE, &column));
    CHECK(MPI_Type_create_resized(column, 0, sizeof(double), &col1));
    CHECK(MPI_Type_commit(&col1));
    double mine[ROWS], *m = malloc(sizeof(double) * ROWS * (size_t)cols),
                       *ref = malloc(sizeof(double) * ROWS * (size_t)cols);
    for (int i = 0; i < ROWS; i++) mine[i] = rank * 100 + i;
    for (int root = 0; root < size; root++) {
      for (int i = 0; i < ROWS * cols; i++) m[i] = ref[i] = -1;
      CHECK(PMPI_Gather(mine, ROWS, MPI_DOUBLE, ref, 1, col1, root, MPI_COMM_WORLD));
      CHECK(MPI_Gather(mine, ROWS, MPI_DOUBLE, m, 1, col1, root, MPI_COMM_WORLD));
      if (rank == root && memcmp(m, ref, sizeof(double) * ROWS * (size_t)cols))
        FAIL("Gather into columns differs (root %d)", root);
      double back[ROWS], back_ref[ROWS];
      CHECK(PMPI_Scatter(ref, 1, col1, back_ref, ROWS, MPI_DOUBLE, root, MPI_COMM_WORLD));
      CHECK(MPI_Scatter(ref, 1, col1, back, ROWS, MPI_DOUBLE, root, MPI_COMM_WORLD));
      if (memcmp(back, back_ref, sizeof back)) FAIL("Scatter of columns differs (root %d)", root);
    }
    /* Allgather: each rank's column of a matrix every rank holds. */
    for (int i = 0; i < ROWS * cols; i++) m[i] = ref[i] = rank == i % cols ? i : -1;
    CHECK(PMPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ref, 1, col1, MPI_COMM_WORLD));
    CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, m, 1, col1, MPI_COMM_WORLD));
    if (memcmp(m, ref, sizeof(double) * ROWS * (size_t)cols)) FAIL("in-place Allgather of columns differs");
    double *t = malloc(sizeof(double) * ROWS * (size_t)cols);
    for (int i = 0; i < ROWS * cols; i++) t[i] = rank * 1000 + i;
    CHECK(PMPI_Alltoall(t, 1, col1, ref, ROWS, MPI_DOUBLE, MPI_COMM_WORLD));
    CHECK(MPI_Alltoall(t, 1, col1, m, ROWS, MPI_DOUBLE, MPI_COMM_WORLD));
    if (memcmp(m, ref, sizeof(double) * ROWS * (size_t)cols)) FAIL("Alltoall of columns differs");
    CHECK(MPI_Type_free(&col1));
    CHECK(MPI_Type_free(&column));
    free(m), free(ref), free(t);
    calls += 2 * size + 2;
  }
  /* Allreduce on misaligned doubles, send and receive. */
  char *raw = malloc(8 * 101 * 2 + 2), *ref = malloc(8 * 101);
  double *s = (double *)(void *)(raw + 1), *r = (double *)(void *)(raw + 8 * 101 + 2);
  for (int i = 0; i < 101; i++) {
    double v = rank * 3 + i;
    memcpy((char *)s + 8 * i, &v, 8);
  }
  CHECK(PMPI_Allreduce(s, ref, 101, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  CHECK(MPI_Allreduce(s, r, 101, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  if (memcmp(r, ref, 8 * 101)) FAIL("Allreduce on misaligned doubles differs");
  CHECK(MPI_Allreduce(MPI_IN_PLACE, s, 101, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  if (memcmp(s, ref, 8 * 101)) FAIL("in-place Allreduce on misaligned doubles differs");
  /* MPI_BYTE with the bitwise ops. */
  unsigned char b[5] = {(unsigned char)(rank + 1), 0xf0, (unsigned char)(1u << rank), 3, 0xff},
                bw[5], bg[5];
  CHECK(PMPI_Allreduce(b, bw, 5, MPI_BYTE, MPI_BOR, MPI_COMM_WORLD));
  CHECK(MPI_Allreduce(b, bg, 5, MPI_BYTE, MPI_BOR, MPI_COMM_WORLD));
  if (memcmp(bg, bw, 5)) FAIL("MPI_BOR on MPI_BYTE differs");
  /* Count 0 and a large Allreduce. */
  CHECK(MPI_Allreduce(MPI_IN_PLACE, NULL, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  size_t big = (size_t)1 << 20;
  float *fs = malloc(big * 4), *fw = malloc(big * 4), *fg = malloc(big * 4);
  for (size_t i = 0; i < big; i++) fs[i] = (float)((i + (size_t)rank) % 64);
  CHECK(PMPI_Allreduce(fs, fw, (int)big, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  CHECK(MPI_Allreduce(fs, fg, (int)big, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  if (memcmp(fg, fw, big * 4)) FAIL("4 MiB Allreduce differs");
  free(raw), free(ref), free(fs), free(fw), free(fg);
  calls += 8;
}

int main(int argc, char **argv) {
  int provided;
  if (argc > 1 && strcmp(argv[1], "thread") == 0)
    CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  else
    CHECK(MPI_Init(&argc, &argv));
  CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  const size_t counts[] = {1, 7, 1000};
  for (size_t t = 0; t < sizeof reduce_types / sizeof reduce_types[0]; t++)
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
      if (ops[o].integers_only && reduce_types[t].is_float) continue;
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        reductions(&reduce_types[t], ops[o].op, ops[o].name, counts[c]);
    }
  for (size_t t = 0; t < sizeof move_types / sizeof move_types[0]; t++)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
      movements(&move_types[t], counts[c]);
  odd_cases();
  printf("COLL-CHECK-OK %d %d %ld\n", rank, size, calls);
  fflush(stdout);
  CHECK(MPI_Finalize());
  return 0;
}
