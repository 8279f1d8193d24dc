/* Registered memory through the C API (rcollMemAlloc, rcollMemFree, rcollCommRegister,
 * rcollCommDeregister), in ranks started with the environment launcher (RCOLL_RANK,
 * RCOLL_WORLD_SIZE, RCOLL_ROOT_ADDR, RCOLL_UNIQUE_ID). The pattern NCCL documents: allocate,
 * register with the communicator, run collectives on the buffer, deregister, free.
 *
 * Checks: rcollMemAlloc's memory is zeroed and page-aligned; collectives on registered
 * buffers (rcollMemAlloc's and malloc's, in place and not, blocking and queued) give the
 * sums every rank can compute; a range registered twice, a range inside a registered one
 * and one across its edge all register; misuse is refused (rcollInvalidArgument) with a
 * message and leaves the communicator usable: NULL and zero sizes, freeing foreign or
 * freed memory, a stale handle, deregistering through another communicator.
 * Prints "MEMORY-OK <rank>". */
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
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

/* `call` returns rcollInvalidArgument with a message containing `words` (the last error
 * of `in`: a communicator, or NULL for this thread's). */
#define REFUSED(call, words, in)                                                          \
  do {                                                                                    \
    rcollResult_t r_ = (call);                                                            \
    const char *m_ = rcollGetLastError(in);                                               \
    if (r_ != rcollInvalidArgument || !strstr(m_, words)) {                               \
      fprintf(stderr, "rank %d: %s returned %s, message \"%s\", expected \"%s\"\n", rank, \
              #call, rcollGetErrorString(r_), m_, words);                                 \
      exit(1);                                                                            \
    }                                                                                     \
    printf("REFUSED %s: %s\n", #call, m_);                                                \
  } while (0)

/* Element i of rank r's contribution: small integers, so float sums are exact. */
static float term(int r, size_t i) { return (float)((r * 7 + (int)(i % 251)) % 64); }

static float sum_of_terms(size_t i) {
  float s = 0;
  for (int r = 0; r < nranks; r++) s += term(r, i);
  return s;
}

static void expect_sums(const float *got, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++) {
    if (got[i] != sum_of_terms(i)) {
      fprintf(stderr, "rank %d: %s: element %zu is %g, want %g\n", rank, what, i, got[i],
              sum_of_terms(i));
      exit(1);
    }
  }
}

int main(void) {
  CHECK(rcollCommInitFromEnv(&comm));
  CHECK(rcollCommCount(comm, &nranks));
  CHECK(rcollCommUserRank(comm, &rank));

  /* 1 MiB and a bit: whole segments and a ragged end. */
  const size_t n = (1 << 18) + 3, bytes = n * sizeof(float);
  float *a = NULL;
  CHECK(rcollMemAlloc((void **)&a, bytes));
  if ((uintptr_t)a % 4096 != 0) {
    fprintf(stderr, "rank %d: rcollMemAlloc gave %p, not page-aligned\n", rank, (void *)a);
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    if (a[i] != 0) {
      fprintf(stderr, "rank %d: rcollMemAlloc's memory is not zeroed at %zu\n", rank, i);
      return 1;
    }
  }
  float *b = malloc(bytes);
  void *ha = NULL, *hb = NULL;
  CHECK(rcollCommRegister(comm, a, bytes, &ha));
  CHECK(rcollCommRegister(comm, b, bytes, &hb));
  if (!ha || !hb) {
    fprintf(stderr, "rank %d: a NULL registration handle\n", rank);
    return 1;
  }

  /* Out of place from registered memory into registered memory, then in place. */
  for (size_t i = 0; i < n; i++) a[i] = term(rank, i);
  CHECK(rcollAllReduce(a, b, n, rcollFloat32, rcollSum, comm));
  expect_sums(b, n, "rcollAllReduce a -> b");
  CHECK(rcollAllReduce(a, a, n, rcollFloat32, rcollSum, comm));
  expect_sums(a, n, "rcollAllReduce in place");
  /* Queued on the progress thread, from and into registered memory. */
  for (size_t i = 0; i < n; i++) a[i] = term(rank, i);
  rcollRequest_t req;
  CHECK(rcollIAllReduce(a, b, n, rcollFloat32, rcollSum, comm, &req));
  CHECK(rcollWait(req));
  expect_sums(b, n, "rcollIAllReduce a -> b");
  /* Every rank's block, gathered into registered memory. */
  const size_t per = n / (size_t)nranks;
  for (size_t i = 0; i < per; i++) a[i] = term(rank, i);
  CHECK(rcollAllGather(a, b, per, rcollFloat32, comm));
  for (int r = 0; r < nranks; r++) {
    for (size_t i = 0; i < per; i++) {
      if (b[(size_t)r * per + i] != term(r, i)) {
        fprintf(stderr, "rank %d: rcollAllGather: rank %d's element %zu is %g\n", rank, r, i,
                b[(size_t)r * per + i]);
        return 1;
      }
    }
  }

  /* The same range again and a range inside it register (zero-copy already); so does one
   * across a registered range's edge (sends from it are copied), and collectives on it
   * are right. */
  void *again = NULL, *inside = NULL, *first_half = NULL, *across = NULL;
  CHECK(rcollCommRegister(comm, a, bytes, &again));
  CHECK(rcollCommRegister(comm, a + 1000, 4096, &inside));
  float *c = malloc(bytes);
  CHECK(rcollCommRegister(comm, c, bytes / 2, &first_half));
  CHECK(rcollCommRegister(comm, (char *)c + bytes / 4, bytes / 2, &across));
  for (size_t i = 0; i < n; i++) c[i] = term(rank, i);
  CHECK(rcollAllReduce(c, c, n, rcollFloat32, rcollSum, comm));
  expect_sums(c, n, "rcollAllReduce on overlapping registrations");
  CHECK(rcollCommDeregister(comm, across));
  CHECK(rcollCommDeregister(comm, first_half));
  CHECK(rcollCommDeregister(comm, inside));
  CHECK(rcollCommDeregister(comm, again));
  free(c);

  /* Misuse, each refused with a message; the communicator stays usable. */
  REFUSED(rcollMemAlloc(NULL, 64), "ptr is NULL", NULL);
  void *p = NULL;
  REFUSED(rcollMemAlloc(&p, 0), "size is 0", NULL);
  REFUSED(rcollMemFree(b), "not allocated by rcollMemAlloc", NULL);
  void *h = NULL;
  REFUSED(rcollCommRegister(comm, NULL, 64, &h), "nothing to register", comm);
  REFUSED(rcollCommRegister(comm, b, 0, &h), "nothing to register", comm);
  REFUSED(rcollCommRegister(comm, b, 64, NULL), "handle is NULL", comm);
  rcollComm_t half;
  CHECK(rcollCommSplit(comm, rank % 2, rank, &half));
  REFUSED(rcollCommDeregister(half, hb), "another communicator", half);
  CHECK(rcollCommDestroy(half));
  REFUSED(rcollCommDeregister(comm, (void *)(uintptr_t)0x12345679), "not a live registration",
          comm);
  REFUSED(rcollCommDeregister(comm, (void *)comm), "not a live registration", comm);
  CHECK(rcollCommDeregister(comm, hb));
  REFUSED(rcollCommDeregister(comm, hb), "not a live registration", comm);
  CHECK(rcollCommDeregister(comm, ha));
  CHECK(rcollMemFree(a));
  REFUSED(rcollMemFree(a), "freed already", NULL);
  CHECK(rcollMemFree(NULL));

  /* After all that: the communicator works, on plain memory now. */
  for (size_t i = 0; i < n; i++) b[i] = term(rank, i);
  CHECK(rcollAllReduce(b, b, n, rcollFloat32, rcollSum, comm));
  expect_sums(b, n, "rcollAllReduce after the misuse");
  free(b);
  CHECK(rcollCommDestroy(comm));
  printf("MEMORY-OK %d\n", rank);
  return 0;
}
