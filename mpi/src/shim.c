/*
 * The thin C side of librcoll_mpi: what only a C compiler that includes this MPI's mpi.h
 * can know. Predefined handles (MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_IN_PLACE, ...) are
 * macros whose values differ between MPI libraries, so they are compared here and turned
 * into rcoll's codes; calls that take a macro, a callback type or a struct go through a
 * small wrapper. No decision is taken here: served or forwarded is decided in Rust
 * (src/decide.rs), and every exported MPI_* symbol is defined in Rust (src/entry.rs).
 *
 * Compiled by build.rs with mpicc (or $RCOLL_MPICC).
 */
#include <mpi.h>
#include <stdint.h>
#include <string.h>

/* Codes shared with src/ffi.rs (TypeCode, OpCode): keep the two in step. */
enum {
  RT_INVALID = -1, /* MPI_DATATYPE_NULL */
  RT_DERIVED = -2, /* made by MPI_Type_* */
  RT_OTHER = -3,   /* predefined, no rcoll type (MPI_SHORT, MPI_LONG_DOUBLE, MPI_2INT) */
  RT_I8 = 0, RT_U8 = 1, RT_I32 = 2, RT_U32 = 3, RT_I64 = 4, RT_U64 = 5,
  RT_F32 = 7, RT_F64 = 8,
  RT_BYTE = 20, /* MPI_BYTE: data, and the bitwise ops */
  RT_CHAR = 21  /* MPI_CHAR: data only */
};

enum {
  RO_NULL = -1, RO_MAXLOC = -2, RO_MINLOC = -3, RO_LAND = -4, RO_LOR = -5, RO_LXOR = -6,
  RO_REPLACE = -7, RO_NO_OP = -8, RO_USER = -9,
  RO_SUM = 0, RO_PROD = 1, RO_MAX = 2, RO_MIN = 3, RO_BAND = 5, RO_BOR = 6, RO_BXOR = 7
};

/* An integer C type's code by its size and signedness. */
#define INT_CODE(t, is_signed)                                             \
  (sizeof(t) == 1   ? ((is_signed) ? RT_I8 : RT_U8)                        \
   : sizeof(t) == 4 ? ((is_signed) ? RT_I32 : RT_U32)                      \
   : sizeof(t) == 8 ? ((is_signed) ? RT_I64 : RT_U64)                      \
                    : RT_OTHER)

/* One datatype as rcoll sees it (src/ffi.rs: TypeInfo). */
struct rcoll_mpi_type {
  int32_t code;
  int32_t contiguous; /* its bytes are one run: size == extent, lower bound 0 */
  int64_t size;       /* bytes of data in one element */
  int64_t extent;     /* from one element to the next */
};

int rcoll_mpi_type_info(MPI_Datatype t, struct rcoll_mpi_type *out) {
  /* Built once: the handles are link-time constants (addresses in Open MPI, integers in
   * MPICH), and a table built per call cost a small call its share. */
  static const struct {
    MPI_Datatype t;
    int code;
    int64_t size;
  } known[] = {
      {MPI_FLOAT, sizeof(float) == 4 ? RT_F32 : RT_OTHER, sizeof(float)},
      {MPI_DOUBLE, sizeof(double) == 8 ? RT_F64 : RT_OTHER, sizeof(double)},
      {MPI_INT, INT_CODE(int, 1), sizeof(int)},
      {MPI_UNSIGNED, INT_CODE(unsigned, 0), sizeof(unsigned)},
      {MPI_LONG, INT_CODE(long, 1), sizeof(long)},
      {MPI_UNSIGNED_LONG, INT_CODE(unsigned long, 0), sizeof(unsigned long)},
      {MPI_LONG_LONG, INT_CODE(long long, 1), sizeof(long long)},
      {MPI_LONG_LONG_INT, INT_CODE(long long, 1), sizeof(long long)},
      {MPI_UNSIGNED_LONG_LONG, INT_CODE(unsigned long long, 0), sizeof(unsigned long long)},
      {MPI_INT8_T, RT_I8, 1},
      {MPI_UINT8_T, RT_U8, 1},
      {MPI_INT32_T, RT_I32, 4},
      {MPI_UINT32_T, RT_U32, 4},
      {MPI_INT64_T, RT_I64, 8},
      {MPI_UINT64_T, RT_U64, 8},
      {MPI_SIGNED_CHAR, RT_I8, 1},
      {MPI_UNSIGNED_CHAR, RT_U8, 1},
      {MPI_AINT, INT_CODE(MPI_Aint, 1), sizeof(MPI_Aint)},
      {MPI_OFFSET, INT_CODE(MPI_Offset, 1), sizeof(MPI_Offset)},
      {MPI_COUNT, INT_CODE(MPI_Count, 1), sizeof(MPI_Count)},
      {MPI_BYTE, RT_BYTE, 1},
      {MPI_CHAR, RT_CHAR, 1},
  };
  size_t i;
  int ni, na, nd, combiner, size;
  MPI_Aint lb, extent, true_lb, true_extent;

  if (t == MPI_DATATYPE_NULL) {
    out->code = RT_INVALID;
    out->contiguous = 0;
    out->size = 0;
    out->extent = 0;
    return 0;
  }
  for (i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
    if (t == known[i].t) {
      out->code = known[i].code;
      out->contiguous = 1;
      out->size = known[i].size;
      out->extent = known[i].size;
      return 0;
    }
  }
  if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) != MPI_SUCCESS ||
      PMPI_Type_size(t, &size) != MPI_SUCCESS ||
      PMPI_Type_get_extent(t, &lb, &extent) != MPI_SUCCESS ||
      PMPI_Type_get_true_extent(t, &true_lb, &true_extent) != MPI_SUCCESS)
    return -1;
  out->code = combiner == MPI_COMBINER_NAMED ? RT_OTHER : RT_DERIVED;
  out->size = size;
  out->extent = extent;
  out->contiguous = lb == 0 && true_lb == 0 && extent == size && true_extent == size;
  return 0;
}

