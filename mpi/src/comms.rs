//! rcoll communicators of MPI communicators: the world's, formed in `MPI_Init`, and every
//! other's, formed at its first served collective (every member makes that call, so
//! forming it there is a collective like any other) and kept as an MPI attribute whose
//! delete callback (run by `MPI_Comm_free`) drops it. `MPI_Finalize` drops them all.
//!
//! Forming one: rank 0 of the MPI communicator opens a rendezvous
//! ([`rcoll::process::UniqueId`]), its bytes reach the others by `PMPI_Bcast`, each builds
//! its rank (transport from `RCOLL_TRANSPORT`, by default shared memory inside a host),
//! and a `PMPI_Allreduce` of the outcome makes every rank agree: if any failed, none uses
//! rcoll on that communicator (the failing ones print why), and its calls go to MPI. The
//! same reduction settles which small calls go to MPI there (see [`Ready::too_small`]).

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void, CString};
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use rcoll::process::{Builder, UniqueId, UNIQUE_ID_BYTES};
use rcoll::{Background, Communicator};

use crate::control::Control;
use crate::decide::Reason;
use crate::ffi::{self, Comm};

/// One MPI communicator's rcoll side.
pub struct Entry {
    /// This rank in it.
    pub rank: usize,
    /// Its size.
    pub size: usize,
    /// Whether it has an rcoll communicator.
    pub state: State,
}

/// Whether a communicator is served.
pub enum State {
    /// Its calls go to MPI, for this reason.
    Unavailable(Reason),
    /// Its rcoll communicator.
    Ready(Box<Ready>),
}

/// A served communicator.
pub struct Ready {
    /// The communicator, driven by the calling thread until the first nonblocking call
    /// gives it a progress thread.
    slot: Mutex<Slot>,
    /// The first rcoll error (rcoll's communicators are unusable after one), returned
    /// again by every later call. Apart from `slot`: a queued call that fails records it
    /// from the progress thread while a blocking caller may hold `slot`. Set once, and
    /// read by every call: a load, not a lock.
    failed: OnceLock<String>,
    /// Blocking calls of fewer bytes go to MPI (0: none): `RCOLL_MPI_SHM_MIN` where every
    /// member reaches every other through rcoll's shared memory alone, or where one rank
    /// is the whole communicator. Agreed by all
    /// members when the communicator was formed, as the calls forwarded for their size
    /// must be.
    small_below: usize,
}

enum Slot {
    Plain(Box<Communicator>),
    Queued(Arc<Background>),
    /// Its progress thread could not start.
    Gone,
}

impl Ready {
    fn new(comm: Communicator, small_below: usize) -> Ready {
        Ready {
            slot: Mutex::new(Slot::Plain(Box::new(comm))),
            failed: OnceLock::new(),
            small_below,
        }
    }

    /// Whether a blocking call of `bytes` goes to MPI for its size. Asked before whether
    /// the communicator failed (which one rank may know before another): a fact every rank
    /// holds alike decides, so no rank waits in MPI for one that raised rcoll's error.
    pub fn too_small(&self, bytes: usize) -> Result<(), Reason> {
        match bytes < self.small_below {
            true => Err(Reason::Small(self.small_below)),
            false => Ok(()),
        }
    }

    /// The error an earlier call left, if any.
    pub fn failed(&self) -> Option<&str> {
        self.failed.get().map(String::as_str)
    }

    /// Records a call's error (the first one stays).
    pub fn fail(&self, message: &str) {
        let _ = self.failed.set(message.to_string());
    }

    /// Runs `f` on the communicator on this thread, after every queued call.
    pub fn run(&self, f: impl FnOnce(&mut Communicator) -> rcoll::Result<()>) -> rcoll::Result<()> {
        let mut slot = lock(&self.slot);
        match &mut *slot {
            Slot::Plain(c) => f(c),
            Slot::Queued(bg) => {
                let bg = Arc::clone(bg);
                drop(slot);
                bg.run(f)
            }
            Slot::Gone => Err(rcoll::Error::Config("no progress thread".into())),
        }
    }

    /// Drops the communicator (the world's at `MPI_Finalize`, whose entry stays).
    fn close(&self) {
        let closed = std::mem::replace(&mut *lock(&self.slot), Slot::Gone);
        drop(closed);
    }

    /// The communicator with a progress thread (started now if it has none).
    pub fn background(&self) -> Result<Arc<Background>, String> {
        let mut slot = lock(&self.slot);
        if let Slot::Plain(_) = &*slot {
            let Slot::Plain(comm) = std::mem::replace(&mut *slot, Slot::Gone) else {
                unreachable!("matched above");
            };
            match Background::new(*comm) {
                Ok(bg) => *slot = Slot::Queued(Arc::new(bg)),
                Err(e) => return Err(e.to_string()),
            }
        }
        match &*slot {
            Slot::Queued(bg) => Ok(Arc::clone(bg)),
            _ => Err("its progress thread could not start".into()),
        }
    }
}

