//! Nonblocking collectives: a communicator driven by a progress thread.
//!
//! [`Background`] owns a [`Communicator`] and one progress thread. Nonblocking calls
//! ([`Background::all_reduce`], [`Background::submit`], ...) queue their work and return a
//! [`Request`] at once; the progress thread runs the queue in issue order, so computation on
//! the calling thread overlaps communication. Blocking calls ([`Background::run`]) wait for
//! the queue to empty and then run on the calling thread itself, so they cost no thread
//! switch and keep the issue order too. So does [`Request::wait`] on a call still queued:
//! the waiting thread runs the queue's calls, in order, up to its own, rather than sleep
//! while the progress thread wakes to run them (a call issued and waited for at once, as
//! torch's synchronous collectives are, then costs what a blocking call does).
//!
//! ```
//! use rcoll::{local, Background, ReduceOp};
//!
//! let comms = local::group(2)?;
//! let sums: Vec<rcoll::Result<Vec<f32>>> = std::thread::scope(|s| {
//!     let ranks: Vec<_> = comms
//!         .into_iter()
//!         .map(|comm| {
//!             s.spawn(move || {
//!                 let comm = Background::new(comm)?;
//!                 let pending = comm.all_reduce(vec![1.0f32; 1 << 16], ReduceOp::Sum);
//!                 let busy: f64 = (0..10_000).map(|i| (i as f64).sqrt()).sum(); // overlaps
//!                 assert!(busy > 0.0);
//!                 pending.wait()
//!             })
//!         })
//!         .collect();
//!     ranks.into_iter().map(|r| r.join().expect("rank")).collect()
//! });
//! for sum in sums {
//!     assert!(sum?.iter().all(|&x| x == 2.0));
//! }
//! # Ok::<(), rcoll::Error>(())
//! ```

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::communicator::Communicator;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::op::ReduceOp;

type Job = Box<dyn FnOnce(&mut Communicator) + Send>;

struct State {
    /// Calls in issue order, each with its number.
    queue: VecDeque<(u64, Job)>,
    /// The number the next call gets.
    issued: u64,
    /// A job (the progress thread's or a blocking caller's) holds the communicator.
    busy: bool,
    closing: bool,
    /// The progress thread sleeps on `Shared::work`.
    worker_waiting: bool,
    /// Blocking callers sleeping on `Shared::idle`.
    callers_waiting: usize,
    /// [`Background::abort`]'s reason, until the communicator is aborted with it.
    abort: Option<String>,
}

struct Shared {
    /// `None` only once [`Background::into_inner`] took it.
    comm: Mutex<Option<Communicator>>,
    state: Mutex<State>,
    /// Wakes the progress thread: work queued (or closing). Signalled only when it sleeps,
    /// so that a blocking call costs no system call.
    work: Condvar,
    /// Wakes blocking callers: the communicator is free and nothing is queued.
    idle: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Jobs run under catch_unwind: a poisoned lock only means a panic elsewhere in the
    // caller's program, and the data it guards stays consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A communicator whose collectives can run on a progress thread (see the
/// [module](self)). `Sync`: any thread may queue work or wait for it.
pub struct Background {
    shared: Arc<Shared>,
    /// Ends the call running on the communicator, whoever holds it.
    aborter: crate::abort::AbortHandle,
    worker: Option<JoinHandle<()>>,
    rank: usize,
    size: usize,
}

/// A queued call: [`test`](Request::test) whether it is done, [`wait`](Request::wait) for
/// its result. Dropping it does not cancel the call (which still runs in its turn).
#[must_use = "a request's result says whether the collective succeeded"]
pub struct Request<R> {
    done: Arc<Completion<R>>,
    /// The queue its call waits in, so that a waiter can run it (see [`Request::wait`]).
    shared: Arc<Shared>,
    /// Its call's number in the queue: a waiter runs calls up to it, never past it.
    seq: u64,
}

struct Completion<R> {
    result: Mutex<Option<Result<R>>>,
    ready: Condvar,
}

impl<R> Request<R> {
    /// Whether the call has finished (successfully or not); never blocks.
    pub fn test(&self) -> bool {
        lock(&self.done.result).is_some()
    }

