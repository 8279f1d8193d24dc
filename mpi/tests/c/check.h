/* What every test program here does on a failure: say so on stderr, prefixed with
 * CHECK_NAME "-FAIL" and the rank (which the Rust test looks for), and end the job.
 * Define CHECK_NAME and `static int rank` before including it. */
#ifndef RCOLL_MPI_TEST_CHECK_H
#define RCOLL_MPI_TEST_CHECK_H

#define FAIL(...)                                              \
  do {                                                         \
    fprintf(stderr, CHECK_NAME "-FAIL rank %d: ", rank);       \
    fprintf(stderr, __VA_ARGS__);                              \
    fprintf(stderr, "\n");                                     \
    MPI_Abort(MPI_COMM_WORLD, 3);                              \
  } while (0)

#define CHECK(call)                                                    \
  do {                                                                 \
    int rc_ = (call);                                                  \
    if (rc_ != MPI_SUCCESS) FAIL("%s returned %d", #call, rc_);        \
  } while (0)

#endif
