//! What the rank processes of the `verbs` test binary (`../verbs.rs`) run, by scenario
//! (`RCOLL_TEST_SCENARIO`): collectives over Soft-RoCE and their checks, and the loops
//! that a killed peer or a lossy link interrupts.

use rcoll::{Algorithm, Collective, Communicator, ReduceOp};

use super::common::{
    self, all_reduce_until_a_rank_dies, ring_send_recv, run_one, sweep_collectives,
};
use super::placement;

pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::Ring,
    Algorithm::DoubleBinaryTree,
    Algorithm::HalvingDoubling,
    // The ring where the group has one host; two levels where it has several.
    Algorithm::Hierarchical,
];

fn check(comm: &mut Communicator, failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "rank {}: {}",
        comm.rank(),
        failures.join("\n")
    );
}

/// Every collective x ring, double binary tree, halving-doubling and hierarchical (where
/// they serve it),
/// in place and out of place, at 0, 1, 7 and 10007 elements, plus point-to-point.
pub fn sweep(comm: &mut Communicator) {
    let failures = sweep_collectives(comm, &ALGORITHMS, &[0, 1, 7, 10_007]);
    check(comm, failures);
    ring_send_recv(comm, 300_000);
    // Many small calls in a row: every slot a peer lends must come back to it (a small
    // message handed between transports and kept by the wrong one starves the pair
    // after a few hundred).
    let n = comm.size() as i64;
    for i in 0..2000i64 {
        let mut x = [i, comm.rank() as i64];
        comm.all_reduce_in_place(&mut x, rcoll::ReduceOp::Sum)
            .unwrap_or_else(|e| panic!("small all_reduce #{i}: {e}"));
        assert_eq!(x, [i * n, n * (n - 1) / 2], "small all_reduce #{i}");
    }
}

/// The largest buffer of [`large`] and [`zero_copy`], in MiB: 64 unless
/// `RCOLL_TEST_LARGE_MIB` says otherwise.
fn large_mib() -> usize {
    std::env::var("RCOLL_TEST_LARGE_MIB").map_or(64, |v| v.parse().expect("MiB"))
}

/// Every collective at 1 MiB of f32 per rank's buffer and all_reduce at 64 MiB
/// (`RCOLL_TEST_LARGE_MIB` sets it), with each algorithm, in place and out of place.
pub fn large(comm: &mut Communicator) {
    let large_mib = large_mib();
    let mut failures = Vec::new();
    for algorithm in ALGORITHMS {
        for collective in Collective::SCHEDULED
            .into_iter()
            .filter(|c| algorithm.serves(*c))
        {
            for in_place in [false, true] {
                let count = (1 << 20) / 4 / comm.size() * comm.size();
                if let Err(e) = run_one::<f32>(
                    comm,
                    algorithm,
                    collective,
                    ReduceOp::Sum,
                    count,
                    0,
                    in_place,
                ) {
                    failures.push(format!(
                        "{algorithm} {collective} 1 MiB in_place={in_place}: {e}"
                    ));
                }
            }
        }
        for in_place in [false, true] {
            if let Err(e) = run_one::<f32>(
                comm,
                algorithm,
                Collective::AllReduce,
                ReduceOp::Sum,
                large_mib << 18,
                0,
                in_place,
            ) {
                failures.push(format!(
                    "{algorithm} all_reduce {large_mib} MiB in_place={in_place}: {e}"
                ));
            }
        }
    }
    check(comm, failures);
}

