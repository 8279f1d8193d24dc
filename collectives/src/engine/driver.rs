//! The driver: pumps an [`Execution`] against a transport until it finishes, sleeping in
//! [`Group::wait`](rcoll_transport::Group::wait) when nothing can move, and failing with a timeout when nothing has
//! moved for the configured time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rcoll_transport::Transport;

use super::core::{self, ExecError, Execution, Position, Progress};
use super::memory::Memory;
use super::small::SmallSpare;
use super::small::{self, SmallExecution};
use crate::abort::ABORT_POLL;
use crate::element::Element;
use crate::op::ReduceOp;
use crate::schedule::plan::Plan;

/// Polls before going to sleep: a message that is a few microseconds away is cheaper to
/// spin for than a condition-variable round trip.
const SPINS_BEFORE_SLEEP: u32 = 64;

/// How long a stalled rank waits for its peers to answer a liveness probe.
const PROBE_TIME: Duration = Duration::from_millis(500);

/// Why [`run`] stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The execution failed.
    Exec(ExecError),
    /// Nothing moved for `waited`; the rank was waiting on `blocked_on`.
    Stalled {
        /// How long nothing moved.
        waited: Duration,
        /// The peer and position it was waiting on, if known.
        blocked_on: Option<(rcoll_transport::Rank, Position)>,
        /// The peers that did not answer a liveness probe then (stopped or hung: the
        /// likely cause, when the rank waited on is only waiting too).
        unresponsive: Vec<rcoll_transport::Rank>,
        /// The transport's own account of that peer ([`Group::stall_report`](rcoll_transport::Group::stall_report)).
        transport: String,
    },
    /// Waiting itself failed (the group was aborted or a peer closed); with what this rank
    /// was waiting for, if known.
    Wait(
        Option<(rcoll_transport::Rank, Position)>,
        rcoll_transport::TransportError,
    ),
    /// The communicator's [`AbortHandle`](crate::abort::AbortHandle) was raised, from
    /// another thread; with what this rank was waiting for, if known.
    Aborted(Option<(rcoll_transport::Rank, Position)>),
}

/// Runs `plan` to completion.
///
/// `timeout` bounds the time without progress, not the whole call: a large collective
/// that keeps moving never times out, a stuck one fails after `timeout`.
///
/// On success every send from the caller's memory has completed (a segment counts as done
/// only then); on failure the transport reaps those still in flight
/// ([`Transport::reap_borrowed`]) before this returns (or unwinds, if the engine panics),
/// so the caller never gets back a buffer that a device is still reading.
#[allow(clippy::too_many_arguments)] // the call's full description; one caller
pub fn run<T: Element>(
    plan: &Plan,
    collective: u32,
    schedule: u32,
    segment_elems: usize,
    op: ReduceOp,
    mem: &mut Memory<'_, T>,
    io: &mut dyn Transport,
    timeout: Duration,
    abort: &AtomicBool,
    spare: &mut Spare,
) -> Result<(), RunError> {
    let limits = Limits { timeout, abort };
    if small::fits::<T>(plan, segment_elems) {
        let exec = SmallExecution::new(plan, collective, schedule, op, &mut spare.small);
        let (exec, result) = drive(exec, mem, io, limits);
        exec.recycle();
        result
    } else {
        let exec = Execution::new(
            plan,
            collective,
            schedule,
            segment_elems,
            op,
            &mut spare.core,
        );
        let (exec, result) = drive(exec, mem, io, limits);
        exec.recycle(&mut spare.core);
        result
    }
}

/// Both executors' state, kept between calls so that a call allocates nothing.
#[derive(Default)]
pub struct Spare {
    core: core::Spare,
    small: SmallSpare,
}

/// When the driver gives up: no progress for `timeout`, or `abort` raised.
#[derive(Clone, Copy)]
struct Limits<'a> {
    timeout: Duration,
    abort: &'a AtomicBool,
}

