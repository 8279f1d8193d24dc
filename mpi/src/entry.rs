//! The exported MPI entry points. Each takes its call apart for [`decide`], runs a served
//! call on rcoll and gives everything else, unchanged, to the MPI library's `PMPI_*`
//! function — mpiP's shape: `MPI_X` decides, then calls `PMPI_X`.
//!
//! Every function is `unsafe extern "C"`: its safety contract is MPI's for that call (the
//! buffers hold what the counts and datatypes say, handles are valid or MPI's null
//! handles). No panic crosses into C: one ends the job through `PMPI_Abort`.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::comms::{self, State};
use crate::decide::{decide, Action, Args, Coll, OpKind, Plan, Reason, Side, Ty, Types};
use crate::ffi::guarded;
use crate::ffi::{self, Comm, Datatype, Op, Request, Sent, NO_DATATYPE};
use crate::memory;
use crate::pending;
use crate::run;
use crate::stage::{type_of, Stage};
use crate::stats::Stats;

static STATS: Stats = Stats::new();

/// Datatypes as MPI describes them.
struct MpiTypes;

impl Types<Datatype> for MpiTypes {
    fn ty(&self, h: Datatype) -> Ty {
        type_of(h)
    }

    fn name(&self, h: Datatype) -> String {
        let mut buf = [0 as c_char; 160];
        // SAFETY: the buffer is writable for its length, and NUL-terminated by the call.
        let name = unsafe {
            ffi::rcoll_mpi_type_name(h, buf.as_mut_ptr(), buf.len() as c_int);
            CStr::from_ptr(buf.as_ptr())
        };
        match name.to_string_lossy() {
            n if n.is_empty() => "unnamed datatype".into(),
            n => n.into_owned(),
        }
    }
}

fn in_place(p: *const c_void) -> bool {
    // SAFETY: compares the pointer with MPI_IN_PLACE; never dereferenced.
    unsafe { ffi::rcoll_mpi_is_in_place(p) != 0 }
}

fn side(buf: *const c_void, count: c_int, dtype: Datatype) -> Side<Datatype> {
    Side {
        count: i64::from(count),
        dtype,
        in_place: in_place(buf),
        null: buf.is_null(),
    }
}

fn op_kind(op: Op) -> OpKind {
    // SAFETY: compares the handle with the predefined ops.
    OpKind::from_code(unsafe { ffi::rcoll_mpi_op_code(op) })
}

/// A servable collective: served on rcoll, or `forward`ed with its reason counted.
///
/// # Safety
/// `send` and `recv` are the call's buffers, valid as MPI's contract for it says (the
/// decision reads only the sides MPI says this rank uses).
unsafe fn collective<'a>(
    coll: Coll,
    comm: Comm,
    block: Option<(c_int, Datatype)>,
    send: *const c_void,
    recv: *mut c_void,
    args: impl FnOnce(usize, usize) -> Args<'a, Datatype>,
    forward: impl FnOnce() -> c_int,
) -> c_int {
    guarded(coll.mpi_name(), || {
        if let Some(small) = small_on_world(coll, comm, block) {
            return tally(coll, Err(small), forward);
        }
        // SAFETY: the caller's contract, passed on.
        tally(
            coll,
            unsafe { serve(coll, comm, send, recv, args) },
            forward,
        )
    })
}

/// The size rule ahead of the decision, for a call on the world's communicator whose
/// bytes are its `block` (count and datatype) on every rank: `MPI_Allreduce`,
/// `MPI_Reduce`, `MPI_Bcast`, `MPI_Reduce_scatter_block` (its block per rank), and
/// `MPI_Barrier` with none. Taking a small call apart for the decision is a large share of
/// what MPI's own exchange costs, and the decision gives MPI every plan under the
/// threshold anyway. So on the world the size comes first: a small call the decision would not
/// serve at all (`MPI_MAXLOC`, a user's op) goes to MPI either way, and is counted for
/// its size. Other communicators, and calls whose bytes depend on the rank's side (a
/// gather's), take the whole way.
fn small_on_world(coll: Coll, comm: Comm, block: Option<(c_int, Datatype)>) -> Option<Reason> {
    let (count, dtype) = block?;
    let ready = comms::world_giving_small(comm)?;
    if !comms::control()?.serves(coll) {
        return None;
    }
    let bytes = match usize::try_from(count).ok()? {
        0 => 0,
        n => n.saturating_mul(type_of(dtype).size),
    };
    ready.too_small(bytes).err()
}

