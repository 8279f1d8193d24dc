/* Errors through the C API, in ranks started with the environment launcher
 * (RCOLL_RANK, RCOLL_WORLD_SIZE, RCOLL_ROOT_ADDR, RCOLL_UNIQUE_ID).
 *
 *   errors args    bad arguments, each rcollInvalidArgument with a clear message and no
 *                  communication, then correct collectives on the same communicator;
 *                  prints "ERRORS-ARGS-OK".
 *   errors killed  the last rank kills itself (SIGKILL) after one all_reduce; the others
 *                  keep calling until a call fails, and print the code and the message
 *                  ("KILLED-SEEN <code> <message>").
 *   errors handles stale, freed and foreign handles, each refused (rcollInvalidArgument)
 *                  instead of read: a request after rcollTest said done, a request waited
 *                  twice, a destroyed communicator, a request given as a communicator, a
 *                  made-up handle; prints "ERRORS-HANDLES-OK".
 *   errors timeout the last rank stays away (alive, silent) from an all_reduce the others
 *                  call with RCOLL_TIMEOUT short: theirs return rcollTimeout naming it
 *                  ("TIMEOUT-SEEN <code> <message>").
 *   errors abort   rank 0's all_reduce blocks (no other rank joins it) and a second thread
 *                  aborts the communicator; the all_reduce returns at once with an error,
 *                  not after RCOLL_TIMEOUT, and the other ranks' blocked receives fail
 *                  naming rank 0 ("ABORT-SEEN <code> <ms> <message>").
 *   errors nonblocking
 *                  queued all-reduces, an all-gather, a broadcast and a reduce-scatter
 *                  issued by the main thread and completed by a second one (rcollTest
 *                  until done, the last with rcollWait) while the first computes; every
 *                  result checked ("ERRORS-NONBLOCKING-OK"). */
#include <pthread.h>
#include <rcoll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

/* `call` must return rcollInvalidArgument with a message that contains `words` (the
 * communicator's last error; for calls without one, this thread's: REFUSED_NC). */
#define REFUSED(call, words) REFUSED_IN(call, words, comm)
#define REFUSED_NC(call, words) REFUSED_IN(call, words, NULL)
#define REFUSED_IN(call, words, in)                                                       \
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

