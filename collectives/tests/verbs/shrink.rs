//! Shrink over verbs: 3 ranks loop over all_reduces of registered memory (sent zero-copy),
//! the last kills itself mid-loop, and the two survivors agree, shrink and finish over
//! the queue pairs they had, every result checked against sums computed here, the
//! buffers registered before the shrink and one registered after still sent zero-copy;
//! and a survivor that had to reclaim zero-copy writes to the dead rank ([`reaped`]).
//! Part of the `verbs` test binary (`../verbs.rs`).

use rcoll::{Communicator, ReduceOp};

use super::common::{kill_myself_soon, shrink_contribution, shrink_expected, started};

const ELEMS: usize = 1 << 17;
const STEPS: usize = 16;

/// Scenario `shrink`: rank `n - 1` dies at step `RCOLL_TEST_KILL_STEP`.
pub fn shrink(comm: Communicator) {
    let mut comm = comm;
    let (me, n) = (comm.rank(), comm.size());
    let victim = n - 1;
    let at: usize = std::env::var("RCOLL_TEST_KILL_STEP")
        .expect("kill step")
        .parse()
        .expect("a step");
    let mut buf = comm.alloc::<i64>(ELEMS).expect("registered memory");
    let mut alive: Vec<usize> = (0..n).collect();
    let mut zero_copy_at_shrink = None;
    let mut step = 0;
    while step < STEPS {
        if me == victim && step == at {
            kill_myself_soon();
        }
        let r = alive[comm.rank()];
        for (i, x) in buf.iter_mut().enumerate() {
            *x = shrink_contribution(r, step, i);
        }
        match comm.all_reduce_in_place(&mut buf[..], ReduceOp::Sum) {
            Ok(()) => {
                let bad = (0..ELEMS).find(|&i| buf[i] != shrink_expected(&alive, step, i));
                assert_eq!(bad, None, "rank {me}, step {step}, members {alive:?}");
                step += 1;
            }
            Err(e) => {
                println!("FAILED {step}: {e}");
                let new = comm.shrink(&[]).expect("shrink");
                let s = new.shrunk().expect("shrunk").clone();
                alive = s.parent_ranks.iter().map(|&p| alive[p]).collect();
                println!("SHRUNK excluded {:?} members {alive:?}", s.excluded);
                comm = new;
                zero_copy_at_shrink = Some(comm.statistics().zero_copy_sends);
                let mut next = [step as u64];
                comm.all_reduce_in_place(&mut next, ReduceOp::Min)
                    .expect("the first call after the shrink");
                step = next[0] as usize;
            }
        }
    }
    assert_eq!(alive, (0..n - 1).collect::<Vec<_>>(), "rank {me}: members");
    // Memory registered after the shrink too.
    let mut fresh = comm.alloc::<i64>(ELEMS).expect("registered memory");
    assert!(
        fresh.is_registered(),
        "rank {me}: memory allocated after the shrink is not registered"
    );
    for (i, x) in fresh.iter_mut().enumerate() {
        *x = shrink_contribution(me, STEPS, i);
    }
    let before_fresh = comm.statistics().zero_copy_sends;
    comm.all_reduce_in_place(&mut fresh[..], ReduceOp::Sum)
        .expect("all_reduce after the shrink");
    assert!(
        comm.statistics().zero_copy_sends > before_fresh,
        "rank {me}: no send from the fresh buffer went zero-copy"
    );
    let bad = (0..ELEMS).find(|&i| fresh[i] != shrink_expected(&alive, STEPS, i));
    assert_eq!(bad, None, "rank {me}: the fresh buffer");
    let before = zero_copy_at_shrink.expect("a shrink happened");
    assert!(
        comm.statistics().zero_copy_sends > before,
        "rank {me}: no send went zero-copy after the shrink ({before} before)"
    );
    assert_eq!(
        comm.statistics().borrowed_in_flight,
        0,
        "rank {me}: memory still lent"
    );
    println!(
        "SURVIVORS {alive:?}, zero-copy sends {before} at the shrink, {} at the end",
        comm.statistics().zero_copy_sends
    );
}

/// Scenario `reaped`: after a first all_reduce, rank 2 waits to be killed (by the test), and
/// once it is dead (the file `go` in `RCOLL_TEST_STARTED_DIR`) rank 1 sends it registered
/// memory, which goes zero-copy: writes the dead rank's device never acknowledges, so the
/// failed send must reclaim them by stopping that queue pair before it returns. Rank 0
/// fails receiving from rank 2. Both survivors then shrink (the stopped pair is the dead
/// rank's failure, nothing of the survivors') and all_reduce, every result checked.
pub fn reaped(comm: Communicator) {
    let mut comm = comm;
    let me = comm.rank();
    let mut buf = comm.alloc::<i64>(ELEMS).expect("registered memory");
    let fill = |buf: &mut [i64], r: usize, s: usize| {
        for (i, x) in buf.iter_mut().enumerate() {
            *x = shrink_contribution(r, s, i);
        }
    };
    fill(&mut buf, me, 0);
    comm.all_reduce_in_place(&mut buf[..], ReduceOp::Sum)
        .expect("the first all_reduce");
    let bad = (0..ELEMS).find(|&i| buf[i] != shrink_expected(&[0, 1, 2], 0, i));
    assert_eq!(bad, None, "rank {me}: the first all_reduce");
    started();
    if me == 2 {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    // Nothing of rcoll's runs meanwhile: the survivors learn of the death only in the call.
    let dir = std::env::var("RCOLL_TEST_STARTED_DIR").expect("started dir");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::path::Path::new(&format!("{dir}/go")).exists() {
        assert!(std::time::Instant::now() < until, "rank {me}: no go");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let zero_copy = comm.statistics().zero_copy_sends;
    let failed = match me {
        1 => comm.send(&buf[..], 2),
        _ => comm.recv(&mut buf[..], 2),
    };
    let e = failed.expect_err("rank 2 is dead");
    println!("FAILED {e}");
    if me == 1 {
        assert!(
            comm.statistics().zero_copy_sends > zero_copy,
            "rank 1: the send to the dead rank did not go zero-copy: nothing to reclaim"
        );
    }
    assert_eq!(
        comm.statistics().borrowed_in_flight,
        0,
        "rank {me}: memory still lent after the failed call"
    );
    let mut comm = comm.shrink(&[]).expect("shrink");
    let excluded = comm.shrunk().expect("shrunk").excluded.clone();
    assert_eq!(excluded, vec![2], "rank {me}: excluded");
    fill(&mut buf, me, 1);
    comm.all_reduce_in_place(&mut buf[..], ReduceOp::Sum)
        .expect("all_reduce after the shrink");
    let bad = (0..ELEMS).find(|&i| buf[i] != shrink_expected(&[0, 1], 1, i));
    assert_eq!(bad, None, "rank {me}: the all_reduce after the shrink");
    println!("SURVIVORS [0, 1]");
}
