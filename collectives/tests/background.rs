//! [`rcoll::Background`] through its public API on in-process groups: ReduceScatter and
//! `submit` in issue order with every result checked against the independent reference,
//! `abort` with calls queued behind a running one, and a `Background` dropped with its
//! requests pending (its calls run to the end, its communicator closes).

mod common;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcoll::{Background, Element, ReduceOp};

use common::Data;

/// Far longer than a test may take: a call that ends by its timeout was not ended by what
/// the test checks.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Queues, per op, a `reduce_scatter` of `T` between `submit`s that log their turn, then
/// waits for them last to first: every result is this rank's block of the reference
/// reduction, and the jobs ran in issue order.
fn reduce_scatter_in_turn<T: Element>(bg: &Background, log: &Arc<Mutex<Vec<usize>>>) {
    let (n, r) = (bg.size(), bg.rank());
    let count = 1001;
    let ops: Vec<ReduceOp> = ReduceOp::ALL
        .into_iter()
        .filter(|o| T::DTYPE.supports(*o))
        .collect();
    let mut pending = Vec::new();
    for (k, &op) in ops.iter().enumerate() {
        let turn = Arc::clone(log);
        let marker = bg.submit(move |c| {
            turn.lock().expect("log").push(k);
            Ok(c.rank())
        });
        let data = Data::<T>::new(op, n);
        pending.push((
            op,
            marker,
            bg.reduce_scatter(data.of(r, n * count), op),
            data,
        ));
    }
    for (op, marker, request, data) in pending.into_iter().rev() {
        let got = request
            .wait()
            .unwrap_or_else(|e| panic!("rank {r}: {} {op} reduce_scatter: {e}", T::DTYPE));
        let want = data.reduced(r * count, count);
        assert_eq!(got.len(), count, "rank {r}: {} {op}", T::DTYPE);
        if let Some(i) = (0..count).find(|&i| got[i] != want[i]) {
            panic!(
                "rank {r}: {} {op} reduce_scatter element {i}: got {:?}, want {:?}",
                T::DTYPE,
                got[i],
                want[i]
            );
        }
        assert_eq!(marker.wait().expect("submit"), r, "submit's result");
    }
    let mut turns = log.lock().expect("log");
    assert_eq!(
        *turns,
        (0..ops.len()).collect::<Vec<_>>(),
        "rank {r}: submitted jobs ran out of issue order"
    );
    turns.clear();
}

/// ReduceScatter queued with `submit`ted jobs between them, every op on i8, u32, i64, f32
/// and f64, on 1 to 4 ranks: each result is this rank's block of the
/// reference reduction, each job's value comes back, and the jobs ran in issue order.
#[test]
fn reduce_scatter_and_submit_run_in_issue_order_each_result_right() {
    for n in 1..=4 {
        on_backgrounds(n, |bg| {
            let log = Arc::new(Mutex::new(Vec::new()));
            reduce_scatter_in_turn::<i8>(&bg, &log);
            reduce_scatter_in_turn::<u32>(&bg, &log);
            reduce_scatter_in_turn::<i64>(&bg, &log);
            reduce_scatter_in_turn::<f32>(&bg, &log);
            reduce_scatter_in_turn::<f64>(&bg, &log);
        });
    }
}

/// Runs `body` with each rank of a fresh `n`-rank in-process group in a `Background`, one
/// thread per rank.
fn on_backgrounds(n: usize, body: impl Fn(Background) + Sync) {
    let comms = rcoll::local::Builder::new(n)
        .timeout(TIMEOUT)
        .build()
        .expect("group");
    std::thread::scope(|s| {
        let body = &body;
        let ranks: Vec<_> = comms
            .into_iter()
            .map(|c| s.spawn(move || body(Background::new(c).expect("progress thread"))))
            .collect();
        for h in ranks {
            h.join().expect("rank thread panicked");
        }
    });
}