/// A call's outcome, counted when the stats are printed (`RCOLL_MPI_STATS=1`; otherwise
/// not: a count is an atomic add on every call): a served call's code, or the forwarded
/// call's.
fn tally(coll: Coll, outcome: Result<c_int, Reason>, forward: impl FnOnce() -> c_int) -> c_int {
    let counting = comms::control().is_some_and(|c| c.stats);
    match outcome {
        Ok(code) => {
            if counting {
                STATS.served(coll);
            }
            code
        }
        Err(reason) => {
            if counting {
                STATS.forwarded(coll, &reason);
            }
            forward()
        }
    }
}

/// A call that passed the decision: its plan, its arguments, and its communicator's
/// entry.
struct Admitted<'a> {
    plan: Plan,
    args: Args<'a, Datatype>,
    entry: Option<comms::Held>,
}

impl Admitted<'_> {
    /// The entry, formed now if the communicator has none (a collective over it, which
    /// every member reaches in this same call), with its rcoll communicator.
    fn entry(&mut self, comm: Comm, rank: usize, size: usize) -> Result<comms::Held, Reason> {
        let entry = match self.entry.take() {
            Some(e) => e,
            None => comms::entry_or_form(comm, rank, size),
        };
        match entry.ready() {
            Some(_) => Ok(entry),
            None => Err(Reason::NoCommunicator),
        }
    }
}

/// The environment's say, the communicator, then [`decide`]: the call's plan, or why it
/// goes to MPI.
fn admit<'a>(
    coll: Coll,
    comm: Comm,
    args: impl FnOnce(usize, usize) -> Args<'a, Datatype>,
) -> Result<(Admitted<'a>, usize, usize), Reason> {
    let control = comms::control().ok_or(Reason::NotInitialized)?;
    if !control.enabled {
        return Err(Reason::Disabled);
    }
    if !control.serves(coll) {
        return Err(Reason::Restricted);
    }
    let known = comms::lookup(comm)?;
    let (rank, size) = match &known {
        Some(e) => match &e.state {
            State::Unavailable(r) => return Err(r.clone()),
            State::Ready(_) => (e.rank, e.size),
        },
        None => comms::comm_info(comm)?,
    };
    let args = args(rank, size);
    let plan = decide(&args, &MpiTypes)?;
    Ok((
        Admitted {
            plan,
            args,
            entry: known,
        },
        rank,
        size,
    ))
}

/// The error of a served call on `comm`, to its error handler.
fn failure(coll: Coll, comm: Comm, why: &str) -> c_int {
    let me = comms::world_rank();
    comms::raise(
        comm,
        &format!(
            "rcoll-mpi: {} on world rank {me}: {}",
            coll.mpi_name(),
            cause_first(why)
        ),
    )
}

/// rcoll's message with its innermost cause in front: rcoll nests each rank's context
/// before what went wrong ("rank 0: all_reduce #1 (...): rank 0: aborted by rank 1: rank
/// 1: ...: rank 2 closed its end of the connection"), and MPI cuts an error string at
/// `MPI_MAX_ERROR_STRING` (256 in Open MPI), which would keep the context and lose the
/// dead rank.
fn cause_first(why: &str) -> String {
    // The last ": " outside brackets: a cause may carry its own details in (...) or [...].
    let mut depth = 0i32;
    let mut last = None;
    for (i, c) in why.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ':' if depth == 0 && why[i + 1..].starts_with(' ') => last = Some(i),
            _ => {}
        }
    }
    match last.map(|i| &why[i + 2..]) {
        Some(cause) if !cause.is_empty() => format!("{cause} (in: {why})"),
        _ => why.to_string(),
    }
}