/* A non-contiguous datatype's data as contiguous bytes and back, so that rcoll moves it
 * like any other (MPI's own packed form, which within one MPI library is the bytes in
 * order). The number of bytes written, or -1. */
int rcoll_mpi_pack(const void *in, int count, MPI_Datatype t, void *out, int outsize,
                   MPI_Comm c) {
  int pos = 0;
  if (PMPI_Pack(in, count, t, out, outsize, &pos, c) != MPI_SUCCESS) return -1;
  return pos;
}

int rcoll_mpi_unpack(const void *in, int insize, void *out, int count, MPI_Datatype t,
                     MPI_Comm c) {
  int pos = 0;
  if (PMPI_Unpack(in, insize, &pos, out, count, t, c) != MPI_SUCCESS) return -1;
  return pos;
}

/* A reference of the shim's own to a datatype a pending call unpacks into (the application
 * may free its handle before the request completes). */
int rcoll_mpi_type_dup(MPI_Datatype t, MPI_Datatype *out) { return PMPI_Type_dup(t, out); }

int rcoll_mpi_type_free(MPI_Datatype *t) { return PMPI_Type_free(t); }

/* The datatype's name (MPI_SHORT, or what MPI_Type_set_name gave it), for the stats. */
void rcoll_mpi_type_name(MPI_Datatype t, char *buf, int len) {
  char name[MPI_MAX_OBJECT_NAME];
  int n = 0;
  if (len <= 0) return;
  buf[0] = 0;
  if (t == MPI_DATATYPE_NULL || PMPI_Type_get_name(t, name, &n) != MPI_SUCCESS) return;
  name[sizeof(name) - 1] = 0;
  strncpy(buf, name, (size_t)len - 1);
  buf[len - 1] = 0;
}

int rcoll_mpi_op_code(MPI_Op op) {
  if (op == MPI_OP_NULL) return RO_NULL;
  if (op == MPI_SUM) return RO_SUM;
  if (op == MPI_PROD) return RO_PROD;
  if (op == MPI_MAX) return RO_MAX;
  if (op == MPI_MIN) return RO_MIN;
  if (op == MPI_BAND) return RO_BAND;
  if (op == MPI_BOR) return RO_BOR;
  if (op == MPI_BXOR) return RO_BXOR;
  if (op == MPI_MAXLOC) return RO_MAXLOC;
  if (op == MPI_MINLOC) return RO_MINLOC;
  if (op == MPI_LAND) return RO_LAND;
  if (op == MPI_LOR) return RO_LOR;
  if (op == MPI_LXOR) return RO_LXOR;
  if (op == MPI_REPLACE) return RO_REPLACE;
  if (op == MPI_NO_OP) return RO_NO_OP;
  return RO_USER;
}

int rcoll_mpi_is_in_place(const void *p) { return p == MPI_IN_PLACE; }

MPI_Comm rcoll_mpi_comm_world(void) { return MPI_COMM_WORLD; }

/* 0: an intracommunicator (rank and size set); 1: an intercommunicator; -1: MPI_COMM_NULL
 * or a communicator MPI refuses (forwarded, so that MPI reports it as it would). */
int rcoll_mpi_comm_info(MPI_Comm c, int *rank, int *size) {
  int inter = 0;
  if (c == MPI_COMM_NULL) return -1;
  if (PMPI_Comm_test_inter(c, &inter) != MPI_SUCCESS) return -1;
  if (inter) return 1;
  if (PMPI_Comm_rank(c, rank) != MPI_SUCCESS || PMPI_Comm_size(c, size) != MPI_SUCCESS)
    return -1;
  return 0;
}