static int args(void) {
  float buf[64];
  char bytes[64] = {0};
  rcollRequest_t req;
  int x;
  REFUSED(rcollAllReduce(NULL, buf, 4, rcollFloat32, rcollSum, comm), "sendbuff is NULL");
  REFUSED(rcollAllReduce(buf, NULL, 4, rcollFloat32, rcollSum, comm), "recvbuff is NULL");
  REFUSED(rcollAllReduce(bytes + 1, bytes + 1, 4, rcollFloat32, rcollSum, comm),
          "not aligned to 4 bytes");
  REFUSED(rcollAllReduce(buf, buf, 4, (rcollDataType_t)42, rcollSum, comm),
          "datatype 42 is not an rcollDataType_t");
  REFUSED(rcollAllReduce(buf, buf, 4, rcollFloat32, (rcollRedOp_t)-3, comm),
          "op -3 is not an rcollRedOp_t");
  REFUSED(rcollAllReduce(buf, buf, SIZE_MAX, rcollFloat32, rcollSum, comm), "overflows");
  REFUSED(rcollAllGather(buf, buf, SIZE_MAX / 2, rcollUint8, comm), "overflows");
  REFUSED(rcollAllReduce(buf, buf + 1, 4, rcollFloat32, rcollSum, comm), "overlap");
  REFUSED(rcollBroadcast(buf, buf, 4, rcollFloat32, nranks, comm), "root");
  REFUSED(rcollReduce(buf, buf, 4, rcollFloat32, rcollSum, -1, comm), "root -1");
  REFUSED(rcollSend(buf, 4, rcollFloat32, rank, comm), "peer");
  REFUSED(rcollIAllReduce(buf, buf, 4, rcollFloat32, rcollSum, comm, NULL), "request is NULL");
  REFUSED(rcollIAllReduce(buf, buf, 4, (rcollDataType_t)10, rcollSum, comm, &req),
          "rcollIAllReduce: datatype 10");
  REFUSED(rcollCommSplit(comm, 0, 0, NULL), "newcomm is NULL");
  /* A misaligned request: refused before anything is queued (a queued call would put this
   * rank one collective ahead of the others, and the sums below would hang or differ). */
  REFUSED(rcollIAllReduce(buf, buf, 4, rcollFloat32, rcollSum, comm,
                          (rcollRequest_t *)(void *)(bytes + 1)),
          "request is misaligned");
  if (strcmp(rcollGetErrorString((rcollResult_t)42), "unknown result code")) {
    fprintf(stderr, "rank %d: rcollGetErrorString(42) = %s\n", rank,
            rcollGetErrorString((rcollResult_t)42));
    return 1;
  }
  REFUSED(rcollCommCount(comm, NULL), "count is NULL");
  REFUSED(rcollCommUserRank(comm, NULL), "rank is NULL");
  REFUSED_NC(rcollAllReduce(buf, buf, 4, rcollFloat32, rcollSum, NULL), "comm is NULL");
  REFUSED_NC(rcollWait(NULL), "rcollWait: request is NULL");
  REFUSED_NC(rcollTest(NULL, &x), "rcollTest: request is NULL");
  REFUSED_NC(rcollCommInitRank(NULL, 2, (rcollUniqueId){{0}}, 0), "comm is NULL");
  rcollComm_t other;
  REFUSED_NC(rcollCommInitRank(&other, 2, (rcollUniqueId){{0}}, 0), "not an rcoll unique id");
  REFUSED_NC(rcollCommInitRank(&other, 2, (rcollUniqueId){{0}}, 2), "rank 2 is not in a group of 2");
  /* Each message names this rank. */
  char me[32];
  snprintf(me, sizeof me, "rank %d", rank);
  REFUSED(rcollAllReduce(NULL, buf, 4, rcollFloat32, rcollSum, comm), me);
  /* The communicator is still usable: every rank sums, and gets the sum. */
  for (int i = 0; i < 64; i++) buf[i] = (float)(rank + i);
  CHECK(rcollAllReduce(buf, buf, 64, rcollFloat32, rcollSum, comm));
  for (int i = 0; i < 64; i++) {
    float want = (float)(nranks * (nranks - 1) / 2 + nranks * i);
    if (buf[i] != want) {
      fprintf(stderr, "rank %d: %g at %d after the refusals, want %g\n", rank, buf[i], i, want);
      return 1;
    }
  }
  /* The 16-bit floats, as bit patterns: 1.0 summed over 1 to 4 ranks. */
  static const uint16_t f16_one = 0x3C00, f16_sum[] = {0, 0x3C00, 0x4000, 0x4200, 0x4400};
  static const uint16_t bf16_one = 0x3F80, bf16_sum[] = {0, 0x3F80, 0x4000, 0x4040, 0x4080};
  uint16_t h[7];
  for (int k = 0; k < 2 && nranks <= 4; k++) {
    for (int i = 0; i < 7; i++) h[i] = k ? bf16_one : f16_one;
    CHECK(rcollAllReduce(h, h, 7, k ? rcollBfloat16 : rcollFloat16, rcollSum, comm));
    for (int i = 0; i < 7; i++) {
      if (h[i] != (k ? bf16_sum : f16_sum)[nranks]) {
        fprintf(stderr, "rank %d: %s sum %#x\n", rank, k ? "bf16" : "f16", h[i]);
        return 1;
      }
    }
  }
  /* The nonblocking form's result too: the largest of rank * i over the ranks. */
  for (int i = 0; i < 64; i++) buf[i] = (float)(rank * i);
  CHECK(rcollIAllReduce(buf, buf, 64, rcollFloat32, rcollMax, comm, &req));
  CHECK(rcollWait(req));
  for (int i = 0; i < 64; i++) {
    if (buf[i] != (float)((nranks - 1) * i)) {
      fprintf(stderr, "rank %d: max %g at %d, want %d\n", rank, buf[i], i, (nranks - 1) * i);
      return 1;
    }
  }
  if (rcollGetVersion(&x) != rcollSuccess || x < 0) return 1;
  CHECK(rcollCommDestroy(comm));
  printf("ERRORS-ARGS-OK %d\n", rank);
  return 0;
}

static int killed(void) {
  float buf[1024];
  for (int i = 0; i < 1024; i++) buf[i] = 1.0f;
  CHECK(rcollAllReduce(buf, buf, 1024, rcollFloat32, rcollSum, comm));
  if (rank == nranks - 1) raise(SIGKILL);
  for (int round = 0; round < 1000000; round++) {
    rcollResult_t r = rcollAllReduce(buf, buf, 1024, rcollFloat32, rcollSum, comm);
    if (r != rcollSuccess) {
      printf("KILLED-SEEN %d %s\n", (int)r, rcollGetLastError(comm));
      /* The communicator stays unusable, and says why. */
      r = rcollBarrier(comm);
      printf("AFTER %d %s\n", (int)r, rcollGetLastError(comm));
      rcollCommDestroy(comm);
      return 0;
    }
  }
  fprintf(stderr, "rank %d: a million all_reduces without the dead rank\n", rank);
  return 1;
}

