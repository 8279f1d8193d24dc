/* Timing through the C ABI, for the closing figures (bench/figures/capi.sh runs it next to
 * the same loop in Rust, collectives/examples/allreduce_time.rs). Ranks come from the
 * environment launcher.
 *
 *   bench time BYTES ITERS   the mean time of one in-place float all_reduce of BYTES
 *                            (after ITERS/10 + 2 warm-up calls): "TIME <bytes> <us>"
 *   bench overlap BYTES      rcollIAllReduce of BYTES with computation on this thread:
 *                            the medians of 5 times of the all_reduce alone, of as much
 *                            computation alone, and of both together ("OVERLAP ...";
 *                            hidden/compute = (alone + computation - both) / computation) */
#include <rcoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static rcollComm_t comm;

#define CHECK(call)                                                                  \
  do {                                                                               \
    rcollResult_t r_ = (call);                                                       \
    if (r_ != rcollSuccess) {                                                        \
      fprintf(stderr, "%s: %s: %s\n", #call, rcollGetErrorString(r_),                \
              rcollGetLastError(comm));                                              \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, by_value);
  return t[n / 2];
}

/* Work that stays in registers and L1: what overlapping can hide. */
static double compute(long steps) {
  volatile double sink = 0;
  double x = 1.0;
  for (long i = 0; i < steps; i++) x = x * 1.0000001 + 1e-9;
  sink = x;
  return sink;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench time BYTES ITERS | bench overlap BYTES\n");
    return 2;
  }
  CHECK(rcollCommInitFromEnv(&comm));
  int rank;
  CHECK(rcollCommUserRank(comm, &rank));
  size_t bytes = strtoull(argv[2], NULL, 10), count = bytes / sizeof(float);
  float *v = calloc(count ? count : 1, sizeof(float));
  if (!strcmp(argv[1], "time")) {
    int iters = argc > 3 ? atoi(argv[3]) : 100;
    for (int i = 0; i < iters / 10 + 2; i++)
      CHECK(rcollAllReduce(v, v, count, rcollFloat32, rcollSum, comm));
    CHECK(rcollBarrier(comm));
    double t0 = now();
    for (int i = 0; i < iters; i++)
      CHECK(rcollAllReduce(v, v, count, rcollFloat32, rcollSum, comm));
    double us = (now() - t0) / iters * 1e6;
    if (rank == 0) printf("TIME %zu %.3f\n", bytes, us);
  } else if (!strcmp(argv[1], "overlap")) {
    enum { REPS = 5 };
    rcollRequest_t req;
    double comm_t[REPS], compute_t[REPS], both_t[REPS], t0;
    for (int i = 0; i < 2; i++) CHECK(rcollAllReduce(v, v, count, rcollFloat32, rcollSum, comm));
    /* The all_reduce alone. */
    for (int i = 0; i < REPS; i++) {
      CHECK(rcollBarrier(comm));
      t0 = now();
      CHECK(rcollIAllReduce(v, v, count, rcollFloat32, rcollSum, comm, &req));
      CHECK(rcollWait(req));
      comm_t[i] = now() - t0;
    }
    /* Computation sized to take as long. */
    long steps = 1000000;
    t0 = now();
    compute(steps);
    steps = (long)(median(comm_t, REPS) / ((now() - t0) / steps));
    for (int i = 0; i < REPS; i++) {
      CHECK(rcollBarrier(comm));
      t0 = now();
      compute(steps);
      compute_t[i] = now() - t0;
      /* Both: start, compute, then wait. */
      CHECK(rcollBarrier(comm));
      t0 = now();
      CHECK(rcollIAllReduce(v, v, count, rcollFloat32, rcollSum, comm, &req));
      compute(steps);
      CHECK(rcollWait(req));
      both_t[i] = now() - t0;
    }
    double c = median(comm_t, REPS), w = median(compute_t, REPS), b = median(both_t, REPS);
    if (rank == 0)
      printf("OVERLAP bytes %zu comm_ms %.3f compute_ms %.3f both_ms %.3f hidden/compute %.2f\n",
             bytes, c * 1e3, w * 1e3, b * 1e3, (c + w - b) / w);
  }
  free(v);
  CHECK(rcollCommDestroy(comm));
  return 0;
}