/// # Safety
/// As [`collective`].
unsafe fn serve<'a>(
    coll: Coll,
    comm: Comm,
    send: *const c_void,
    recv: *mut c_void,
    args: impl FnOnce(usize, usize) -> Args<'a, Datatype>,
) -> Result<c_int, Reason> {
    let (mut admitted, rank, size) = admit(coll, comm, args)?;
    let plan = admitted.plan;
    if plan.action == Action::Nothing {
        return Ok(0);
    }
    let entry = admitted.entry(comm, rank, size)?;
    let ready = entry.ready().ok_or(Reason::NoCommunicator)?;
    ready.too_small(plan.bytes())?;
    if let Some(earlier) = ready.failed() {
        let why = format!("the communicator failed in an earlier call: {earlier}");
        return Ok(failure(coll, comm, &why));
    }
    // SAFETY: the caller's contract: the buffers hold what the plan, made from the call's
    // counts and datatypes, says this rank uses.
    let mut stage =
        match unsafe { Stage::new(&plan, &admitted.args, comm, (send, recv), (rank, size)) } {
            Ok(s) => s,
            Err(why) => return Ok(failure(coll, comm, &why)),
        };
    let (s, r) = stage.buffers(send, recv);
    let key = ready as *const comms::Ready as usize;
    let done = ready.run(|c| {
        memory::register_for(c, key, [s, r.cast_const()]);
        // SAFETY: as above, or the staged copies of the same lengths.
        unsafe { run::execute(c, &plan, s, r) }
    });
    // SAFETY: the receive buffer is valid until this call returns.
    let unpacked = unsafe { stage.finish(done.is_ok()) };
    let failed = match (done, unpacked) {
        (Ok(()), Ok(())) => return Ok(0),
        (Err(e), _) => {
            let message = e.to_string();
            ready.fail(&message);
            message
        }
        (Ok(()), Err(why)) => why,
    };
    Ok(failure(coll, comm, &failed))
}

/// What a queued call's request reports, read by MPI's completion calls through the
/// query function. The progress thread only records a failure; the first query, made by
/// the application's completion call on the application's thread, hands it to the
/// communicator's error handler as a blocking call's failure is (so `MPI_ERRORS_ARE_FATAL`
/// ends the job from the call that completes the request, and MPI is called on no other
/// thread, which is all MPI allows below `MPI_THREAD_MULTIPLE`).
struct Outcome {
    coll: Coll,
    /// The call's communicator, and how the call ended.
    state: Mutex<(Sent<Comm>, Ended)>,
}

enum Ended {
    /// Done, or not yet (MPI queries only completed requests).
    Well,
    /// rcoll's message, not yet given to the error handler.
    Failed(String),
    /// The error code the handler was given.
    Raised(c_int),
}

impl Outcome {
    fn new(coll: Coll, comm: Comm) -> Outcome {
        Outcome {
            coll,
            state: Mutex::new((Sent(comm), Ended::Well)),
        }
    }

    /// Records the call's failure (on the progress thread).
    fn fail(&self, why: String) {
        self.lock().1 = Ended::Failed(why);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Sent<Comm>, Ended)> {
        // A panic while held is caught at the C boundary, which ends the job.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The request's MPI error code: a failure goes to the error handler the first time.
    fn code(&self) -> c_int {
        let mut state = self.lock();
        let (comm, ended) = &mut *state;
        match ended {
            Ended::Well => 0,
            Ended::Raised(code) => *code,
            Ended::Failed(why) => {
                // Held while raising: another query of the same request waits for the code.
                let code = failure(self.coll, comm.0, why);
                *ended = Ended::Raised(code);
                code
            }
        }
    }
}

/// The generalized request's query function's question (src/shim.c), asked by MPI's
/// completion calls on the application's thread.
///
/// # Safety
/// `state` is the pointer [`queue`] gave `MPI_Grequest_start`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn rcoll_mpi_outcome_code(state: *mut c_void) -> c_int {
    // SAFETY: an `Arc<Outcome>` leaked by `queue` for the request, freed only by
    // `rcoll_mpi_outcome_free` after the last query.
    let outcome = unsafe { &*(state as *const Outcome) };
    guarded("a nonblocking call's completion", || outcome.code())
}