/// Collectives on memory from `Communicator::alloc` (registered once, sent zero-copy):
/// all_reduce in place and out of place at 4 and 64 MiB (`RCOLL_TEST_LARGE_MIB` sets the
/// second) with each algorithm, broadcast and all_gather; the sources stay intact and the
/// zero-copy path is taken.
pub fn zero_copy(comm: &mut Communicator) {
    let (n, r) = (comm.size(), comm.rank());
    let large_mib = large_mib();
    println!("rank {r}: {}", comm.transport_details());
    let mine = |i: usize| ((r + 1) * (i % 1000)) as f32;
    let total = |i: usize| ((n * (n + 1) / 2) * (i % 1000)) as f32;
    // The first element where `got` differs from `want`.
    let differs = |got: &[f32], want: &[f32]| got.iter().zip(want).position(|(g, w)| g != w);
    for count in [1 << 20, large_mib << 18] {
        let mut src = comm.alloc::<f32>(count).expect("alloc");
        let mut dst = comm.alloc::<f32>(count).expect("alloc");
        assert!(src.is_registered() && dst.is_registered());
        // Computed once: per element and per call they took a tenth of this test's time
        // in the emulated VM.
        let input: Vec<f32> = (0..count).map(mine).collect();
        let sum: Vec<f32> = (0..count).map(total).collect();
        for algorithm in ALGORITHMS {
            src.copy_from_slice(&input);
            comm.with_algorithm(algorithm)
                .all_reduce(&src, &mut dst, ReduceOp::Sum)
                .expect("all_reduce");
            let bad = differs(&dst, &sum).or(differs(&src, &input));
            assert_eq!(bad, None, "{algorithm} out of place, {count} elements");
            comm.with_algorithm(algorithm)
                .all_reduce_in_place(&mut src, ReduceOp::Sum)
                .expect("all_reduce in place");
            let bad = differs(&src, &sum);
            assert_eq!(bad, None, "{algorithm} in place, {count} elements");
        }
        src.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = if r == 1 { i as f32 } else { -1.0 });
        comm.broadcast_in_place(&mut src, 1).expect("broadcast");
        assert!(
            src.iter().enumerate().all(|(i, &x)| x == i as f32),
            "broadcast"
        );
    }
    let per = 1 << 18;
    let mut part = comm.alloc::<i64>(per).expect("alloc");
    part.iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = (r * per + i) as i64);
    let mut all = comm.alloc::<i64>(per * n).expect("alloc");
    comm.all_gather(&part, &mut all).expect("all_gather");
    assert!(
        all.iter().enumerate().all(|(i, &x)| x == i as i64),
        "all_gather"
    );
    // Point-to-point receives are never offered: their tags are never stale, so an offer a
    // sender did not use would wait for the tag to come round again.
    let before = comm.statistics().placed_receives;
    let mut from_left = comm.alloc::<f32>(1 << 20).expect("alloc");
    let mut to_right = comm.alloc::<f32>(1 << 20).expect("alloc");
    to_right
        .iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = mine(i));
    let left = (r + n - 1) % n;
    comm.send_recv(&to_right, (r + 1) % n, &mut from_left, left)
        .expect("send_recv");
    let theirs = |i: usize| ((left + 1) * (i % 1000)) as f32;
    assert!(
        from_left.iter().enumerate().all(|(i, &x)| x == theirs(i)),
        "send_recv"
    );
    assert_eq!(
        comm.statistics().placed_receives,
        before,
        "a point-to-point receive was offered"
    );
    assert!(
        comm.statistics().zero_copy_sends > 0,
        "no send went zero-copy"
    );
    if n == 2 {
        placement::ring_sends_what_it_reduced_from_the_output(comm);
        placement::in_place_the_all_gather_half_lands_in_place(comm);
    }
    let placed = comm.statistics().placed_receives;
    println!(
        "rank {r}: {} zero-copy sends, {placed} receives written in place",
        comm.statistics().zero_copy_sends
    );
    if !offering() {
        assert_eq!(placed, 0, "offers are off (RCOLL_IB_DIRECT, RCOLL_IB_SCOPED), yet {placed} receives landed in place");
    } else {
        // Broadcast, all_gather and the all-gather half of every all_reduce only copy what
        // they receive: some of it lands in place.
        assert!(placed > 0, "no receive landed in its destination");
    }
    assert_eq!(
        comm.statistics().borrowed_in_flight,
        0,
        "an offer outlived its call"
    );
}

/// Zero-copy broadcasts from every root, and all_reduces, on registered buffers: a root's
/// call ends on the completions of writes into its peers' offered destinations, which
/// free no slot buffer. Run with the periodic poll off (`RCOLL_IB_WAKE_CHECK_MS=0`) and a
/// busy-poll longer than the timeout, a wait that took such a completion and did not say
/// so spins, or sleeps, to the deadline: the call fails instead of finishing late.
/// Whether this suite's settings make the transport offer destinations: `RCOLL_IB_DIRECT`
/// if set, else exactly when windows are in use (`RCOLL_IB_SCOPED=1`; every run of the
/// zero-copy scenario states one of the two, so that the expectation does not depend on
/// the device).
pub fn offering() -> bool {
    let var = |k: &str| std::env::var(k).ok();
    match (
        var("RCOLL_IB_DIRECT").as_deref(),
        var("RCOLL_IB_SCOPED").as_deref(),
    ) {
        (Some(d), _) => d == "1",
        (None, Some(s)) => s == "1",
        (None, None) => panic!("the zero-copy scenario needs RCOLL_IB_DIRECT or RCOLL_IB_SCOPED"),
    }
}

pub fn wake_ups(comm: &mut Communicator) {
    let (n, r) = (comm.size(), comm.rank());
    let count = 1 << 18;
    let mut buf = comm.alloc::<f32>(count).expect("alloc");
    let mut out = comm.alloc::<f32>(count).expect("alloc");
    for call in 0..4 {
        for root in 0..n {
            buf.iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = if r == root { (i + call) as f32 } else { -1.0 });
            comm.broadcast_in_place(&mut buf, root)
                .unwrap_or_else(|e| panic!("rank {r}: broadcast from {root}, call {call}: {e}"));
            let bad = buf
                .iter()
                .enumerate()
                .position(|(i, &x)| x != (i + call) as f32);
            assert_eq!(bad, None, "rank {r}: broadcast from {root}, call {call}");
        }
        buf.fill((r + 1) as f32);
        comm.all_reduce(&buf, &mut out, ReduceOp::Sum)
            .unwrap_or_else(|e| panic!("rank {r}: all_reduce, call {call}: {e}"));
        let sum = (n * (n + 1) / 2) as f32;
        assert!(
            out.iter().all(|&x| x == sum),
            "rank {r}: all_reduce, call {call}"
        );
    }
    assert!(
        comm.statistics().zero_copy_sends > 0,
        "no send went zero-copy"
    );
    assert!(
        comm.statistics().placed_receives > 0,
        "no receive landed in its destination"
    );
    println!(
        "rank {r}: {} zero-copy sends, {} receives written in place",
        comm.statistics().zero_copy_sends,
        comm.statistics().placed_receives
    );
}

