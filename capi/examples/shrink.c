/* rcollCommShrink after a failure, in ranks started with the environment launcher
 * (RCOLL_RANK, RCOLL_WORLD_SIZE, RCOLL_ROOT_ADDR, RCOLL_UNIQUE_ID).
 *
 * The last rank kills itself (SIGKILL) after a few all_reduces. Each survivor, once a call
 * failed, queues one more rcollIAllReduce on the dead communicator, then shrinks with
 * RCOLL_SHRINK_ABORT: the queued call must end with an error and leave its buffer as it
 * was; the new communicator has the survivors in order (the same ranks here: the dead one
 * was last), rcollCommShrinkExcluded names the dead rank, and an all_reduce on it gives
 * the survivors' sum. Prints "SHRINK-OK <excluded rank>". */
#include <rcoll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static int rank, nranks;

#define CHECK(comm, call)                                                                 \
  do {                                                                                    \
    rcollResult_t r_ = (call);                                                            \
    if (r_ != rcollSuccess) {                                                             \
      fprintf(stderr, "rank %d: %s:%d: %s: %s: %s\n", rank, __FILE__, __LINE__, #call,    \
              rcollGetErrorString(r_), rcollGetLastError(comm));                          \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

#define N 4096

int main(void) {
  rcollComm_t comm, smaller;
  CHECK(NULL, rcollCommInitFromEnv(&comm));
  CHECK(comm, rcollCommUserRank(comm, &rank));
  CHECK(comm, rcollCommCount(comm, &nranks));
  static float buf[N], pending[N];
  int round = 0;
  for (;; round++) {
    if (rank == nranks - 1 && round == 3) raise(SIGKILL);
    for (int i = 0; i < N; i++) buf[i] = 1.0f;
    rcollResult_t r = rcollAllReduce(buf, buf, N, rcollFloat32, rcollSum, comm);
    if (r != rcollSuccess) {
      printf("FAILED %d %s\n", (int)r, rcollGetLastError(comm));
      break;
    }
    if (round > 1000000) {
      fprintf(stderr, "rank %d: no call failed\n", rank);
      return 1;
    }
  }
  /* A call queued on the dead communicator: the shrink's abort must end it. */
  for (int i = 0; i < N; i++) pending[i] = -7.0f;
  rcollRequest_t req;
  CHECK(comm, rcollIAllReduce(pending, pending, N, rcollFloat32, rcollSum, comm, &req));
  CHECK(comm, rcollCommShrink(comm, NULL, 0, &smaller, RCOLL_SHRINK_ABORT));
  rcollResult_t queued = rcollWait(req);
  if (queued == rcollSuccess) {
    fprintf(stderr, "rank %d: the queued call succeeded on the dead communicator\n", rank);
    return 1;
  }
  for (int i = 0; i < N; i++) {
    if (pending[i] != -7.0f) {
      fprintf(stderr, "rank %d: the aborted call wrote its buffer at %d\n", rank, i);
      return 1;
    }
  }
  CHECK(comm, rcollCommDestroy(comm));
  int size, me, excluded[4], count = 0;
  CHECK(smaller, rcollCommCount(smaller, &size));
  CHECK(smaller, rcollCommUserRank(smaller, &me));
  CHECK(smaller, rcollCommShrinkExcluded(smaller, excluded, 4, &count));
  if (size != nranks - 1 || me != rank || count != 1 || excluded[0] != nranks - 1) {
    fprintf(stderr, "rank %d: new size %d rank %d, %d excluded (first %d)\n", rank, size, me,
            count, count > 0 ? excluded[0] : -1);
    return 1;
  }
  for (int i = 0; i < N; i++) buf[i] = (float)(rank + 1);
  CHECK(smaller, rcollAllReduce(buf, buf, N, rcollFloat32, rcollSum, smaller));
  float want = 0;
  for (int q = 0; q < nranks - 1; q++) want += (float)(q + 1);
  for (int i = 0; i < N; i++) {
    if (buf[i] != want) {
      fprintf(stderr, "rank %d: element %d is %g, the survivors' sum is %g\n", rank, i,
              buf[i], want);
      return 1;
    }
  }
  CHECK(smaller, rcollCommDestroy(smaller));
  printf("SHRINK-OK %d\n", excluded[0]);
  return 0;
}