/// The generalized request's free function: drops its reference to the outcome.
///
/// # Safety
/// `state` is the pointer [`queue`] gave `MPI_Grequest_start`; MPI calls this once.
#[no_mangle]
pub unsafe extern "C" fn rcoll_mpi_outcome_free(state: *mut c_void) {
    // SAFETY: the reference `queue` leaked with `Arc::into_raw`, given back once.
    drop(unsafe { Arc::from_raw(state as *const Outcome) });
}

/// A nonblocking call: served by queueing it on the communicator's progress thread and
/// answering with a generalized request the progress thread completes, or forwarded.
///
/// # Safety
/// MPI's contract for a nonblocking collective: the buffers stay valid and untouched
/// until the request completes; `request` is writable.
unsafe fn nonblocking<'a>(
    coll: Coll,
    comm: Comm,
    (send, recv): (*const c_void, *mut c_void),
    request: *mut Request,
    args: impl FnOnce(usize, usize) -> Args<'a, Datatype>,
    forward: impl FnOnce() -> c_int,
) -> c_int {
    guarded(coll.mpi_name(), || {
        // SAFETY: the caller's contract, passed on.
        tally(
            coll,
            unsafe { queue(coll, comm, (send, recv), request, args) },
            forward,
        )
    })
}

/// # Safety
/// As [`nonblocking`].
unsafe fn queue<'a>(
    coll: Coll,
    comm: Comm,
    (send, recv): (*const c_void, *mut c_void),
    request: *mut Request,
    args: impl FnOnce(usize, usize) -> Args<'a, Datatype>,
) -> Result<c_int, Reason> {
    if request.is_null() {
        return Err(Reason::InvalidArgument("request"));
    }
    let (mut admitted, rank, size) = admit(coll, comm, args)?;
    let plan = admitted.plan;
    let entry = if plan.action == Action::Nothing {
        None
    } else {
        Some(admitted.entry(comm, rank, size)?)
    };
    // Served at every size (not `too_small`): rcoll's progress thread moves the call while
    // the application computes, which MPI's own nonblocking collectives do only inside
    // MPI calls (and Open MPI refuses MPI_Request_free on one of those).
    let ready = entry.as_ref().and_then(|e| e.ready());
    let background = match ready.map(|r| (r.failed(), r)) {
        None => None,
        Some((Some(earlier), _)) => {
            let why = format!("the communicator failed in an earlier call: {earlier}");
            return Ok(failure(coll, comm, &why));
        }
        Some((None, r)) => match r.background() {
            Ok(bg) => Some(bg),
            Err(why) => {
                r.fail(&why);
                return Ok(failure(coll, comm, &why));
            }
        },
    };
    // Packed now, on the caller's thread; unpacked by the progress thread.
    // SAFETY: the caller's contract: the buffers hold what the plan says this rank uses.
    let stage = match unsafe { Stage::new(&plan, &admitted.args, comm, (send, recv), (rank, size)) }
    {
        Ok(s) => s,
        Err(why) => return Ok(failure(coll, comm, &why)),
    };
    let outcome = Arc::new(Outcome::new(coll, comm));
    let state = Arc::into_raw(Arc::clone(&outcome)) as *mut c_void;
    let mut req = std::mem::MaybeUninit::<Request>::uninit();
    // SAFETY: `state` stays valid until MPI calls the free function; `req` is writable.
    let rc = unsafe { ffi::rcoll_mpi_grequest_start(state, req.as_mut_ptr()) };
    if rc != 0 {
        // SAFETY: MPI did not take the reference: given back here.
        drop(unsafe { Arc::from_raw(state as *const Outcome) });
        return Ok(rc);
    }
    // SAFETY: set by MPI_Grequest_start, which succeeded.
    let req = unsafe { req.assume_init() };
    // SAFETY: the caller's contract: `request` is writable.
    unsafe { request.write(req) };
    let (Some(bg), Some(entry)) = (background, entry) else {
        // Nothing to move: complete at once.
        // SAFETY: the request just started, completed once.
        unsafe { ffi::rcoll_mpi_grequest_complete(req) };
        return Ok(0);
    };
    let (send, recv) = (send as usize, recv as usize);
    let multiple = comms::thread_multiple();
    let req = Sent(req);
    let job = move |c: &mut rcoll::Communicator| {
        let (req, mut stage) = (req, stage);
        let (s, r) = stage.buffers(send as *const c_void, recv as *mut c_void);
        if let Some(ready) = entry.ready() {
            memory::register_for(
                c,
                ready as *const comms::Ready as usize,
                [s, r.cast_const()],
            );
        }
        // SAFETY: MPI's contract for a nonblocking call: the buffers stay valid and
        // untouched until the request completes, which is after this.
        let done = unsafe { run::execute(c, &plan, s, r) };
        // SAFETY: as above, for the receive buffer.
        let unpacked = unsafe { stage.finish(done.is_ok()) };
        let failed = match (done, unpacked) {
            (Ok(()), Ok(())) => None,
            (Err(e), _) => {
                let why = e.to_string();
                if let Some(r) = entry.ready() {
                    r.fail(&why);
                }
                Some(why)
            }
            (Ok(()), Err(why)) => Some(why),
        };
        if let Some(why) = failed {
            outcome.fail(why);
        }
        if multiple {
            // SAFETY: the request this call started, completed once; at
            // MPI_THREAD_MULTIPLE any thread may.
            unsafe { ffi::rcoll_mpi_grequest_complete(req.0) };
        }
        Ok(())
    };
    let call = bg.submit(job);
    if !multiple {
        // Completed by the application's completion calls (pending.rs).
        pending::keep(req.0, call);
    }
    Ok(0)
}