static int handles(void) {
  float buf[16] = {0};
  int done = 0;
  rcollRequest_t req;
  /* rcollTest says done: the request is complete and gone; waiting on it is refused. */
  CHECK(rcollIAllReduce(buf, buf, 16, rcollFloat32, rcollSum, comm, &req));
  while (!done) CHECK(rcollTest(req, &done));
  REFUSED_NC(rcollWait(req), "not live");
  REFUSED_NC(rcollTest(req, &done), "not live");
  /* Waited once, then again. */
  CHECK(rcollIAllReduce(buf, buf, 16, rcollFloat32, rcollSum, comm, &req));
  CHECK(rcollWait(req));
  REFUSED_NC(rcollWait(req), "not live");
  /* A request handle where a communicator goes, and the reverse; a made-up value. */
  rcollRequest_t live;
  CHECK(rcollIAllReduce(buf, buf, 16, rcollFloat32, rcollSum, comm, &live));
  REFUSED_NC(rcollAllReduce(buf, buf, 16, rcollFloat32, rcollSum, (rcollComm_t)(void *)live),
             "not a live communicator");
  REFUSED_NC(rcollWait((rcollRequest_t)(void *)comm), "not live");
  REFUSED_NC(rcollCommDestroy((rcollComm_t)(uintptr_t)0x12345678), "not a live communicator");
  CHECK(rcollWait(live));
  /* A split communicator destroyed twice, then used. */
  rcollComm_t half;
  CHECK(rcollCommSplit(comm, rank % 2, rank, &half));
  CHECK(rcollAllReduce(buf, buf, 16, rcollFloat32, rcollSum, half));
  CHECK(rcollCommDestroy(half));
  REFUSED_NC(rcollCommDestroy(half), "not a live communicator");
  REFUSED_NC(rcollCommAbort(half), "not a live communicator");
  REFUSED_NC(rcollBarrier(half), "not a live communicator");
  /* The values: 16 zeros summed stay zeros; the group is still usable. */
  for (int i = 0; i < 16; i++) buf[i] = 1.0f;
  CHECK(rcollAllReduce(buf, buf, 16, rcollFloat32, rcollSum, comm));
  for (int i = 0; i < 16; i++) {
    if (buf[i] != (float)nranks) {
      fprintf(stderr, "rank %d: %g after the misuse, want %d\n", rank, buf[i], nranks);
      return 1;
    }
  }
  CHECK(rcollCommDestroy(comm));
  REFUSED_NC(rcollCommDestroy(comm), "not a live communicator");
  printf("ERRORS-HANDLES-OK %d\n", rank);
  return 0;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static float abort_buf[1 << 16];
static atomic_int caller_tid;
static double aborted_at;

/* Whether thread `tid` of this process sleeps in the kernel (state S in its stat, which
   follows the command's closing parenthesis): blocked in its call's wait. */
static int asleep(int tid) {
  char path[64], stat[512];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(stat, 1, sizeof stat - 1, f);
  fclose(f);
  stat[n] = 0;
  char *end = strrchr(stat, ')');
  return end && end[1] == ' ' && end[2] == 'S';
}

static void *aborter(void *unused) {
  (void)unused;
  while (!atomic_load(&caller_tid)) usleep(1000);
  /* The gate: the call is in its wait, so the abort must interrupt it (one before the call
     would make it refuse a handle already gone instead). */
  double give_up = now_ms() + 10000;
  while (!asleep(atomic_load(&caller_tid))) {
    if (now_ms() > give_up) {
      fprintf(stderr, "rank 0: the call never blocked\n");
      exit(1);
    }
    usleep(1000);
  }
  aborted_at = now_ms();
  rcollResult_t r = rcollCommAbort(comm);
  if (r != rcollSuccess) {
    fprintf(stderr, "rank 0: rcollCommAbort returned %s\n", rcollGetErrorString(r));
    exit(1);
  }
  return NULL;
}

static int abort_blocked(void) {
  /* One collective together first: every connection is up. */
  CHECK(rcollBarrier(comm));
  if (rank == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, aborter, NULL)) return 1;
    atomic_store(&caller_tid, (int)syscall(SYS_gettid));
    rcollResult_t r = rcollAllReduce(abort_buf, abort_buf, 1 << 16, rcollFloat32, rcollSum, comm);
    double ended = now_ms();
    pthread_join(t, NULL);
    printf("ABORT-SEEN %d %.0f %s\n", (int)r, ended - aborted_at, rcollGetLastError(comm));
    /* The handle is gone: the abort ended it. */
    REFUSED_NC(rcollBarrier(comm), "not a live communicator");
    return 0;
  }
  /* Blocked until rank 0's abort reaches this rank. */
  double start = now_ms();
  rcollResult_t r = rcollRecv(abort_buf, 4, rcollFloat32, 0, comm);
  printf("ABORT-SEEN %d %.0f %s\n", (int)r, now_ms() - start, rcollGetLastError(comm));
  rcollCommDestroy(comm);
  return 0;
}