/// Rank 0 queues an all_reduce and a reduce_scatter behind a job that holds the progress
/// thread until the test lets it go, and aborts: the queued calls fail with the abort
/// (they never reach the wire), and so do a queued and a blocking call made afterwards;
/// ranks 1 and 2, blocked in the all_reduce rank 0 never joins, fail naming rank 0 and the
/// reason, long before their timeout.
#[test]
fn an_abort_fails_the_calls_queued_behind_a_running_one_and_the_other_ranks_calls() {
    const REASON: &str = "test: the background aborts";
    let comms = rcoll::local::Builder::new(3)
        .timeout(TIMEOUT)
        .build()
        .expect("group");
    let results: Vec<(usize, Duration, Vec<String>)> = std::thread::scope(|s| {
        let ranks: Vec<_> = comms
            .into_iter()
            .map(|mut comm| {
                s.spawn(move || {
                    let r = comm.rank();
                    if r != 0 {
                        // A barrier with rank 0 first (every connection up), then the
                        // all_reduce it never joins: the abort may reach this rank in either.
                        let started = Instant::now();
                        let mut v = vec![1.0f32; 4096];
                        let e = comm
                            .barrier()
                            .and_then(|()| comm.all_reduce_in_place(&mut v, ReduceOp::Sum))
                            .expect_err("an all_reduce rank 0 never joined succeeded");
                        return (r, started.elapsed(), vec![e.to_string()]);
                    }
                    comm.barrier().expect("rank 0's barrier");
                    let bg = Background::new(comm).expect("progress thread");
                    let (open, gate) = mpsc::channel::<()>();
                    let held = bg.submit(move |_| {
                        gate.recv().expect("the gate");
                        Ok(())
                    });
                    let sum = bg.all_reduce(vec![1.0f32; 4096], ReduceOp::Sum);
                    let scatter = bg.reduce_scatter(vec![1i64; 3 * 100], ReduceOp::Max);
                    assert!(
                        !sum.test() && !scatter.test(),
                        "the calls ran past the gate"
                    );
                    let started = Instant::now();
                    bg.abort(REASON);
                    open.send(()).expect("the held job");
                    let _ = held.wait();
                    let mut errors = Vec::new();
                    let e = sum.wait().expect_err("a call queued before the abort ran");
                    errors.push(format!("queued all_reduce: {e}"));
                    let e = scatter
                        .wait()
                        .expect_err("a call queued before the abort ran");
                    errors.push(format!("queued reduce_scatter: {e}"));
                    let late = bg.all_gather(vec![0u8; 10]);
                    let e = late.wait().expect_err("a call queued after the abort ran");
                    errors.push(format!("all_gather after: {e}"));
                    let e = bg
                        .run(|c| c.barrier())
                        .expect_err("a blocking call after the abort ran");
                    errors.push(format!("blocking barrier after: {e}"));
                    (r, started.elapsed(), errors)
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    });
    for (r, took, errors) in &results {
        assert!(
            *took < TIMEOUT / 10,
            "rank {r}: took {took:?} (timeout {TIMEOUT:?}): {errors:?}"
        );
        for e in errors {
            assert!(e.contains(REASON), "rank {r}: not the abort: {e}");
            if *r != 0 {
                assert!(e.contains("rank 0"), "rank {r}: rank 0 not named: {e}");
            }
        }
    }
}

/// Each rank queues all_reduces of different lengths and a reduce_scatter behind a job
/// that holds the progress thread, checks none has run, drops a request (rank 0 only: the
/// call must still run in its turn, or the next calls' lengths would disagree across
/// ranks), lets the job go and drops the `Background` at once: the drop runs the queue to
/// its end (every request is done when it returns), and each request kept holds its right
/// result.
#[test]
fn dropping_a_background_runs_its_pending_calls_to_the_end() {
    let n = 3;
    on_backgrounds(n, |bg| {
        let r = bg.rank();
        let (open, gate) = mpsc::channel::<()>();
        let held = bg.submit(move |_| {
            gate.recv().expect("the gate");
            Ok(())
        });
        let mut sums: Vec<_> = (0..6usize)
            .map(|k| {
                let len = 1000 + 17 * k;
                (
                    k,
                    bg.all_reduce(vec![(r * 10 + k) as u64; len], ReduceOp::Sum),
                )
            })
            .collect();
        let data = Data::<i32>::new(ReduceOp::BitXor, n);
        let scatter = bg.reduce_scatter(data.of(r, n * 333), ReduceOp::BitXor);
        assert!(
            !held.test() && !scatter.test() && sums.iter().all(|(_, s)| !s.test()),
            "rank {r}: a call ran past the gate"
        );
        if r == 0 {
            drop(sums.remove(2));
        }
        open.send(()).expect("the held job");
        drop(bg);
        // The drop returned: every call has ended (a wait now cannot block).
        assert!(
            held.test() && scatter.test() && sums.iter().all(|(_, s)| s.test()),
            "rank {r}: the drop returned with calls not run"
        );
        for (k, s) in sums {
            let v = s
                .wait()
                .unwrap_or_else(|e| panic!("rank {r}: all_reduce {k}: {e}"));
            let want: u64 = (0..n).map(|q| (q * 10 + k) as u64).sum();
            assert!(
                v.len() == 1000 + 17 * k && v.iter().all(|&x| x == want),
                "rank {r}: all_reduce {k}"
            );
        }
        let got = scatter
            .wait()
            .unwrap_or_else(|e| panic!("rank {r}: reduce_scatter: {e}"));
        assert_eq!(got, data.reduced(r * 333, 333), "rank {r}: reduce_scatter");
        held.wait().expect("the held job");
    });
}

/// Four threads per rank wait, each in its own scrambled order, on a share of 48 queued
/// all_reduces of different lengths: whichever thread runs a call (the progress thread
/// or a waiter running the queue up to its own), the calls run in issue order on every
/// rank (out of order, the lengths would disagree across ranks and the calls fail) and
/// each result is the sum of what every rank gave.
#[test]
fn threads_waiting_at_once_run_the_queue_in_issue_order() {
    let n = 3;
    let calls = 48usize;
    on_backgrounds(n, |bg| {
        let r = bg.rank();
        let mut shares: Vec<Vec<_>> = (0..4).map(|_| Vec::new()).collect();
        for k in 0..calls {
            let len = 1 + 37 * k;
            let request = bg.all_reduce(vec![(r * 1000 + k) as u64; len], ReduceOp::Sum);
            shares[k % 4].push((k, request));
        }
        std::thread::scope(|s| {
            for (t, mut share) in shares.into_iter().enumerate() {
                s.spawn(move || {
                    // Thread t waits from the middle of its share outwards.
                    let len = share.len();
                    share.rotate_left((t * 5) % len);
                    for (k, request) in share {
                        let v = request
                            .wait()
                            .unwrap_or_else(|e| panic!("rank {r}: all_reduce {k}: {e}"));
                        let want: u64 = (0..n).map(|q| (q * 1000 + k) as u64).sum();
                        assert!(
                            v.len() == 1 + 37 * k && v.iter().all(|&x| x == want),
                            "rank {r}: all_reduce {k} wrong"
                        );
                    }
                });
            }
        });
    });
}

/// A `Background` dropped while requests are still held (done, never waited for) lets its
/// communicator go with it: the other rank's next call fails at once on the closed peer
/// rather than waiting out its timeout on a communicator the requests kept alive.
#[test]
fn dropping_a_background_closes_its_communicator_though_requests_remain() {
    // Short enough that a failing run ends soon, long against a close seen at once.
    let timeout = Duration::from_secs(10);
    let comms = rcoll::local::Builder::new(2)
        .timeout(timeout)
        .build()
        .expect("group");
    let mut comms = comms.into_iter();
    let (first, mut second) = (comms.next().expect("rank 0"), comms.next().expect("rank 1"));
    std::thread::scope(|s| {
        let (dropped, told) = mpsc::channel::<()>();
        let (checked, done) = mpsc::channel::<()>();
        s.spawn(move || {
            let bg = Background::new(first).expect("progress thread");
            let kept = bg.all_reduce(vec![1u32; 64], ReduceOp::Sum);
            while !kept.test() {
                std::thread::yield_now();
            }
            drop(bg);
            dropped.send(()).expect("rank 1");
            // The request is held until rank 1 has made its call.
            done.recv().expect("rank 1 checked");
            assert_eq!(kept.wait().expect("rank 0's call"), vec![3u32; 64]);
        });
        let mut v = vec![2u32; 64];
        second
            .all_reduce_in_place(&mut v, ReduceOp::Sum)
            .expect("rank 1: the first call");
        assert!(v.iter().all(|&x| x == 3), "rank 1: the first sum");
        told.recv().expect("rank 0 dropped its background");
        let start = Instant::now();
        let e = second
            .all_reduce_in_place(&mut v, ReduceOp::Sum)
            .expect_err("rank 1: a call with rank 0 gone");
        let elapsed = start.elapsed();
        checked.send(()).expect("rank 0");
        let text = e.to_string();
        assert!(
            elapsed < timeout / 2 && text.contains("closed"),
            "rank 1: failed after {elapsed:?} with: {text}"
        );
    });
}