/// A collective rcoll does not serve: counted, then given to MPI.
fn forwarded(coll: Coll, forward: impl FnOnce() -> c_int) -> c_int {
    guarded(coll.mpi_name(), || {
        let reason = match comms::control() {
            Some(c) if !c.enabled => Reason::Disabled,
            _ => Reason::NotServed,
        };
        tally(coll, Err(reason), forward)
    })
}

/// A reduction's arguments: one count and datatype for both sides.
fn reduction<'a>(
    coll: Coll,
    (rank, size): (usize, usize),
    (send, recv): (*const c_void, *const c_void),
    count: c_int,
    dtype: Datatype,
    op: Op,
    root: c_int,
) -> Args<'a, Datatype> {
    Args {
        coll,
        rank,
        size,
        root,
        send: side(send, count, dtype),
        recv: side(recv, count, dtype),
        op: op_kind(op),
        counts: &[],
    }
}

/// A data movement's arguments.
#[allow(clippy::too_many_arguments)]
fn movement<'a>(
    coll: Coll,
    (rank, size): (usize, usize),
    (send, sendcount, sendtype): (*const c_void, c_int, Datatype),
    (recv, recvcount, recvtype): (*const c_void, c_int, Datatype),
    root: c_int,
) -> Args<'a, Datatype> {
    Args {
        coll,
        rank,
        size,
        root,
        send: side(send, sendcount, sendtype),
        recv: side(recv, recvcount, recvtype),
        op: OpKind::Null,
        counts: &[],
    }
}

/// Initializes MPI, then forms the world's rcoll communicator.
///
/// # Safety
/// MPI's contract for `MPI_Init`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { ffi::PMPI_Init(argc, argv) };
    if rc == 0 {
        guarded("MPI_Init", || {
            comms::init();
            0
        });
    }
    rc
}

/// Initializes MPI at a thread level, then forms the world's rcoll communicator.
///
/// # Safety
/// MPI's contract for `MPI_Init_thread`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Init_thread(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { ffi::PMPI_Init_thread(argc, argv, required, provided) };
    if rc == 0 {
        guarded("MPI_Init_thread", || {
            comms::init();
            0
        });
    }
    rc
}