    /// Blocks until the call has finished and returns its result. Every collective ends
    /// within the communicator's timeout of its last progress, so this returns once the
    /// calls queued before it have too. While the communicator is free and the call still
    /// queued, the calling thread runs the queue itself, in issue order, up to this call
    /// and never past it (the progress thread may finish this call meanwhile; a later call
    /// run here would hold this thread, and whatever it was to do next, for as long as
    /// that call takes).
    pub fn wait(self) -> Result<R> {
        while lock(&self.done.result).is_none() {
            #[cfg(test)]
            tests::between_look_and_queue();
            if !run_next(&self.shared, self.seq) {
                break;
            }
        }
        let mut slot = lock(&self.done.result);
        loop {
            if let Some(r) = slot.take() {
                return r;
            }
            slot = self
                .done
                .ready
                .wait(slot)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Background {
    /// Takes `comm` and starts its progress thread.
    pub fn new(comm: Communicator) -> Result<Background> {
        let (rank, size) = (comm.rank(), comm.size());
        let aborter = comm.abort_handle();
        let shared = Arc::new(Shared {
            comm: Mutex::new(Some(comm)),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                issued: 0,
                busy: false,
                closing: false,
                worker_waiting: false,
                callers_waiting: 0,
                abort: None,
            }),
            work: Condvar::new(),
            idle: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name(format!("rcoll-progress-{rank}"))
            .spawn(move || progress(&s))
            .map_err(|e| Error::Internal {
                rank: rank as u32,
                what: format!("cannot start the progress thread: {e}"),
            })?;
        Ok(Background {
            shared,
            aborter,
            worker: Some(worker),
            rank,
            size,
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Queues `f`, to run on the progress thread after every call queued before it.
    pub fn submit<R, F>(&self, f: F) -> Request<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut Communicator) -> Result<R> + Send + 'static,
    {
        let done = Arc::new(Completion {
            result: Mutex::new(None),
            ready: Condvar::new(),
        });
        let theirs = Arc::clone(&done);
        let job: Job = Box::new(move |comm| {
            let r = guarded(comm, f);
            *lock(&theirs.result) = Some(r);
            theirs.ready.notify_all();
        });
        let mut st = lock(&self.shared.state);
        let seq = st.issued;
        st.issued += 1;
        st.queue.push_back((seq, job));
        let wake = st.worker_waiting && !st.busy;
        drop(st);
        if wake {
            self.shared.work.notify_one();
        }
        Request {
            done,
            shared: Arc::clone(&self.shared),
            seq,
        }
    }

    /// Runs `f` on the calling thread once every queued call has finished (a blocking
    /// call in issue order; with several threads calling, a blocking call also waits for
    /// calls other threads queued while it waited).
    pub fn run<R>(&self, f: impl FnOnce(&mut Communicator) -> Result<R>) -> Result<R> {
        let mut st = lock(&self.shared.state);
        while st.busy || !st.queue.is_empty() {
            st.callers_waiting += 1;
            st = self.shared.idle.wait(st).unwrap_or_else(|p| p.into_inner());
            st.callers_waiting -= 1;
        }
        st.busy = true;
        let abort = st.abort.take();
        drop(st);
        let r = with_comm(&self.shared, abort, f);
        release(&self.shared);
        r
    }

    /// Aborts the group: the other ranks' calls fail at once naming this rank, and every
    /// call queued here, or made later, fails. A call running (on the progress thread or
    /// a blocking caller's) ends within [`ABORT_POLL`](crate::abort::ABORT_POLL) and
    /// aborts the group itself; with none running, this does it now.
    pub fn abort(&self, reason: &str) {
        self.aborter.abort(reason);
        let mut st = lock(&self.shared.state);
        st.abort = Some(reason.to_string());
        if st.busy {
            return;
        }
        st.busy = true;
        let abort = st.abort.take();
        drop(st);
        let _ = with_comm(&self.shared, abort, |_| Ok(()));
        release(&self.shared);
    }

    /// Nonblocking in-place AllReduce of `buf` (see [`Communicator::all_reduce_in_place`]).
    pub fn all_reduce<T: Element>(&self, mut buf: Vec<T>, op: ReduceOp) -> Request<Vec<T>> {
        self.submit(move |c| c.all_reduce_in_place(&mut buf, op).map(|()| buf))
    }

    /// Nonblocking in-place Broadcast of `buf` from `root`.
    pub fn broadcast<T: Element>(&self, mut buf: Vec<T>, root: usize) -> Request<Vec<T>> {
        self.submit(move |c| c.broadcast_in_place(&mut buf, root).map(|()| buf))
    }

    /// Nonblocking AllGather: the result holds every rank's `send`, in rank order.
    pub fn all_gather<T: Element>(&self, send: Vec<T>) -> Request<Vec<T>> {
        self.submit(move |c| {
            let mut recv = vec![T::zeroed(); send.len().saturating_mul(c.size())];
            c.all_gather(&send, &mut recv).map(|()| recv)
        })
    }

    /// Nonblocking ReduceScatter: the result is this rank's block of the reduction of
    /// every rank's `send` (whose length is a multiple of the group size).
    pub fn reduce_scatter<T: Element>(&self, send: Vec<T>, op: ReduceOp) -> Request<Vec<T>> {
        self.submit(move |c| {
            let mut recv = vec![T::zeroed(); send.len() / c.size()];
            c.reduce_scatter(&send, &mut recv, op).map(|()| recv)
        })
    }

    /// Waits for every queued call, stops the progress thread and gives the communicator
    /// back.
    pub fn into_inner(mut self) -> Communicator {
        self.stop();
        match lock(&self.shared.comm).take() {
            Some(c) => c,
            None => unreachable!("only into_inner takes the communicator, and it consumes self"),
        }
    }

    fn stop(&mut self) {
        lock(&self.shared.state).closing = true;
        self.shared.work.notify_all();
        if let Some(w) = self.worker.take() {
            // The thread catches every job's panic; a join error cannot carry one.
            let _ = w.join();
        }
        // An abort made while a call ran, with nothing queued after it: applied now, so
        // that the other ranks hear of it.
        let abort = lock(&self.shared.state).abort.take();
        if abort.is_some() {
            let _ = with_comm(&self.shared, abort, |_| Ok(()));
        }
    }
}

impl Drop for Background {
    /// Runs what is queued to its end (every call ends within the timeout), then stops and
    /// closes the communicator, though requests still refer to its queue: the other ranks
    /// learn at once that this one left.
    fn drop(&mut self) {
        self.stop();
        drop(lock(&self.shared.comm).take());
    }
}

/// Runs `f`; a panic inside it aborts the group (its state is unknown) and becomes an
/// error instead of unwinding into the progress thread.
fn guarded<R>(
    comm: &mut Communicator,
    f: impl FnOnce(&mut Communicator) -> Result<R>,
) -> Result<R> {
    match catch_unwind(AssertUnwindSafe(|| f(comm))) {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            let what = format!("a queued call panicked: {what}");
            comm.abort(&what);
            Err(Error::Internal {
                rank: comm.rank() as u32,
                what,
            })
        }
    }
}

/// Runs `f` on the communicator (there while `self` lives: see `Shared::comm`).
///
/// The caller holds `busy`, and took any pending abort under the same lock.
fn with_comm<R>(
    shared: &Shared,
    abort: Option<String>,
    f: impl FnOnce(&mut Communicator) -> Result<R>,
) -> Result<R> {
    match lock(&shared.comm).as_mut() {
        Some(c) => {
            if let Some(reason) = abort {
                c.abort(&reason);
            }
            guarded(c, f)
        }
        None => Err(Error::Internal {
            rank: u32::MAX,
            what: "the communicator was taken from its progress thread".into(),
        }),
    }
}

fn progress(shared: &Shared) {
    loop {
        let mut st = lock(&shared.state);
        while st.busy || st.queue.is_empty() {
            if st.closing && !st.busy && st.queue.is_empty() {
                return;
            }
            st.worker_waiting = true;
            st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
            st.worker_waiting = false;
        }
        drop(st);
        run_next(shared, u64::MAX);
    }
}

/// Runs the queue's first call on this thread if the communicator is free and the call's
/// number is at most `upto`; false if it is busy, nothing is queued, or the first call
/// comes later. The progress thread and a waiting [`Request`] both run calls this way, so
/// they keep the issue order between them.
fn run_next(shared: &Shared, upto: u64) -> bool {
    let mut st = lock(&shared.state);
    if st.busy || st.queue.front().is_none_or(|(seq, _)| *seq > upto) {
        return false;
    }
    let Some((_, job)) = st.queue.pop_front() else {
        return false;
    };
    st.busy = true;
    let abort = st.abort.take();
    drop(st);
    let _ = with_comm(shared, abort, |c| {
        job(c);
        Ok(())
    });
    release(shared);
    true
}

/// Frees the communicator, waking whoever waits for it.
fn release(shared: &Shared) {
    let mut st = lock(&shared.state);
    st.busy = false;
    let worker = st.worker_waiting && (!st.queue.is_empty() || st.closing);
    let callers = st.callers_waiting > 0 && st.queue.is_empty();
    drop(st);
    if worker {
        shared.work.notify_one();
    }
    if callers {
        shared.idle.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    type Hook = Box<dyn FnMut()>;

    thread_local! {
        /// Runs on a waiting thread between its look at its call's result and its look at
        /// the queue: the one interleaving a test cannot otherwise bring about.
        static BETWEEN: RefCell<Option<Hook>> = const { RefCell::new(None) };
    }

    pub(super) fn between_look_and_queue() {
        // Taken out while it runs: the hook may itself wait on a request.
        if let Some(mut hook) = BETWEEN.with(|h| h.borrow_mut().take()) {
            hook();
            BETWEEN.with(|h| *h.borrow_mut() = Some(hook));
        }
    }

    /// The waiter for call 2 finds it unfinished and, before it looks at the queue, the
    /// progress thread finishes it and call 3 is issued: the waiter returns without
    /// running call 3 (the progress thread runs it), in every repetition.
    #[test]
    fn a_waiter_whose_call_finished_meanwhile_runs_no_later_call() {
        let mut comms = crate::local::Builder::new(1).build().expect("group");
        let bg = Arc::new(Background::new(comms.remove(0)).expect("progress thread"));
        let waiter = std::thread::current().id();
        for repetition in 0..200 {
            let ran = Arc::new(Mutex::new(Vec::new()));
            let job = |k: usize| {
                let ran = Arc::clone(&ran);
                move |_: &mut Communicator| {
                    ran.lock()
                        .expect("log")
                        .push((k, std::thread::current().id()));
                    Ok(())
                }
            };
            let (open, gate) = mpsc::channel::<()>();
            let held = bg.submit(move |_| {
                gate.recv_timeout(Duration::from_secs(60))
                    .expect("the gate");
                Ok(())
            });
            let first = bg.submit(job(1));
            let second = bg.submit(job(2));
            let (bg2, third_job) = (Arc::clone(&bg), job(3));
            let mut state = Some((open, third_job));
            let third: Arc<Mutex<Option<Request<()>>>> = Arc::default();
            let third_slot = Arc::clone(&third);
            BETWEEN.with(|h| {
                *h.borrow_mut() = Some(Box::new(move || {
                    let Some((open, third_job)) = state.take() else {
                        return;
                    };
                    // The progress thread runs the gate, 1 and 2, and goes idle.
                    open.send(()).expect("the held job");
                    while lock(&bg2.shared.state).busy || !lock(&bg2.shared.state).queue.is_empty()
                    {
                        std::thread::yield_now();
                    }
                    *lock(&third_slot) = Some(bg2.submit(third_job));
                }))
            });
            second.wait().expect("call 2");
            BETWEEN.with(|h| *h.borrow_mut() = None);
            let ran_here: Vec<usize> = lock(&ran)
                .iter()
                .filter(|(_, t)| *t == waiter)
                .map(|(k, _)| *k)
                .collect();
            assert!(
                ran_here.iter().all(|&k| k <= 2),
                "repetition {repetition}: the wait for call 2 ran calls {ran_here:?}"
            );
            held.wait().expect("the gate");
            first.wait().expect("call 1");
            let third = lock(&third).take().expect("call 3 issued");
            third.wait().expect("call 3");
            let order: Vec<usize> = lock(&ran).iter().map(|(k, _)| *k).collect();
            assert_eq!(order, vec![1, 2, 3], "repetition {repetition}: issue order");
        }
    }
}