/// An entry as a call holds it. The world's is never dropped (its communicator is, at
/// `MPI_Finalize`), so a call on `MPI_COMM_WORLD` finds it with no lock taken and no
/// reference counted: each is an atomic read-modify-write on every call.
#[derive(Clone)]
pub enum Held {
    World(&'static Entry),
    Other(Arc<Entry>),
}

impl Deref for Held {
    type Target = Entry;

    fn deref(&self) -> &Entry {
        match self {
            Held::World(e) => e,
            Held::Other(e) => e,
        }
    }
}

impl Entry {
    /// Its rcoll communicator, if it has one.
    pub fn ready(&self) -> Option<&Ready> {
        match &self.state {
            State::Ready(r) => Some(r),
            State::Unavailable(_) => None,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while held is caught at the C boundary, which ends the job.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The process's shim, between `MPI_Init` and `MPI_Finalize`.
struct Shim {
    /// The attribute carrying an entry's id.
    keyval: c_int,
    /// rcoll's MPI error class (-1: MPI gave none).
    error_class: c_int,
    others: HashMap<usize, Arc<Entry>>,
    next: usize,
    /// Entries of freed communicators, oldest first, kept open until `MPI_Finalize` (at
    /// most [`RETIRED`]): see [`delete_entry`].
    retired: VecDeque<Arc<Entry>>,
}

/// Freed communicators kept open; beyond this many the oldest is closed.
const RETIRED: usize = 64;

static SHIM: RwLock<Option<Shim>> = RwLock::new(None);
/// `MPI_COMM_WORLD`'s entry, set in `MPI_Init`.
static WORLD: OnceLock<Entry> = OnceLock::new();
/// Between the shim's `MPI_Init` and `MPI_Finalize`: [`SHIM`] is set and [`WORLD`] open.
static LIVE: AtomicBool = AtomicBool::new(false);
static CONTROL: OnceLock<Control> = OnceLock::new();
/// MPI was initialized at `MPI_THREAD_MULTIPLE`: rcoll's progress thread may complete
/// requests.
static MULTIPLE: AtomicBool = AtomicBool::new(false);

/// Whether MPI runs at `MPI_THREAD_MULTIPLE` (read at `MPI_Init*`).
pub fn thread_multiple() -> bool {
    MULTIPLE.load(Ordering::Relaxed)
}

/// The environment's settings, read at `MPI_Init` (`None` before).
pub fn control() -> Option<&'static Control> {
    CONTROL.get()
}

fn read() -> std::sync::RwLockReadGuard<'static, Option<Shim>> {
    SHIM.read().unwrap_or_else(|p| p.into_inner())
}

fn write() -> std::sync::RwLockWriteGuard<'static, Option<Shim>> {
    SHIM.write().unwrap_or_else(|p| p.into_inner())
}

/// This process's rank in `MPI_COMM_WORLD`.
pub fn world_rank() -> i32 {
    // SAFETY: a query, valid after MPI_Init; -1 if MPI refuses it.
    unsafe { ffi::rcoll_mpi_world_rank() }
}

fn world_handle() -> Comm {
    // SAFETY: returns a constant handle.
    unsafe { ffi::rcoll_mpi_comm_world() }
}

/// After `PMPI_Init*` succeeded: reads the environment and forms the world's communicator
/// (unless `RCOLL_MPI=0`).
pub fn init() {
    let control = CONTROL.get_or_init(Control::from_env);
    // SAFETY: a query, valid after MPI_Init.
    MULTIPLE.store(
        unsafe { ffi::rcoll_mpi_thread_multiple() } != 0,
        Ordering::Relaxed,
    );
    let me = world_rank();
    if me == 0 {
        for w in &control.warnings {
            eprintln!("rcoll-mpi: {w}");
        }
    }
    if !control.enabled {
        return;
    }
    let mut keyval: c_int = -1;
    // SAFETY: `delete_entry` has the delete callback's signature; keyval is writable.
    if unsafe { ffi::rcoll_mpi_keyval_create(delete_entry, &mut keyval) } != 0 {
        eprintln!("rcoll-mpi: rank {me}: MPI gave no attribute key: collectives go to MPI");
        return;
    }
    let mut error_class: c_int = -1;
    // SAFETY: writable out-parameter.
    if unsafe { ffi::rcoll_mpi_error_class(&mut error_class) } != 0 {
        error_class = -1;
    }
    let world = world_handle();
    let entry = match comm_info(world) {
        Ok((rank, size)) => form(world, rank, size, "MPI_COMM_WORLD"),
        Err(reason) => Entry {
            rank: 0,
            size: 0,
            state: State::Unavailable(reason),
        },
    };
    // MPI is initialized once per process: the first entry is the only one.
    let _ = WORLD.set(entry);
    *write() = Some(Shim {
        keyval,
        error_class,
        others: HashMap::new(),
        next: 1,
        retired: VecDeque::new(),
    });
    LIVE.store(true, Ordering::Release);
}

/// How many segments the world's rcoll communicator sent zero-copy from the
/// application's memory (0 without one).
pub fn world_zero_copy_sends() -> u64 {
    let mut sends = 0;
    if let Some(ready) = WORLD.get().and_then(|w| w.ready()) {
        let _ = ready.run(|c| {
            sends = c.statistics().zero_copy_sends;
            Ok(())
        });
    }
    sends
}

/// Before `PMPI_Finalize`: drops every rcoll communicator and the attribute key.
pub fn finalize() {
    let taken = write().take();
    LIVE.store(false, Ordering::Release);
    if let Some(mut shim) = taken {
        // No rank closes its communicators before every rank has finished its calls on
        // them: a rank whose send of a rooted call (a reduce's contribution) returned may
        // otherwise close while the root still receives, which then fails with 'closed
        // its end of the connection' (MPICH's tests end with MPI_Reduce, then
        // MPI_Finalize: 3 of 168 failed so on 8 and 10 ranks).
        // SAFETY: MPI is initialized; every rank calls MPI_Finalize.
        unsafe { ffi::rcoll_mpi_world_barrier() };
        if let Some(ready) = WORLD.get().and_then(Entry::ready) {
            ready.close();
        }
        drop(std::mem::take(&mut shim.others));
        drop(std::mem::take(&mut shim.retired));
        // SAFETY: the key this shim created; MPI is still initialized.
        unsafe { ffi::rcoll_mpi_keyval_free(&mut shim.keyval) };
    }
}

/// Rank and size of an intracommunicator; why not otherwise.
pub fn comm_info(comm: Comm) -> Result<(usize, usize), Reason> {
    let (mut rank, mut size) = (0, 0);
    // SAFETY: out-parameters writable; a null or refused handle is reported, not used.
    match unsafe { ffi::rcoll_mpi_comm_info(comm, &mut rank, &mut size) } {
        0 => Ok((
            usize::try_from(rank).unwrap_or_default(),
            usize::try_from(size).unwrap_or_default(),
        )),
        1 => Err(Reason::Intercommunicator),
        _ => Err(Reason::InvalidArgument("communicator")),
    }
}

/// The world's communicator, when `comm` is `MPI_COMM_WORLD`, served, and giving MPI its
/// small blocking calls ([`Ready::too_small`]).
pub fn world_giving_small(comm: Comm) -> Option<&'static Ready> {
    if !LIVE.load(Ordering::Acquire) || comm != world_handle() {
        return None;
    }
    WORLD.get()?.ready().filter(|r| r.small_below > 0)
}