/// Prints the stats (`RCOLL_MPI_STATS=1`, world rank 0), drops every rcoll communicator,
/// then finalizes MPI.
///
/// # Safety
/// MPI's contract for `MPI_Finalize`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Finalize() -> c_int {
    guarded("MPI_Finalize", || {
        if comms::control().is_some_and(|c| c.stats) && comms::world_rank() == 0 {
            let mut out = std::io::stdout().lock();
            for line in STATS.lines() {
                let _ = writeln!(out, "{line}");
            }
            if let Some(line) = memory::stats_line(comms::world_zero_copy_sends()) {
                let _ = writeln!(out, "{line}");
            }
            let _ = out.flush();
        }
        // Deregistered while the communicators' devices are open.
        memory::deregister_all();
        comms::finalize();
        0
    });
    // SAFETY: MPI's call, no arguments.
    unsafe { ffi::PMPI_Finalize() }
}

/// `MPI_Allreduce`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Datatype,
    op: Op,
    comm: Comm,
) -> c_int {
    let c = Coll::Allreduce;
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        collective(
            c,
            comm,
            Some((count, datatype)),
            sendbuf,
            recvbuf,
            |r, n| reduction(c, (r, n), (sendbuf, recvbuf), count, datatype, op, 0),
            || ffi::PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm),
        )
    }
}

/// `MPI_Reduce`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Datatype,
    op: Op,
    root: c_int,
    comm: Comm,
) -> c_int {
    let c = Coll::Reduce;
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        collective(
            c,
            comm,
            Some((count, datatype)),
            sendbuf,
            recvbuf,
            |r, n| reduction(c, (r, n), (sendbuf, recvbuf), count, datatype, op, root),
            || ffi::PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm),
        )
    }
}

/// `MPI_Bcast`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Bcast(
    buffer: *mut c_void,
    count: c_int,
    datatype: Datatype,
    root: c_int,
    comm: Comm,
) -> c_int {
    let c = Coll::Bcast;
    let none = std::ptr::null();
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        collective(
            c,
            comm,
            Some((count, datatype)),
            none,
            buffer,
            |r, n| {
                movement(
                    c,
                    (r, n),
                    (none, 0, datatype),
                    (buffer, count, datatype),
                    root,
                )
            },
            || ffi::PMPI_Bcast(buffer, count, datatype, root, comm),
        )
    }
}

/// `MPI_Allgather`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Datatype,
    comm: Comm,
) -> c_int {
    let c = Coll::Allgather;
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        collective(
            c,
            comm,
            None,
            sendbuf,
            recvbuf,
            |r, n| {
                movement(
                    c,
                    (r, n),
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcount, recvtype),
                    0,
                )
            },
            || {
                ffi::PMPI_Allgather(
                    sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                )
            },
        )
    }
}

/// `MPI_Reduce_scatter_block`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    datatype: Datatype,
    op: Op,
    comm: Comm,
) -> c_int {
    let c = Coll::ReduceScatterBlock;
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        collective(
            c,
            comm,
            Some((recvcount, datatype)),
            sendbuf,
            recvbuf,
            |r, n| reduction(c, (r, n), (sendbuf, recvbuf), recvcount, datatype, op, 0),
            || ffi::PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm),
        )
    }
}

/// `MPI_Reduce_scatter`: served when every count is equal.
///
/// # Safety
/// MPI's contract for this call (`recvcounts` holds the communicator's size of counts).
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    datatype: Datatype,
    op: Op,
    comm: Comm,
) -> c_int {
    let c = Coll::ReduceScatter;
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        collective(
            c,
            comm,
            None,
            sendbuf,
            recvbuf,
            |r, n| {
                let counts: &[c_int] = if recvcounts.is_null() {
                    &[]
                } else {
                    // SAFETY: MPI's contract: one count per member of the communicator.
                    std::slice::from_raw_parts(recvcounts, n)
                };
                Args {
                    counts,
                    ..reduction(c, (r, n), (sendbuf, recvbuf), 0, datatype, op, 0)
                }
            },
            || ffi::PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm),
        )
    }
}