/// Loops over an all_reduce until the group fails (one rank is killed); the error must
/// name the dead rank.
pub fn killed(comm: &mut Communicator) {
    all_reduce_until_a_rank_dies(comm, 1 << 20, 100_000);
}

/// Zero-copy all_reduces from a registered buffer until a peer dies. When the call fails no
/// send may still be reading the buffer (a write to the dead peer would otherwise retry for
/// seconds after the call returned), no range of it may still be offered to a peer's device
/// to write, and the buffer is dropped (deregistered, freed) at once.
pub fn killed_zero_copy(comm: &mut Communicator) {
    let mut buf = comm.alloc::<f32>(4 << 20).expect("alloc");
    for i in 0..100_000 {
        if i == 1 {
            // After a first call: see `common::started`.
            common::started();
        }
        buf.fill(1.0);
        let result = comm
            .with_algorithm(Algorithm::Ring)
            .all_reduce_in_place(&mut buf, ReduceOp::Sum);
        if let Err(e) = result {
            let left = comm.statistics().borrowed_in_flight;
            println!("RANK-ERROR {e}");
            println!("BORROWED-IN-FLIGHT {left}");
            assert_eq!(left, 0, "a device may still read the returned buffer");
            drop(buf);
            return;
        }
    }
    panic!("no peer died");
}

/// The ring's collectives over a link that loses 1% of packets and reorders a quarter of
/// them (netem on both veths, in the VM): rxe retransmits, and every result is still right;
/// also in place in registered memory, where offers travel with the sends that read it.
pub fn lossy(comm: &mut Communicator) {
    let mut failures = Vec::new();
    let (n, r) = (comm.size(), comm.rank());
    let count = 1 << 20;
    let mut buf = comm.alloc::<f32>(count).expect("alloc");
    for algorithm in [Algorithm::Ring, Algorithm::HalvingDoubling] {
        buf.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = ((r + 1) * (i % 1000)) as f32);
        match comm
            .with_algorithm(algorithm)
            .all_reduce_in_place(&mut buf, ReduceOp::Sum)
        {
            Ok(()) => {
                let want = |i: usize| ((n * (n + 1) / 2) * (i % 1000)) as f32;
                if let Some(i) = (0..count).find(|&i| buf[i] != want(i)) {
                    failures.push(format!("{algorithm} in place, registered: element {i}"));
                }
            }
            Err(e) => failures.push(format!("{algorithm} in place, registered: {e}")),
        }
    }
    for collective in [
        Collective::AllReduce,
        Collective::Broadcast,
        Collective::AllGather,
        Collective::ReduceScatter,
    ] {
        for count in [7, 100_002] {
            if let Err(e) = run_one::<f32>(
                comm,
                Algorithm::Ring,
                collective,
                ReduceOp::Sum,
                count / comm.size() * comm.size(),
                0,
                false,
            ) {
                failures.push(format!("{collective} of {count}: {e}"));
            }
        }
    }
    check(comm, failures);
}

/// Splits the group by color = rank % 2 (with the ranks alternating over rxe0 and rxe1,
/// each new group is one device's ranks), then all_reduces in the new group and the parent
/// in turn, every result checked: the new groups connect anew over verbs beside the parent.
pub fn split(comm: &mut Communicator) {
    let (r, n) = (comm.rank(), comm.size());
    let mut child = comm
        .split(Some((r % 2) as u32), r as i64)
        .expect("split")
        .expect("every rank has a color");
    let members: Vec<usize> = (0..n).filter(|q| q % 2 == r % 2).collect();
    assert_eq!(
        child.size(),
        members.len(),
        "rank {r}: the new group's size"
    );
    assert_eq!(
        child.transport_name(),
        "verbs",
        "{}",
        child.transport_details()
    );
    for i in 0..20u32 {
        let len = 1000 + 4099 * i as usize;
        let mut v = vec![(r as u32 + 1) * (i + 1); len];
        child
            .all_reduce_in_place(&mut v, ReduceOp::Sum)
            .expect("the new group's all_reduce");
        let want: u32 = members.iter().map(|&q| (q as u32 + 1) * (i + 1)).sum();
        assert!(
            v.iter().all(|&x| x == want),
            "rank {r}: the new group's round {i}"
        );
        let mut w = vec![i + r as u32; 333];
        comm.all_reduce_in_place(&mut w, ReduceOp::Sum)
            .expect("the parent's all_reduce");
        let want: u32 = (0..n as u32).map(|q| i + q).sum();
        assert!(
            w.iter().all(|&x| x == want),
            "rank {r}: the parent's round {i}"
        );
    }
    println!(
        "RANK-SPLIT {} of {} over {}",
        child.rank(),
        child.size(),
        child.transport_details()
    );
}