static int timeout_seen(void) {
  float buf[16] = {0};
  CHECK(rcollAllReduce(buf, buf, 16, rcollFloat32, rcollSum, comm));
  if (rank == nranks - 1) {
    /* Away for longer than the others' timeout, then gone without a word. */
    sleep(4);
    _exit(0);
  }
  rcollResult_t r = rcollAllReduce(buf, buf, 16, rcollFloat32, rcollSum, comm);
  printf("TIMEOUT-SEEN %d %s\n", (int)r, rcollGetLastError(comm));
  rcollCommDestroy(comm);
  return 0;
}

#define NB_COUNT 4096
#define NB_SUMS 4
static float nb_sum[NB_SUMS][NB_COUNT];
static float nb_mine[NB_COUNT], nb_gathered[64 * NB_COUNT], nb_bcast[NB_COUNT];
static float nb_blocks[64 * NB_COUNT], nb_block[NB_COUNT];
static rcollRequest_t nb_req[NB_SUMS + 3];

/* Completes every request the main thread issued (handed over by pthread_create). */
static void *completer(void *unused) {
  (void)unused;
  int done[NB_SUMS + 3] = {0}, left = NB_SUMS + 2;
  while (left > 0) {
    for (int i = 0; i < NB_SUMS + 2; i++) {
      if (done[i]) continue;
      CHECK(rcollTest(nb_req[i], &done[i]));
      left -= done[i];
    }
  }
  CHECK(rcollWait(nb_req[NB_SUMS + 2]));
  return NULL;
}

static int nonblocking(void) {
  if (nranks > 64) return 2;
  for (int k = 0; k < NB_SUMS; k++)
    for (int i = 0; i < NB_COUNT; i++) nb_sum[k][i] = (float)(rank + k + i % 7);
  for (int i = 0; i < NB_COUNT; i++) {
    nb_mine[i] = (float)(rank * 1000 + i % 100);
    nb_bcast[i] = rank == 0 ? (float)(i % 31) : -1.0f;
  }
  for (int i = 0; i < nranks * NB_COUNT; i++) nb_blocks[i] = (float)(rank + i % 5);
  for (int k = 0; k < NB_SUMS; k++)
    CHECK(rcollIAllReduce(nb_sum[k], nb_sum[k], NB_COUNT, rcollFloat32, rcollSum, comm,
                          &nb_req[k]));
  CHECK(rcollIAllGather(nb_mine, nb_gathered, NB_COUNT, rcollFloat32, comm, &nb_req[NB_SUMS]));
  CHECK(rcollIBroadcast(nb_bcast, nb_bcast, NB_COUNT, rcollFloat32, 0, comm,
                        &nb_req[NB_SUMS + 1]));
  CHECK(rcollIReduceScatter(nb_blocks, nb_block, NB_COUNT, rcollFloat32, rcollSum, comm,
                            &nb_req[NB_SUMS + 2]));
  pthread_t t;
  if (pthread_create(&t, NULL, completer, NULL)) return 1;
  /* Work of this thread's own meanwhile. */
  volatile double x = 0;
  for (int i = 0; i < 1000000; i++) x += i * 0.5;
  pthread_join(t, NULL);
  int n = nranks, bad = 0;
  for (int k = 0; k < NB_SUMS; k++)
    for (int i = 0; i < NB_COUNT; i++)
      bad += nb_sum[k][i] != (float)(n * (n - 1) / 2 + n * (k + i % 7));
  for (int r = 0; r < n; r++)
    for (int i = 0; i < NB_COUNT; i++) bad += nb_gathered[r * NB_COUNT + i] != (float)(r * 1000 + i % 100);
  for (int i = 0; i < NB_COUNT; i++) bad += nb_bcast[i] != (float)(i % 31);
  for (int i = 0; i < NB_COUNT; i++)
    bad += nb_block[i] != (float)(n * (n - 1) / 2 + n * ((rank * NB_COUNT + i) % 5));
  if (bad) {
    fprintf(stderr, "rank %d: %d wrong values after the nonblocking calls\n", rank, bad);
    return 1;
  }
  CHECK(rcollCommDestroy(comm));
  printf("ERRORS-NONBLOCKING-OK %d\n", rank);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: errors args|killed|handles|abort|timeout|nonblocking\n");
    return 2;
  }
  CHECK(rcollCommInitFromEnv(&comm));
  CHECK(rcollCommUserRank(comm, &rank));
  CHECK(rcollCommCount(comm, &nranks));
  if (!strcmp(argv[1], "args")) return args();
  if (!strcmp(argv[1], "killed")) return killed();
  if (!strcmp(argv[1], "handles")) return handles();
  if (!strcmp(argv[1], "abort")) return abort_blocked();
  if (!strcmp(argv[1], "timeout")) return timeout_seen();
  if (!strcmp(argv[1], "nonblocking")) return nonblocking();
  return 2;
}