/// `MPI_Alltoall`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Datatype,
    comm: Comm,
) -> c_int {
    let c = Coll::Alltoall;
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        collective(
            c,
            comm,
            None,
            sendbuf,
            recvbuf,
            |r, n| {
                movement(
                    c,
                    (r, n),
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcount, recvtype),
                    0,
                )
            },
            || {
                ffi::PMPI_Alltoall(
                    sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                )
            },
        )
    }
}

/// `MPI_Gather`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Gather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Datatype,
    root: c_int,
    comm: Comm,
) -> c_int {
    let c = Coll::Gather;
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        collective(
            c,
            comm,
            None,
            sendbuf,
            recvbuf,
            |r, n| {
                movement(
                    c,
                    (r, n),
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcount, recvtype),
                    root,
                )
            },
            || {
                ffi::PMPI_Gather(
                    sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
                )
            },
        )
    }
}

/// `MPI_Scatter`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Scatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Datatype,
    root: c_int,
    comm: Comm,
) -> c_int {
    let c = Coll::Scatter;
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        collective(
            c,
            comm,
            None,
            sendbuf,
            recvbuf,
            |r, n| {
                movement(
                    c,
                    (r, n),
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcount, recvtype),
                    root,
                )
            },
            || {
                ffi::PMPI_Scatter(
                    sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
                )
            },
        )
    }
}

/// `MPI_Barrier`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Barrier(comm: Comm) -> c_int {
    let c = Coll::Barrier;
    let (none, nothing) = (std::ptr::null(), std::ptr::null_mut());
    // SAFETY: MPI's contract for the call, passed on; a barrier has no buffers.
    unsafe {
        collective(
            c,
            comm,
            Some((0, NO_DATATYPE)),
            none,
            nothing,
            |r, n| movement(c, (r, n), (none, 0, NO_DATATYPE), (none, 0, NO_DATATYPE), 0),
            || ffi::PMPI_Barrier(comm),
        )
    }
}

/// `MPI_Allgatherv`: forwarded (counted).
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: Datatype,
    comm: Comm,
) -> c_int {
    forwarded(Coll::Allgatherv, || {
        // SAFETY: the caller's arguments, passed on.
        unsafe {
            ffi::PMPI_Allgatherv(
                sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm,
            )
        }
    })
}

/// `MPI_Gatherv`: forwarded (counted).
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: Datatype,
    root: c_int,
    comm: Comm,
) -> c_int {
    forwarded(Coll::Gatherv, || {
        // SAFETY: the caller's arguments, passed on.
        unsafe {
            ffi::PMPI_Gatherv(
                sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm,
            )
        }
    })
}

/// `MPI_Scatterv`: forwarded (counted).
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Scatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Datatype,
    root: c_int,
    comm: Comm,
) -> c_int {
    forwarded(Coll::Scatterv, || {
        // SAFETY: the caller's arguments, passed on.
        unsafe {
            ffi::PMPI_Scatterv(
                sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm,
            )
        }
    })
}

/// `MPI_Alltoallv`: forwarded (counted).
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: Datatype,
    comm: Comm,
) -> c_int {
    forwarded(Coll::Alltoallv, || {
        // SAFETY: the caller's arguments, passed on.
        unsafe {
            ffi::PMPI_Alltoallv(
                sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                comm,
            )
        }
    })
}

/// `MPI_Scan`: forwarded (counted).
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Scan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Datatype,
    op: Op,
    comm: Comm,
) -> c_int {
    forwarded(Coll::Scan, || {
        // SAFETY: the caller's arguments, passed on.
        unsafe { ffi::PMPI_Scan(sendbuf, recvbuf, count, datatype, op, comm) }
    })
}

/// `MPI_Exscan`: forwarded (counted).
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Exscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Datatype,
    op: Op,
    comm: Comm,
) -> c_int {
    forwarded(Coll::Exscan, || {
        // SAFETY: the caller's arguments, passed on.
        unsafe { ffi::PMPI_Exscan(sendbuf, recvbuf, count, datatype, op, comm) }
    })
}