int rcoll_mpi_bcast_bytes(void *buf, int len, int root, MPI_Comm c) {
  return PMPI_Bcast(buf, len, MPI_BYTE, root, c);
}

/* Every member's `n` values replaced by their minimums over `c`: 0, or -1 if MPI fails. */
int rcoll_mpi_all_min(int *v, int n, MPI_Comm c) {
  return PMPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT, MPI_MIN, c) == MPI_SUCCESS ? 0 : -1;
}

/* The attribute that carries a communicator's rcoll entry: not copied by MPI_Comm_dup (the
 * copy gets its own), deleted by MPI_Comm_free and MPI_Finalize through `del`. */
int rcoll_mpi_keyval_create(MPI_Comm_delete_attr_function *del, int *keyval) {
  return PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, del, keyval, NULL);
}

int rcoll_mpi_attr_get(MPI_Comm c, int keyval, void **value) {
  int flag = 0;
  void *v = NULL;
  if (PMPI_Comm_get_attr(c, keyval, &v, &flag) != MPI_SUCCESS || !flag) return 0;
  *value = v;
  return 1;
}

int rcoll_mpi_attr_set(MPI_Comm c, int keyval, void *value) {
  return PMPI_Comm_set_attr(c, keyval, value);
}

int rcoll_mpi_keyval_free(int *keyval) { return PMPI_Comm_free_keyval(keyval); }

/* 1 when the communicator's error handler is MPI_ERRORS_ARE_FATAL (the default). */
int rcoll_mpi_errors_are_fatal(MPI_Comm c) {
  MPI_Errhandler h = MPI_ERRHANDLER_NULL;
  int fatal;
  if (PMPI_Comm_get_errhandler(c, &h) != MPI_SUCCESS) return 1;
  fatal = h == MPI_ERRORS_ARE_FATAL;
  if (h != MPI_ERRHANDLER_NULL) PMPI_Errhandler_free(&h);
  return fatal;
}

/* rcoll's own error class (made once, by the Rust side under its lock). */
int rcoll_mpi_error_class(int *klass) { return PMPI_Add_error_class(klass); }

/* A new error code of `klass` whose MPI_Error_string is `message`, handed to the
 * communicator's error handler (which returns, or is the application's and may not). */
int rcoll_mpi_raise(MPI_Comm c, int klass, const char *message) {
  int code = MPI_ERR_OTHER;
  char text[MPI_MAX_ERROR_STRING];
  /* MPI refuses a string as long as its limit: the message's start. */
  strncpy(text, message, sizeof(text) - 1);
  text[sizeof(text) - 1] = 0;
  if (klass >= 0 && PMPI_Add_error_code(klass, &code) == MPI_SUCCESS)
    PMPI_Add_error_string(code, text);
  else
    code = MPI_ERR_OTHER;
  PMPI_Comm_call_errhandler(c, code);
  return code;
}

int rcoll_mpi_abort(MPI_Comm c, int code) { return PMPI_Abort(c, code); }

int rcoll_mpi_world_barrier(void) { return PMPI_Barrier(MPI_COMM_WORLD); }

int rcoll_mpi_world_rank(void) {
  int r = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/* Nonblocking collectives as generalized requests: the application completes them with
 * MPI's own MPI_Wait, MPI_Test, MPI_Waitall, ... The call runs on rcoll's progress thread,
 * which calls MPI_Grequest_complete when it ends (so only at MPI_THREAD_MULTIPLE). The
 * outcome is the Rust side's (`state`): its MPI error code, then freed. */
extern int rcoll_mpi_outcome_code(void *state);
extern void rcoll_mpi_outcome_free(void *state);

static int query_outcome(void *state, MPI_Status *status) {
  int code = rcoll_mpi_outcome_code(state);
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  status->MPI_ERROR = code;
  return code;
}

static int free_outcome(void *state) {
  rcoll_mpi_outcome_free(state);
  return MPI_SUCCESS;
}

/* A collective cannot be cancelled: MPI_Cancel leaves it to complete. */
static int cancel_nothing(void *state, int complete) {
  (void)state;
  (void)complete;
  return MPI_SUCCESS;
}

int rcoll_mpi_grequest_start(void *state, MPI_Request *request) {
  return PMPI_Grequest_start(query_outcome, free_outcome, cancel_nothing, state, request);
}

int rcoll_mpi_grequest_complete(MPI_Request request) {
  return PMPI_Grequest_complete(request);
}

/* 1 under Open MPI, whose small calls the shim's size rule was measured against. */
int rcoll_mpi_is_open_mpi(void) {
#ifdef OPEN_MPI
  return 1;
#else
  return 0;
#endif
}

int rcoll_mpi_thread_multiple(void) {
  int provided = MPI_THREAD_SINGLE;
  return PMPI_Query_thread(&provided) == MPI_SUCCESS && provided == MPI_THREAD_MULTIPLE;
}