/// The entry of `comm` if it has one (`Err`: MPI was not initialized through the shim).
pub fn lookup(comm: Comm) -> Result<Option<Held>, Reason> {
    if !LIVE.load(Ordering::Acquire) {
        return Err(Reason::NotInitialized);
    }
    if comm == world_handle() {
        return Ok(WORLD.get().map(Held::World));
    }
    let guard = read();
    let shim = guard.as_ref().ok_or(Reason::NotInitialized)?;
    let mut value: *mut c_void = std::ptr::null_mut();
    // SAFETY: `value` is writable; a communicator without the attribute says so.
    if unsafe { ffi::rcoll_mpi_attr_get(comm, shim.keyval, &mut value) } == 0 {
        return Ok(None);
    }
    Ok(shim.others.get(&(value as usize)).cloned().map(Held::Other))
}

/// The entry of `comm` (rank `rank` of `size`), formed now if it has none: a collective
/// over `comm`, which every member reaches in the same call.
pub fn entry_or_form(comm: Comm, rank: usize, size: usize) -> Held {
    match lookup(comm) {
        Ok(Some(e)) => return e,
        Ok(None) => {}
        Err(reason) => {
            return Held::Other(Arc::new(Entry {
                rank,
                size,
                state: State::Unavailable(reason),
            }))
        }
    }
    let entry = Arc::new(form(comm, rank, size, "a communicator"));
    let mut guard = write();
    let Some(shim) = guard.as_mut() else {
        return Held::Other(entry);
    };
    let id = shim.next;
    shim.next += 1;
    // SAFETY: the key is this shim's; the value is an id, never dereferenced.
    if unsafe { ffi::rcoll_mpi_attr_set(comm, shim.keyval, id as *mut c_void) } == 0 {
        shim.others.insert(id, Arc::clone(&entry));
    }
    Held::Other(entry)
}