/// `MPI_Iallreduce`: a generalized request, served at `MPI_THREAD_MULTIPLE`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Iallreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Datatype,
    op: Op,
    comm: Comm,
    request: *mut Request,
) -> c_int {
    let c = Coll::Iallreduce;
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        nonblocking(
            c,
            comm,
            (sendbuf, recvbuf),
            request,
            |r, n| reduction(c, (r, n), (sendbuf, recvbuf), count, datatype, op, 0),
            || ffi::PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request),
        )
    }
}

/// `MPI_Ibcast`: a generalized request, served at `MPI_THREAD_MULTIPLE`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Ibcast(
    buffer: *mut c_void,
    count: c_int,
    datatype: Datatype,
    root: c_int,
    comm: Comm,
    request: *mut Request,
) -> c_int {
    let c = Coll::Ibcast;
    let none = std::ptr::null();
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        nonblocking(
            c,
            comm,
            (none, buffer),
            request,
            |r, n| {
                movement(
                    c,
                    (r, n),
                    (none, 0, datatype),
                    (buffer, count, datatype),
                    root,
                )
            },
            || ffi::PMPI_Ibcast(buffer, count, datatype, root, comm, request),
        )
    }
}

/// `MPI_Iallgather`: a generalized request, served at `MPI_THREAD_MULTIPLE`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Iallgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Datatype,
    comm: Comm,
    request: *mut Request,
) -> c_int {
    let c = Coll::Iallgather;
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        nonblocking(
            c,
            comm,
            (sendbuf, recvbuf),
            request,
            |r, n| {
                movement(
                    c,
                    (r, n),
                    (sendbuf, sendcount, sendtype),
                    (recvbuf, recvcount, recvtype),
                    0,
                )
            },
            || {
                ffi::PMPI_Iallgather(
                    sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request,
                )
            },
        )
    }
}

/// `MPI_Ireduce_scatter_block`: a generalized request, served at `MPI_THREAD_MULTIPLE`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Ireduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    datatype: Datatype,
    op: Op,
    comm: Comm,
    request: *mut Request,
) -> c_int {
    let c = Coll::IreduceScatterBlock;
    // SAFETY: MPI's contract for the call, passed on.
    unsafe {
        nonblocking(
            c,
            comm,
            (sendbuf, recvbuf),
            request,
            |r, n| reduction(c, (r, n), (sendbuf, recvbuf), recvcount, datatype, op, 0),
            || {
                ffi::PMPI_Ireduce_scatter_block(
                    sendbuf, recvbuf, recvcount, datatype, op, comm, request,
                )
            },
        )
    }
}

/// `MPI_Ibarrier`: a generalized request, served at `MPI_THREAD_MULTIPLE`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Ibarrier(comm: Comm, request: *mut Request) -> c_int {
    let c = Coll::Ibarrier;
    let (none, nothing) = (std::ptr::null(), std::ptr::null_mut());
    // SAFETY: MPI's contract for the call, passed on; a barrier has no buffers.
    unsafe {
        nonblocking(
            c,
            comm,
            (none, nothing),
            request,
            |r, n| movement(c, (r, n), (none, 0, NO_DATATYPE), (none, 0, NO_DATATYPE), 0),
            || ffi::PMPI_Ibarrier(comm, request),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::cause_first;

    #[test]
    fn the_innermost_cause_of_an_rcoll_message_comes_first() {
        assert_eq!(
            cause_first("rank 0: all_reduce #1 (mesh, step 0): rank 1: rank 2 closed its end"),
            "rank 2 closed its end (in: rank 0: all_reduce #1 (mesh, step 0): rank 1: rank 2 \
             closed its end)"
        );
        assert_eq!(
            cause_first("rank 0: reduce (a: b): timed out waiting for rank 2 [rank 2: idle]"),
            "timed out waiting for rank 2 [rank 2: idle] (in: rank 0: reduce (a: b): timed out \
             waiting for rank 2 [rank 2: idle])"
        );
        assert_eq!(cause_first("no context"), "no context");
        assert_eq!(cause_first("ends in a colon: "), "ends in a colon: ");
    }
}
