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
 *   errors_check killed-return|killed-fatal [multiple]: nonblocking calls and a killed rank
 *     (run under a launcher that lets the others live on): after one MPI_Iallreduce that
 *     works, the last rank kills itself (SIGKILL) and the others' next MPI_Iallreduce fails,
 *     which MPI_Wait reports through the error handler, as above: with MPI_ERRORS_RETURN
 *     (killed-return) MPI_Wait returns rcoll's code (ERROR-SEEN as above), a later call fails
 *     too, and each survivor prints ERRORS-CHECK-OK <rank> and leaves (no MPI_Finalize: its
 *     barrier would wait for the dead rank); with MPI_ERRORS_ARE_FATAL (killed-fatal) the
 *     job ends in MPI_Wait with rcoll's message. `multiple`: at MPI_THREAD_MULTIPLE, where
 *     rcoll's progress thread completes the request (else the shim's MPI_Wait does).
 *     `late` (last): the last rank does not die but sleeps 5 s and leaves (run with
 *     RCOLL_TIMEOUT=2), for launchers that kill the others when one dies.
 * With ERRORS_CHECK_DIR set, each rank writes its stdout and stderr (the shim's message,
 * MPI's own abort report) itself into <dir>/rank-<rank>.
 */
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What a rank printed before the job ended must not depend on the launcher forwarding it:
 * its teardown loses some (Hydra's proxies killed, Open MPI's report of an abort lost when
 * two ranks abort at once). A file the rank writes itself has every byte written. */
static void witness(int rank) {
  const char *dir = getenv("ERRORS_CHECK_DIR");
  if (dir == NULL) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/rank-%d", dir, rank);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) {
    printf("ERRORS-CHECK-FAIL %d: %s not opened\n", rank, path);
    exit(1);
  }
  if (fd > 2) close(fd);
}

/* Prints ERROR-SEEN <rank> <1 if rcoll's class> <message> for a failed call's code. */
static void seen(int rank, int rc) {
  int klass = -1, len = 0;
  char text[MPI_MAX_ERROR_STRING];
  MPI_Error_class(rc, &klass);
  MPI_Error_string(rc, text, &len);
  printf("ERROR-SEEN %d %d %s\n", rank, klass > MPI_ERR_LASTCODE ? 1 : 0, text);
  fflush(stdout);
}

static int killed(int argc, char **argv) {
  const int returns = strcmp(argv[1], "killed-return") == 0;
  const int late = strcmp(argv[argc - 1], "late") == 0;
  int rank, size, provided;
  if (argc > 2 && strcmp(argv[2], "multiple") == 0) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided != MPI_THREAD_MULTIPLE) {
      printf("ERRORS-CHECK-FAIL: MPI_THREAD_MULTIPLE not provided\n");
      return 1;
    }
  } else {
    MPI_Init(&argc, &argv);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  witness(rank);
  if (returns) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  double x = rank, s = 0;
  MPI_Request req;
  /* One nonblocking call that works: the world is served. */
  if (MPI_Iallreduce(&x, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req) != MPI_SUCCESS ||
      MPI_Wait(&req, MPI_STATUS_IGNORE) != MPI_SUCCESS || s != size * (size - 1) / 2) {
    printf("ERRORS-CHECK-FAIL %d: the first Iallreduce failed (sum %g)\n", rank, s);
    return 1;
  }
  if (rank == size - 1) {
    if (late) {
      sleep(5);
      _exit(0);
    }
    raise(SIGKILL);
  }
  int rc = MPI_Iallreduce(&x, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
  if (rc == MPI_SUCCESS) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
  if (rc == MPI_SUCCESS) {
    printf("ERRORS-CHECK-FAIL %d: the Iallreduce without rank %d succeeded\n", rank, size - 1);
    return 1;
  }
  seen(rank, rc);
  int again = MPI_Iallreduce(&x, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
  if (again == MPI_SUCCESS) again = MPI_Wait(&req, MPI_STATUS_IGNORE);
  if (again == MPI_SUCCESS) {
    printf("ERRORS-CHECK-FAIL %d: a call after the failure succeeded\n", rank);
    return 1;
  }
  printf("ERRORS-CHECK-OK %d\n", rank);
  fflush(stdout);
  _exit(0);
}

int main(int argc, char **argv) {
  if (argc > 1 && strncmp(argv[1], "killed-", 7) == 0) return killed(argc, argv);
  int rank, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  witness(rank);
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
  seen(rank, rc);
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
