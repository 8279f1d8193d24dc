/*
 * An rcoll failure through the communicator's error handler. Run with RCOLL_TIMEOUT=2:
 * the last rank joins an MPI_Allreduce 5 s late, so the others' call times out.
 *   errors_check return: MPI_ERRORS_RETURN on the world; every other rank's call returns an
 *     error code of a class beyond MPI's own, whose MPI_Error_string is rcoll's message,
 *     and the next call on the world fails too; prints ERROR-SEEN <rank> <1: rcoll's
 *     class> <message> and ERRORS-CHECK-OK <rank>. The late rank may find the others'
 *     contributions already delivered (then its sum must be right) or fail.
 *   errors_check fatal: the default MPI_ERRORS_ARE_FATAL; the job ends with rcoll's message
 *     naming the rank (the program never prints ERRORS-CHECK-OK).
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int rank, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int returns = argc > 1 && strcmp(argv[1], "return") == 0;
  if (returns) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  double x = rank, s = 0;
  /* One call that works: the world is served. */
  if (MPI_Allreduce(&x, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
    printf("ERRORS-CHECK-FAIL %d: the first Allreduce failed\n", rank);
    return 1;
  }
  if (rank == size - 1) {
    sleep(5);
    int rc = MPI_Allreduce(&x, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS && s != size * (size - 1) / 2) {
      printf("ERRORS-CHECK-FAIL %d: the late rank's sum is %g\n", rank, s);
      return 1;
    }
    printf("ERRORS-CHECK-OK %d (late: %s)\n", rank, rc == MPI_SUCCESS ? "done" : "failed");
    fflush(stdout);
    MPI_Finalize();
    return 0;
  }
  int rc = MPI_Allreduce(&x, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  if (rc == MPI_SUCCESS) {
    printf("ERRORS-CHECK-FAIL %d: the late Allreduce succeeded\n", rank);
    return 1;
  }
  int klass = -1, len = 0;
  char text[MPI_MAX_ERROR_STRING];
  MPI_Error_class(rc, &klass);
  MPI_Error_string(rc, text, &len);
  printf("ERROR-SEEN %d %d %s\n", rank, klass > MPI_ERR_LASTCODE ? 1 : 0, text);
  int again = MPI_Allreduce(&x, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  if (again == MPI_SUCCESS) {
    printf("ERRORS-CHECK-FAIL %d: a call after the failure succeeded\n", rank);
    return 1;
  }
  printf("ERRORS-CHECK-OK %d\n", rank);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
