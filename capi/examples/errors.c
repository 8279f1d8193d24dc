/* Errors through the C API, in ranks started with the environment launcher
 * (RCOLL_RANK, RCOLL_WORLD_SIZE, RCOLL_ROOT_ADDR, RCOLL_UNIQUE_ID).
 *
 *   errors args    bad arguments, each rcollInvalidArgument with a clear message and no
 *                  communication, then correct collectives on the same communicator;
 *                  prints "ERRORS-ARGS-OK".
 *   errors killed  the last rank kills itself (SIGKILL) after one all_reduce; the others
 *                  keep calling until a call fails, and print the code and the message
 *                  ("KILLED-SEEN <code> <message>"). */
#include <rcoll.h>
#include <signal.h>
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
  CHECK(rcollIAllReduce(buf, buf, 64, rcollFloat32, rcollMax, comm, &req));
  CHECK(rcollWait(req));
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

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: errors args|killed\n");
    return 2;
  }
  CHECK(rcollCommInitFromEnv(&comm));
  CHECK(rcollCommUserRank(comm, &rank));
  CHECK(rcollCommCount(comm, &nranks));
  if (!strcmp(argv[1], "args")) return args();
  if (!strcmp(argv[1], "killed")) return killed();
  return 2;
}
