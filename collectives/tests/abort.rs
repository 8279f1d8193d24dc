//! Aborting a communicator from another thread ([`rcoll::AbortHandle`]) while a call is
//! blocked on it, over the in-process transport, TCP and shared memory: the call ends with
//! an error saying this rank aborted it — not the timeout it would otherwise reach — and
//! the other ranks' calls fail naming the aborting rank.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rcoll::process::{Builder, TransportKind, UniqueId};
use rcoll::transport::TransportError;
use rcoll::{Communicator, Error, ReduceOp};

/// Far longer than the test may take: a call that returns its timeout was not aborted.
const TIMEOUT: Duration = Duration::from_secs(60);

fn local_pair() -> Vec<Communicator> {
    rcoll::local::Builder::new(2)
        .timeout(TIMEOUT)
        .build()
        .expect("local group")
}

fn process_pair(kind: TransportKind) -> Vec<Communicator> {
    let id = UniqueId::new().expect("unique id");
    let mut comms: Vec<Communicator> = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..2)
            .map(|r| {
                let id = &id;
                s.spawn(move || {
                    Builder::from_unique_id(id, r, 2)
                        .and_then(|b| b.transport(kind).timeout(TIMEOUT).build())
                        .unwrap_or_else(|e| panic!("rank {r} over {kind:?}: {e}"))
                })
            })
            .collect();
        ranks.into_iter().map(|h| h.join().expect("rank")).collect()
    });
    comms.sort_by_key(Communicator::rank);
    comms
}

/// Whether `e` is this transport's "aborted by `by`".
fn aborted_by(e: &Error, by: u32) -> bool {
    let shown = e.to_string();
    match e {
        Error::Transport {
            source: TransportError::Aborted { by: b, .. },
            ..
        } => b.0 == by,
        _ => shown.contains(&format!("aborted by {}", rcoll::Rank(by))),
    }
}

/// Waits until `entering` is set and then this process's thread named `name` (at most 15
/// bytes, the kernel's limit) sleeps in the kernel (state `S` in
/// `/proc/self/task/<tid>/stat`): blocked in its call's wait, past the spin that precedes
/// it. The flag is set right before the call, so that a sleep before it (a contended
/// allocator lock as the thread starts) does not open the gate.
fn until_asleep(entering: &AtomicBool, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let asleep = entering.load(Ordering::Acquire)
            && std::fs::read_dir("/proc/self/task")
                .expect("/proc/self/task")
                .flatten()
                .any(|task| {
                    let read =
                        |f: &str| std::fs::read_to_string(task.path().join(f)).unwrap_or_default();
                    // The state follows the command's closing parenthesis.
                    read("comm").trim() == name
                        && read("stat")
                            .rsplit_once(") ")
                            .is_some_and(|(_, rest)| rest.starts_with('S'))
                });
        if asleep {
            return;
        }
        assert!(Instant::now() < deadline, "thread {name} never blocked");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Rank 0 blocks in an all_reduce that rank 1 does not join; another thread aborts rank 0
/// through its handle. Rank 0's call must end with the abort (the interruption, not the
/// 60 s timeout), and rank 1, calling afterwards, must fail naming rank 0.
fn abort_interrupts(mut comms: Vec<Communicator>, what: &str) {
    let mut one = comms.pop().expect("rank 1");
    let mut zero = comms.pop().expect("rank 0");
    // Every connection up first.
    std::thread::scope(|s| {
        let a = s.spawn(|| zero.barrier());
        one.barrier().expect("rank 1's barrier");
        a.join().expect("rank 0").expect("rank 0's barrier");
    });
    let handle = zero.abort_handle();
    let entering = AtomicBool::new(false);
    let (r0, since_abort) = std::thread::scope(|s| {
        // Named for this test alone: the tests of this file run at once, in one process.
        let name = format!("r0-{what}");
        let entering = &entering;
        let blocked = std::thread::Builder::new()
            .name(name.clone())
            .spawn_scoped(s, move || {
                let mut buf = vec![1.0f32; 1 << 16];
                entering.store(true, Ordering::Release);
                let r = zero.all_reduce_in_place(&mut buf, ReduceOp::Sum);
                (r, Instant::now(), zero)
            })
            .expect("rank 0's thread");
        // The gate: rank 0's call is in its wait, so the abort must interrupt it (an abort
        // before the call would make it refuse to start instead, a different path).
        until_asleep(entering, &name);
        let at = Instant::now();
        handle.abort("test: abort from another thread");
        let (r, ended, zero) = blocked.join().expect("rank 0's thread");
        drop(zero);
        (r, ended.duration_since(at))
    });
    let e = r0.expect_err("rank 0's call succeeded without rank 1");
    assert!(
        aborted_by(&e, 0),
        "{what}: rank 0's call ended with {e} ({since_abort:?} after the abort), not the abort"
    );
    assert!(
        since_abort < TIMEOUT / 10,
        "{what}: rank 0's call ended {since_abort:?} after the abort"
    );
    eprintln!("{what}: rank 0's blocked call ended {since_abort:?} after the abort: {e}");
    let started = Instant::now();
    let mut buf = vec![1.0f32; 1 << 16];
    let e = one
        .all_reduce_in_place(&mut buf, ReduceOp::Sum)
        .expect_err("rank 1's call succeeded without rank 0");
    assert!(
        aborted_by(&e, 0),
        "{what}: rank 1 failed with {e}, not rank 0's abort"
    );
    assert!(
        started.elapsed() < TIMEOUT / 10,
        "{what}: rank 1 waited {:?}",
        started.elapsed()
    );
}

#[test]
fn an_abort_ends_a_blocked_call_in_process() {
    abort_interrupts(local_pair(), "in-process");
}

#[test]
fn an_abort_ends_a_blocked_call_over_tcp() {
    abort_interrupts(process_pair(TransportKind::Tcp), "tcp");
}

#[test]
fn an_abort_ends_a_blocked_call_over_shared_memory() {
    abort_interrupts(process_pair(TransportKind::Shm), "shm");
}

/// An abort raised while no call runs reaches the other ranks when the communicator is
/// dropped (the handle cannot reach the transport itself), and the handle's reason is the
/// one they see.
#[test]
fn an_abort_between_calls_reaches_the_others_when_dropped() {
    let mut comms = local_pair();
    let mut one = comms.pop().expect("rank 1");
    let zero = comms.pop().expect("rank 0");
    let handle = zero.abort_handle();
    handle.abort("between calls");
    assert!(handle.is_aborted());
    drop(zero);
    let mut buf = vec![0u8; 8];
    let e = one
        .broadcast_in_place(&mut buf, 0)
        .expect_err("rank 1's call succeeded");
    assert!(aborted_by(&e, 0), "{e}");
    assert!(e.to_string().contains("between calls"), "{e}");
}
