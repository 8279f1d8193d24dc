/* The smallest rcoll program in C: ranks started by any launcher rcoll knows (mpirun,
 * srun, torchrun, or RCOLL_RANK / RCOLL_WORLD_SIZE / RCOLL_ROOT_ADDR with RCOLL_UNIQUE_ID)
 * sum a vector.
 *
 *   cc hello.c $(pkg-config --cflags --libs rcoll) -o hello */
#include <rcoll.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  rcollComm_t comm = NULL;
  rcollResult_t r = rcollCommInitFromEnv(&comm);
  if (r != rcollSuccess) {
    fprintf(stderr, "rcollCommInitFromEnv: %s: %s\n", rcollGetErrorString(r),
            rcollGetLastError(NULL));
    return 1;
  }
  int rank, nranks;
  rcollCommUserRank(comm, &rank);
  rcollCommCount(comm, &nranks);
  size_t count = 1 << 20;
  float *grads = malloc(count * sizeof *grads);
  for (size_t i = 0; i < count; i++) grads[i] = (float)rank;
  r = rcollAllReduce(grads, grads, count, rcollFloat32, rcollAvg, comm);
  if (r != rcollSuccess) {
    fprintf(stderr, "rcollAllReduce: %s: %s\n", rcollGetErrorString(r), rcollGetLastError(comm));
    return 1;
  }
  float want = (float)(nranks - 1) / 2;
  for (size_t i = 0; i < count; i++) {
    if (grads[i] != want) {
      fprintf(stderr, "rank %d: %g at %zu, want %g\n", rank, grads[i], i, want);
      return 1;
    }
  }
  printf("HELLO-OK rank %d of %d: average %g\n", rank, nranks, want);
  free(grads);
  return rcollCommDestroy(comm) == rcollSuccess ? 0 : 1;
}