/// What the driver needs of an executor.
trait Executor {
    fn poll<T: Element>(
        &mut self,
        mem: &mut Memory<'_, T>,
        io: &mut dyn Transport,
    ) -> Result<Progress, ExecError>;
    fn blocked_on(&self) -> Option<(rcoll_transport::Rank, Position)>;
}

impl Executor for Execution<'_> {
    fn poll<T: Element>(
        &mut self,
        mem: &mut Memory<'_, T>,
        io: &mut dyn Transport,
    ) -> Result<Progress, ExecError> {
        Execution::poll(self, mem, io)
    }
    fn blocked_on(&self) -> Option<(rcoll_transport::Rank, Position)> {
        Execution::blocked_on(self)
    }
}

impl Executor for SmallExecution<'_, '_> {
    fn poll<T: Element>(
        &mut self,
        mem: &mut Memory<'_, T>,
        io: &mut dyn Transport,
    ) -> Result<Progress, ExecError> {
        SmallExecution::poll(self, mem, io)
    }
    fn blocked_on(&self) -> Option<(rcoll_transport::Rank, Position)> {
        SmallExecution::blocked_on(self)
    }
}

/// Pumps `exec` to the end; on failure (or a panic: a bug) the transport first reaps the
/// sends still reading the caller's memory, so the caller never gets back a buffer a
/// device still reads.
fn drive<E: Executor, T: Element>(
    mut exec: E,
    mem: &mut Memory<'_, T>,
    io: &mut dyn Transport,
    limits: Limits<'_>,
) -> (E, Result<(), RunError>) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pump(&mut exec, mem, &mut *io, limits)
    }));
    match result {
        Ok(Ok(())) => (exec, Ok(())),
        Ok(Err(e)) => {
            io.reap_borrowed();
            (exec, Err(e))
        }
        Err(panic) => {
            io.reap_borrowed();
            std::panic::resume_unwind(panic)
        }
    }
}

fn pump<E: Executor, T: Element>(
    exec: &mut E,
    mem: &mut Memory<'_, T>,
    io: &mut dyn Transport,
    Limits { timeout, abort }: Limits<'_>,
) -> Result<(), RunError> {
    // Set when the engine has found nothing to do for a while: a small call's spin for
    // its peer's message reads no clock (the deadline starts that many polls late: by
    // microseconds).
    let mut last_move: Option<Instant> = None;
    let mut idle_polls = 0u32;
    loop {
        let Progress { moved, finished } = exec.poll(mem, io).map_err(RunError::Exec)?;
        if finished {
            return Ok(());
        }
        // A load per poll: a call that keeps moving (a large one) ends at an abort too.
        if abort.load(Ordering::Relaxed) {
            return Err(RunError::Aborted(exec.blocked_on()));
        }
        if moved {
            idle_polls = 0;
            last_move = None;
            continue;
        }
        idle_polls = idle_polls.saturating_add(1);
        if idle_polls < SPINS_BEFORE_SLEEP {
            io.relax();
            continue;
        }
        let now = Instant::now();
        let last_move = *last_move.get_or_insert(now);
        // A timeout too large to add to the clock means "no deadline".
        let deadline = last_move.checked_add(timeout);
        if deadline.is_some_and(|d| now >= d) {
            let waited = now.duration_since(last_move);
            let blocked_on = exec.blocked_on();
            return Err(RunError::Stalled {
                waited,
                transport: io.stall_report(blocked_on.as_ref().map(|(peer, _)| *peer)),
                blocked_on,
                unresponsive: io.unresponsive(PROBE_TIME),
            });
        }
        // Never asleep longer than ABORT_POLL: an abort from another thread cannot wake
        // the transport's own wait.
        let poll = now + ABORT_POLL;
        let wake = deadline.map_or(poll, |d| d.min(poll));
        io.wait(wake)
            .map_err(|e| RunError::Wait(exec.blocked_on(), e))?;
    }
}
