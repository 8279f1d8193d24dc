/*
 * A root that comes late to a rooted call whose other members leave at once: every rank
 * but the root returns from MPI_Reduce once its contribution is sent, then frees the
 * communicator (a dup of the world) or finalizes, while the root is still asleep. The
 * shim must keep their rcoll communicators open until the root has received (closing
 * them failed the root's call: 'closed its end of the connection'). Prints
 * LATE-ROOT-OK <rank> <size>.
 */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int rank, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, dup); /* dup's rcoll communicator */
  if (rank == 0) usleep(1500 * 1000);
  sum = 0;
  if (MPI_Reduce(&one, &sum, 1, MPI_INT, MPI_SUM, 0, dup) != MPI_SUCCESS ||
      (rank == 0 && sum != size)) {
    printf("LATE-ROOT-FAIL %d: Reduce on the freed dup gave %d\n", rank, sum);
    return 1;
  }
  MPI_Comm_free(&dup);
  /* and a root already waiting when the others send and leave */
  if (rank != 0) usleep(300 * 1000);
  sum = 0;
  if (MPI_Reduce(&one, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD) != MPI_SUCCESS ||
      (rank == 0 && sum != size)) {
    printf("LATE-ROOT-FAIL %d: Reduce before MPI_Finalize gave %d\n", rank, sum);
    return 1;
  }
  printf("LATE-ROOT-OK %d %d\n", rank, size);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