/// Forms the rcoll communicator of `comm`, or says why not on every rank alike.
fn form(comm: Comm, rank: usize, size: usize, label: &str) -> Entry {
    let unavailable = |reason| Entry {
        rank,
        size,
        state: State::Unavailable(reason),
    };
    let me = world_rank();
    let say = |why: &dyn std::fmt::Display| {
        eprintln!("rcoll-mpi: rank {me}: no rcoll communicator for {label} ({why}): its collectives go to MPI");
    };
    // [1, id...] from rank 0, or [0, ...] if it could not open a rendezvous.
    let mut bytes = [0u8; UNIQUE_ID_BYTES + 1];
    if rank == 0 {
        match UniqueId::new() {
            Ok(id) => {
                bytes[0] = 1;
                bytes[1..].copy_from_slice(&id.to_bytes());
            }
            Err(e) => say(&e),
        }
    }
    // SAFETY: `bytes` is writable for its length; every member makes this call.
    let sent = unsafe {
        ffi::rcoll_mpi_bcast_bytes(bytes.as_mut_ptr().cast(), bytes.len() as c_int, 0, comm)
    };
    if sent != 0 || bytes[0] != 1 {
        return unavailable(Reason::NoCommunicator);
    }
    let mut id = [0u8; UNIQUE_ID_BYTES];
    id.copy_from_slice(&bytes[1..]);
    let built =
        UniqueId::from_bytes(&id).and_then(|id| Builder::from_unique_id(&id, rank, size)?.build());
    if let Err(e) = &built {
        say(e);
    }
    // Agreed by all, each the least of the members' values: whether every member built
    // its rank; whether every one reaches all the others through shared memory alone
    // (rcoll's "shm": a pair that could not map its peer's segment goes over TCP on those
    // two ranks only, see `rcoll_transport::shm`), or has no other to reach (one rank,
    // where a small call is a copy MPI makes sooner, as inside any host); the smallest
    // call served there.
    let one_host = built
        .as_ref()
        .is_ok_and(|c| c.transport_name() == "shm" || size == 1);
    let shm_min = control().map_or(0, |c| c.shm_min);
    let mut agreed = [
        c_int::from(built.is_ok()),
        c_int::from(one_host),
        c_int::try_from(shm_min).unwrap_or(c_int::MAX),
    ];
    // SAFETY: `agreed` is writable for its length; every member makes this call.
    let failed = unsafe { ffi::rcoll_mpi_all_min(agreed.as_mut_ptr(), 3, comm) } != 0;
    match built {
        Ok(c) if !failed && agreed[0] == 1 => {
            let small_below = match agreed[1] {
                1 => usize::try_from(agreed[2]).unwrap_or_default(),
                _ => 0,
            };
            Entry {
                rank,
                size,
                state: State::Ready(Box::new(Ready::new(c, small_below))),
            }
        }
        _ => unavailable(Reason::NoCommunicator),
    }
}

/// The attribute's delete callback (`MPI_Comm_free`, `MPI_Finalize`): retires the entry.
///
/// Not closed at once: `MPI_Comm_free` does not wait for the other members, and a rank
/// whose last call on the communicator was a rooted one may free it while the root still
/// receives its contribution, which closing would fail. Kept open until `MPI_Finalize`
/// (after a barrier there), or until [`RETIRED`] later frees: every communicator made
/// since took a collective of its parent's members.
unsafe extern "C" fn delete_entry(
    _comm: Comm,
    _keyval: c_int,
    value: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    let id = value as usize;
    let closed = std::panic::catch_unwind(|| {
        let mut guard = write();
        let shim = guard.as_mut()?;
        let entry = shim.others.remove(&id)?;
        shim.retired.push_back(entry);
        (shim.retired.len() > RETIRED)
            .then(|| shim.retired.pop_front())
            .flatten()
    });
    // Dropped outside the lock: closing a communicator takes a moment.
    drop(closed);
    0
}

/// An rcoll failure of a call on `comm`, given to its error handler: with
/// `MPI_ERRORS_ARE_FATAL` the message is printed and the job aborted; otherwise the call
/// returns an error code of rcoll's class whose `MPI_Error_string` is the message.
pub fn raise(comm: Comm, message: &str) -> c_int {
    // SAFETY: a query on a communicator the call was given.
    let fatal = unsafe { ffi::rcoll_mpi_errors_are_fatal(comm) } != 0;
    if fatal {
        eprintln!("{message}");
        // SAFETY: ends the job; MPI is initialized.
        unsafe { ffi::rcoll_mpi_abort(comm, 1) };
    }
    let class = read().as_ref().map_or(-1, |s| s.error_class);
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: `text` is NUL-terminated and outlives the call (MPI copies it).
    unsafe { ffi::rcoll_mpi_raise(comm, class, text.as_ptr()) }
}
